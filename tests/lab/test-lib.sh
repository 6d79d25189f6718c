# shellcheck shell=bash disable=SC2034 # LAB, LAB_STATE, TEST_DIR, progs: for the tests sourcing this.
# Shared by the lab tests (sourced).  A lab test exits 77, after saying why, when it
# cannot run here: ctest reports it as skipped (SKIP_RETURN_CODE 77).
set -euo pipefail

# skip, fail (here it ends the test: its steps build on one another; bad
# counts a failed check and goes on), stop_pids: tests/lib/common.sh.
# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
fail_stops=1

LAB_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB=$(cd "$LAB_SRC/../.." && pwd)/lab/qcg-lab
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$LAB_SRC/../../build}
LAB_STATE=${QCG_LAB_DIR:-/run/qcg-lab}
# Where tests keep what they need from one another (the host's rules before up).
TEST_DIR=${QCG_LAB_TEST_DIR:-$QCG_BUILD_DIR/tests/lab}

note() { echo "-- $*"; }

require_lab() {
	[ "$(id -u)" -eq 0 ] || skip "lab tests need root (network namespaces, iptables)"
	command -v ip >/dev/null 2>&1 || skip "ip (iproute2) is not installed"
	ip netns list >/dev/null 2>&1 || skip "ip netns is unavailable here"
	local t
	for t in iptables-restore tc ping ss timeout flock; do
		command -v "$t" >/dev/null 2>&1 || skip "$t is not installed (scripts/install-deps)"
	done
}

require_delayline() {
	[ -x "$QCG_BUILD_DIR/qcg-delayline" ] ||
		skip "qcg-delayline is not built in $QCG_BUILD_DIR (libnetfilter_queue missing?)"
}

# poll SECONDS WHAT CMD...: waits for CMD to succeed, bounded.
poll() {
	local secs=$1 what=$2 i
	shift 2
	for ((i = 0; i < secs * 20; i++)); do
		"$@" && return 0
		sleep 0.05
	done
	echo "timed out after ${secs}s waiting for $what" >&2
	return 1
}

# Not running (gone, or a zombie nobody has reaped yet).
pid_gone() {
	local state
	state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 0
	[ -z "$state" ] || [ "$state" = Z ] || [ "$state" = X ]
}

# The lab's namespaces (qcg-lab's lab_namespaces), not those other tests of
# the project make at the same time (qcg-tv-*, qcg-hp-*: helper-traverse-ns,
# helper-punch-ns), which made lab-up and lab-down fail on a shared machine.
lab_netns() {
	ip netns list 2>/dev/null |
		awk '$1 ~ /^qcg-(inet|broker|proxy|r-(open|fw|nata|natb|sym|rst|unr)|(open|fw|nata|natb|sym|rst|unr)([0-9]+|-head))$/ { print $1 }' |
		sort
}
lab_netns_count() { lab_netns | wc -l; }

# The kernel ids of the lab's namespaces, to find processes that outlive them.
lab_netns_ids() {
	local ns
	for ns in $(lab_netns); do stat -L -c %i "/run/netns/$ns" 2>/dev/null || true; done
}

# Live (not zombie) qcg-delayline processes.
live_delaylines() { ps -C qcg-delayline -o pid=,stat= 2>/dev/null | awk '$2 !~ /^Z/ { print $1 }'; }
no_live_delaylines() { [ -z "$(live_delaylines)" ]; }

# Processes (not zombies) inside any of the given namespace ids.
processes_in_netns() {
	local ids=" $* " p id state
	for p in /proc/[0-9]*; do
		id=$(readlink "$p/ns/net" 2>/dev/null) || continue
		id=${id#net:[}; id=${id%]}
		case $ids in *" $id "*) ;; *) continue ;; esac
		state=$(awk '{ print $3 }' "$p/stat" 2>/dev/null) || continue
		[ "$state" = Z ] && continue
		echo "${p#/proc/} $(cat "$p/comm" 2>/dev/null)"
	done
}

# Asserts that nothing of the lab is left: namespace, host interface, state,
# delay line, or a process still inside a lab namespace (given their ids).
assert_clean() {
	local left
	left=$(lab_netns)
	[ -z "$left" ] || fail "namespaces left: ${left//$'\n'/ }"
	left=$(ip -br link | awk '$1 ~ /^qcg-/ { print $1 }')
	[ -z "$left" ] || fail "interfaces left in the host namespace: ${left//$'\n'/ }"
	[ ! -e "$LAB_STATE" ] || fail "state dir $LAB_STATE left"
	poll 10 "delay lines to exit" no_live_delaylines || fail "delay lines left: $(live_delaylines)"
	if [ $# -gt 0 ]; then
		left=$(processes_in_netns "$@")
		[ -z "$left" ] || fail "processes left in lab namespaces: $left"
	fi
	note "clean: no qcg- namespace, host interface, state dir, delay line or process left"
}

host_rules() {
	nft -s list ruleset 2>/dev/null || true
	iptables -S 2>/dev/null || true
}

# ---------------------------------------------------------------------------------
# Tests through the lab's services: qcg-cat (and qcg-lab-accept) run with
# `qcg-lab exec NODE --`, which gives them PATH, QCG_HELPER_SOCKET and the lab's
# QCG_JOB_SECRET.  Each test uses a job of its own (new_job), works in a scratch
# directory and kills what it started in the background (trap set by scratch).

LAB_ACCEPT=$QCG_BUILD_DIR/tests/lab/qcg-lab-accept
BROKER_URL=https://203.0.113.10:7700/
WORK=""
BG_PIDS=()

require_services() {
	local owner
	[ -x "$QCG_BUILD_DIR/tools/qcg-cat" ] || skip "qcg-cat is not built in $QCG_BUILD_DIR"
	grep -qx 'SERVICES=yes' "$LAB_STATE/config" 2>/dev/null ||
		fail "the shared lab runs no services (did lab-up fail?)"
	# The lab is the machine's: another build's test suite may have replaced it.
	owner=$(sed -n 's/^BUILD_DIR=//p' "$LAB_STATE/config")
	[ "$(readlink -f "$owner")" = "$(readlink -f "$QCG_BUILD_DIR")" ] ||
		fail "the lab runs the services of $owner, not of $QCG_BUILD_DIR: another lab test suite running?"
}

# mpirun installed and the MPI test programs built; sets progs, where they are.
require_mpi_programs() {
	command -v mpirun >/dev/null 2>&1 || skip "mpirun is not installed"
	progs=$QCG_BUILD_DIR/tests/mpi
	[ -x "$progs/qcg-mpi-allpairs" ] || skip "the MPI test programs are not built in $progs"
}

scratch() {
	WORK=$(mktemp -d "${TMPDIR:-/tmp}/qcg-lab-test.XXXXXX")
	mark_logs
	trap scratch_cleanup EXIT
}

# Must be the first command of the EXIT trap: it reads the test's exit status.
# A failed test keeps its files (the outputs a rare failure needs) and says
# where.
scratch_cleanup() {
	local rc=$? pid
	[ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || logged_since_marks >&2
	stop_pids "${BG_PIDS[@]}"
	[ -n "$WORK" ] || return 0
	if [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ]; then
		rm -rf "$WORK"
	else
		echo "== the test's files are kept in $WORK" >&2
	fi
}

# How long each service log was when the test began.  A failed test prints the
# warnings and errors the services logged meanwhile: the lab, and its logs, are
# gone by the time anyone reads a CI report.
declare -A LOG_MARK=()
mark_logs() {
	local f
	for f in "$LAB_STATE"/log/*.log; do
		[ -f "$f" ] && LOG_MARK[$f]=$(wc -l <"$f")
	done
}
logged_since_marks() {
	local f lines
	echo "== warnings and errors the lab's services logged during the test (last 30 per log):"
	for f in "$LAB_STATE"/log/*.log; do
		[ -f "$f" ] || continue
		lines=$(tail -n +$((${LOG_MARK[$f]:-0} + 1)) "$f" | grep -E '\] (warn|error) ' | tail -n 30) || true
		[ -z "$lines" ] || printf '== %s\n%s\n' "${f##*/}" "$lines"
	done
}

# A job id no other test (or earlier run) uses.
new_job() { echo "$1-$$-$RANDOM"; }

ms() { date +%s%3N; }

# run_bg NODE CMD...: CMD in NODE in the background, stdout and stderr to
# $WORK/<name>.out/.err where name is $BG_NAME; its pid in $BG_PID.
run_bg() {
	local node=$1
	shift
	"$LAB" exec "$node" -- "$@" <"${BG_IN:-/dev/null}" >"$WORK/$BG_NAME.out" 2>"$WORK/$BG_NAME.err" &
	BG_PID=$!
	BG_PIDS+=("$BG_PID")
}

# cat_listen NODE RANK NAME [qcg-cat options]: a qcg-cat --json listen of job $JOB in
# the background (output $WORK/NAME.out, progress $WORK/NAME.err); returns once it
# has published, fails if it dies first.  Its pid in $BG_PID.
cat_listen() {
	local node=$1 rank=$2 name=$3
	shift 3
	BG_NAME=$name run_bg "$node" qcg-cat --job "$JOB" --rank "$rank" --json "$@" listen
	wait_published "$BG_PID" "$WORK/$name.err" '"event":"listening"' "rank $rank on $node"
}

# wait_published PID FILE PATTERN WHAT: until FILE holds PATTERN; fails if PID exits.
wait_published() {
	local pid=$1 file=$2 pattern=$3 what=$4 i
	for ((i = 0; i < 200; i++)); do
		grep -q "$pattern" "$file" 2>/dev/null && return 0
		kill -0 "$pid" 2>/dev/null || { cat "$file" >&2; fail "$what exited before listening"; }
		sleep 0.05
	done
	cat "$file" >&2
	fail "$what: not listening after 10 s"
}

# wait_exit PID SECONDS: the exit status of a background process, bounded.
wait_exit() {
	local pid=$1 secs=$2 i rc=0
	for ((i = 0; i < secs * 20; i++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid" || rc=$?
			return "$rc"
		fi
		sleep 0.05
	done
	fail "process $pid still runs after ${secs}s"
}

# One field of a flat JSON line on stdin: json_field KEY.
json_field() { sed -n "s/.*\"$1\":\(\"[^\"]*\"\|[^,}]*\).*/\1/p" | tr -d '"' | tail -n 1; }

# The last JSON line of a file that has EVENT.
json_event() { grep "\"event\":\"$2\"" "$1" | tail -n 1; }

broker_stat() {
	"$LAB" exec broker -- qcg-broker --config "$LAB_STATE/etc/broker.conf" --stats --json \
		--url "$BROKER_URL" | json_field "$1"
}

# frontend_stat SITE KEY
frontend_stat() {
	"$LAB" exec "$1-head" -- qcg-frontend --config "$LAB_STATE/etc/frontend-$1.conf" --stats \
		--json | json_field "$2"
}

# The broker remembers which technique failed between two clusters: a test that
# makes one fail on purpose restarts the broker afterwards (memory is per run),
# and `up` waits until every service is connected again.
forget_outcomes() {
	"$LAB" service stop broker >/dev/null
	"$LAB" up >/dev/null
}

# cat_transfer FROM TO [NAME]: qcg-cat sends $WORK/in from node FROM to a listener
# on node TO (job $JOB, the next two ranks of the counter XFER_RANK) and checks it
# arrived intact.  Sets XFER_NAME (the files' name in $WORK), XFER_FROM_RANK,
# XFER_SENT and XFER_ACCEPTED (the two sides' last JSON lines), XFER_TECH (what
# the connecting side used) and XFER_SETUP_US.
XFER_RANK=0
cat_transfer() {
	local from=$1 to=$2 rto=$XFER_RANK listener
	XFER_NAME=${3:-$1-$2-$XFER_RANK}
	XFER_FROM_RANK=$((XFER_RANK + 1))
	XFER_RANK=$((XFER_RANK + 2))
	cat_listen "$to" "$rto" "$XFER_NAME" --timeout 60
	listener=$BG_PID
	"$LAB" exec "$from" -- qcg-cat --job "$JOB" --rank "$XFER_FROM_RANK" --json --timeout 30 \
		connect "$rto" <"$WORK/in" >/dev/null 2>"$WORK/$XFER_NAME.cerr" ||
		{ cat "$WORK/$XFER_NAME.cerr"; fail "$from -> $to: connect failed"; }
	wait_exit "$listener" 60 || { cat "$WORK/$XFER_NAME.err"; fail "$from -> $to: the listener failed"; }
	cmp -s "$WORK/in" "$WORK/$XFER_NAME.out" ||
		fail "$from -> $to: what arrived differs from what was sent"
	XFER_SENT=$(json_event "$WORK/$XFER_NAME.cerr" sent)
	XFER_ACCEPTED=$(json_event "$WORK/$XFER_NAME.err" accepted)
	XFER_TECH=$(echo "$XFER_SENT" | json_field technique)
	XFER_SETUP_US=$(echo "$XFER_SENT" | json_field setup_us)
}

# xfer_expect FROM TO TECH BYTES TO_FAR FROM_FAR: the last cat_transfer FROM -> TO
# used TECH on both ends and sent BYTES, and qcg-cat --json's far ends
# ("address") start with TO_FAR on the connecting side and FROM_FAR on the
# accepting one ("[2001:db8:6::11]:": the family and the address).
xfer_expect() {
	local from=$1 to=$2 tech=$3 bytes=$4 to_far=$5 from_far=$6 far
	[ "$XFER_TECH" = "$tech" ] || fail "$from -> $to: the connecting side used $XFER_TECH, not $tech: $XFER_SENT"
	[ "$(echo "$XFER_ACCEPTED" | json_field technique)" = "$tech" ] ||
		fail "$from -> $to: the accepting side says $XFER_ACCEPTED"
	[ "$(echo "$XFER_SENT" | json_field bytes)" = "$bytes" ] || fail "$from -> $to: sent $XFER_SENT"
	far=$(echo "$XFER_SENT" | json_field address)
	[[ $far == "$to_far"* ]] || fail "$from -> $to: connected to $far, not $to_far"
	far=$(echo "$XFER_ACCEPTED" | json_field address)
	[[ $far == "$from_far"* ]] || fail "$from -> $to: accepted from $far, not $from_far"
}

LAB_UID=$(id -u nobody)
LAB_COMPUTE="open1 open2 fw1 fw2 nata1 nata2 natb1 natb2 sym1 sym2"

# Tests that count failed checks and go on: bad says one (fail without the
# stop), the test ends with [ "$failed" = 0 ] || fail ...
bad() { fail_stops='' fail "$@"; }

# show FILE: its last lines, indented, for a failed check.
show() { tail -n "${2:-20}" "$1" 2>/dev/null | sed 's/^/     | /' >&2; }

# user_processes: "node pid command" for each process of the lab's user in any
# compute node's namespace.
user_processes() {
	local n pid
	for n in $LAB_COMPUTE; do
		for pid in $(ip netns pids "qcg-$n" 2>/dev/null); do
			[ "$(stat -c %u "/proc/$pid" 2>/dev/null)" = "$LAB_UID" ] || continue
			echo "$n $pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-80)"
		done
	done
}

# no_user_processes WHAT: within 20 s, no process of the user left on any node.
no_user_processes() {
	local i
	for ((i = 0; i < 200; i++)); do
		[ -z "$(user_processes)" ] && return 0
		sleep 0.1
	done
	bad "$1: processes left 20 s later:"
	user_processes | sed 's/^/     | /' >&2
	user_processes | awk '{ print $2 }' | xargs -r kill -9 2>/dev/null || true
	return 1
}
