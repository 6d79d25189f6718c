# shellcheck shell=bash
# tests/lib/common.sh: what every shell test shares, sourced by each
# component's test library (tests/*/lib.sh, tests/lib/loopback-grid.sh) and
# by tests that have none: the "ok"/"FAIL" lines and their count, skipping,
# bounded waits on something observable, and one bounded way to stop what
# the test started.
#
#   pass WHAT              counts ($passed) and prints "ok   WHAT"
#   fail WHAT [FILE...]    counts ($failed) and prints "FAIL WHAT", the last
#                          lines of each FILE, then what the sourcing library's
#                          fail_details shows (if defined); with fail_stops set
#                          it exits 1 (tests whose steps build on one another)
#   die WHAT               fail WHAT, then exit 1
#   skip WHY               "SKIPPED: WHY", exit 77 (ctest's SKIP_RETURN_CODE)
#   need_built FILE..., need_commands NAME...: skip unless present
#   wait_for DESC TENTHS CMD...   CMD succeeds within TENTHS tenths of a second
#   wait_log FILE ERE [PID [COUNT]]   FILE holds COUNT lines matching ERE
#   wait_gone PID TENTHS   process PID has ended
#   owned_pid PID          PID is still a process this test started
#   stop_pids PID...       SIGTERM, a bounded wait, then SIGKILL
#   stop_children [PID...] stop_pids on PID... and every child of the shell
#
# Every wait is bounded; one that runs out says what it waited for on stderr.

passed=0
failed=0

pass() {
	passed=$((passed + 1))
	printf 'ok   %s\n' "$1"
}

fail() {
	local f
	failed=$((failed + 1))
	printf 'FAIL %s\n' "$1"
	for f in "${@:2}"; do
		[[ -s $f ]] && tail -n 40 "$f" | sed "s#^#     | ${f##*/}: #"
	done
	if declare -F fail_details >/dev/null; then fail_details; fi
	if [[ -n ${fail_stops:-} ]]; then exit 1; fi
	return 0
}

die() {
	fail "$@"
	exit 1
}

skip() {
	echo "SKIPPED: $*"
	exit 77
}

need_built() {
	local f
	for f in "$@"; do
		[[ -x $f ]] || skip "$f not built"
	done
}

need_commands() {
	local t
	for t in "$@"; do
		command -v "$t" >/dev/null || skip "$t missing (scripts/install-deps)"
	done
}

# wait_for DESC TENTHS CMD...: runs CMD (quiet) every 0.1 s until it succeeds,
# at most TENTHS times.
wait_for() {
	local desc=$1 tries=$2 i
	shift 2
	for ((i = 0; i < tries; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	echo "timed out after $((tries / 10)).$((tries % 10)) s waiting for $desc" >&2
	return 1
}

# wait_log FILE ERE [PID [COUNT]]: waits, at most 10 s, until FILE holds COUNT
# (default 1) lines matching the extended regex ERE; 1 when the time runs out
# or process PID (when given and not empty) ends first.
wait_log() {
	local file=$1 re=$2 pid=${3:-} count=${4:-1} i n
	for ((i = 0; i < 200; i++)); do
		n=$(grep -cE -- "$re" "$file" 2>/dev/null) || true
		((${n:-0} >= count)) && return 0
		if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
			n=$(grep -cE -- "$re" "$file" 2>/dev/null) || true
			((${n:-0} >= count)) && return 0
			echo "process $pid ended before $file held $count line(s) matching /$re/" >&2
			return 1
		fi
		sleep 0.05
	done
	echo "timed out after 10 s waiting for $count line(s) matching /$re/ in $file" >&2
	return 1
}

# wait_gone PID TENTHS: 0 once process PID has ended (it may not be reaped).
wait_gone() {
	local pid=$1 tries=$2 i
	for ((i = 0; i < tries; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	return 1
}

# What marks the processes a test starts (inherited through the
# environment): owned_pid knows them by it even once they left the test's
# process tree (a daemon that forked itself away).
export QCG_TEST_OWNER=${QCG_TEST_OWNER:-$$}

# owned_pid PID: whether PID is still a process this test started, i.e. a
# process (not a thread of another process) that descends from the test's
# shell or carries its QCG_TEST_OWNER.  A pid the test kept for a process
# that has ended may already name someone else's: a daemon under load
# elsewhere on the machine makes thousands of threads a second, so ids come
# round within seconds, and a signal to any thread id stops that whole
# process (another test's broker died of exactly this).
owned_pid() {
	local p=$1 i tgid stat
	[[ $p =~ ^[0-9]+$ ]] || return 1
	tgid=$(sed -n 's/^Tgid:[[:space:]]*//p' "/proc/$p/status" 2>/dev/null) || return 1
	[[ $tgid == "$p" ]] || return 1
	{ tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qx "QCG_TEST_OWNER=$QCG_TEST_OWNER" &&
		return 0
	for ((i = 0; i < 64 && p > 1; i++)); do
		[[ $p == "$$" ]] && return 0
		stat=$(cat "/proc/$p/stat" 2>/dev/null) || return 1
		stat=${stat##*) }
		read -r _ p _ <<<"$stat"
	done
	return 1
}

# stop_pids PID...: sends each PID that is still the test's (owned_pid)
# SIGCONT (a stopped process does not act on SIGTERM) and SIGTERM, then
# waits, at most stop_secs (30) seconds, for all of them to end; one still
# running then is named and SIGKILLed.  Reaps those that are children.
# Bounded because, in an ASan build on a loaded machine, LeakSanitizer's
# check at a daemon's exit can hang for good (its tracer child waits for a
# thread that never stops), and the test hung with it after its checks had
# passed.  A test about stopping checks the stop itself.  Keeps $?, for an
# EXIT trap; empty arguments, and pids no longer the test's, are left out.
stop_pids() {
	local rc=$? p t alive secs=${stop_secs:-30} mine=()
	for p in "$@"; do
		[[ -n $p ]] && owned_pid "$p" && mine+=("$p")
	done
	for p in "${mine[@]}"; do
		kill -CONT "$p" 2>/dev/null || true
		kill "$p" 2>/dev/null || true
	done
	for ((t = 0; t < secs * 10; t++)); do
		alive=0
		for p in "${mine[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		((alive)) || break
		sleep 0.1
	done
	for p in "${mine[@]}"; do
		owned_pid "$p" || continue
		echo "cleanup: $(ps -o args= -p "$p" | cut -c1-80) still ran $secs s after SIGTERM: killed"
		kill -KILL "$p" 2>/dev/null || true
	done
	for p in "$@"; do [[ -n $p ]] && { wait "$p" 2>/dev/null || true; }; done
	return "$rc"
}

# stop_children [PID...]: stop_pids on the PIDs (a daemon the test started
# outside its own shell) and on every child of the test's shell, so nothing
# the test started outlives it.
stop_children() {
	local rc=$? children
	mapfile -t children < <(jobs -p)
	stop_pids "$@" "${children[@]}"
	wait 2>/dev/null || true
	return "$rc"
}
