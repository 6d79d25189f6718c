# shellcheck shell=bash
# What the lab's Slurm tests (test-slurm.sh, ../trixie/test-trixie-slurm.sh)
# check alike, sourced after test-lib.sh.  SLURM_SITES: the sites their jobs
# use.

HOME_DIR=$LAB_STATE/user/home
SUBMIT=("$QCG_BUILD_DIR/launch/qcg-submit" --via "$LAB login {} --")

# start_job OUT ARGS...: qcg-submit ARGS... in the background, its output in
# OUT, SIGINT at its default as a terminal's foreground job has it (a
# background job of a script has it ignored, and so has a test started in
# the background: a shell cannot undo what it was started with, env can);
# returns once its part at nata, the first site, is submitted.  Sets JOB_PID
# and MAIN_OUT (that part's output file).
start_job() {
	local out=$1
	shift
	env --default-signal=INT "${SUBMIT[@]}" "$@" >"$out" 2>&1 &
	JOB_PID=$!
	BG_PIDS+=("$JOB_PID")
	poll 20 "the submission at nata" grep -q "^qcg-submit: nata: Slurm job" "$out" ||
		{ show "$out"; fail "no submission at nata"; }
	MAIN_OUT=$HOME_DIR/qcg-nata-$(sed -n 's/^qcg-submit: nata: Slurm job \([0-9]*\).*/\1/p' "$out").out
}

# start_sleeper OUT SITE...: a job over SITE... (nata first) whose every
# rank sleeps 300 s; returns once its mpirun has started.
start_sleeper() {
	local out=$1
	shift
	start_job "$out" --start-timeout 60 "$@" -- /bin/sleep 300
	poll 60 "the program to start" grep -qs "mpirun starts" "$MAIN_OUT" ||
		{ show "$out"; fail "sleep did not start"; }
}

# submit_exit PID OUT SECONDS: qcg-submit's exit status, once it has exited
# within SECONDS.  If it has not: 124, after showing what it was doing (the
# tail of its output OUT, its processes with their ages: the step that
# holds it) and killing it; the test's files are kept (scratch_cleanup).
submit_exit() {
	local pid=$1 out=$2 secs=$3 i rc=0
	if poll "$secs" "qcg-submit to exit" pid_gone "$pid"; then
		wait "$pid" || rc=$?
		return "$rc"
	fi
	echo "qcg-submit (pid $pid) still runs after ${secs}s: its output's tail and its processes (age in s):" >&2
	show "$out" 15
	proc_tree "$pid" | sed 's/^/     | /' >&2
	for i in $(proc_tree "$pid" | awk '{ print $1 }'); do
		owned_pid "$i" && kill -KILL "$i" 2>/dev/null
	done
	wait "$pid" 2>/dev/null || true
	return 124
}

# proc_tree PID: "pid age-in-s command" of PID and every process below it.
proc_tree() {
	ps -e -o pid=,ppid=,etimes=,args= | awk -v top="$1" '
		{ parent[$1] = $2; line[$1] = $1 " " $3 "s"; for (i = 4; i <= NF; i++) line[$1] = line[$1] " " $i; order[++n] = $1 }
		END {
			keep[top] = 1
			for (changed = 1; changed;) {
				changed = 0
				for (i = 1; i <= n; i++) { p = order[i]; if (!keep[p] && keep[parent[p]]) { keep[p] = 1; changed = 1 } }
			}
			for (i = 1; i <= n; i++) if (keep[order[i]]) print substr(line[order[i]], 1, 160)
		}'
}

# doc_row KEY FILE: docs/user.md's table row of qcg-submit's messages holding
# KEY is a line of FILE (numbers may differ, words may not).
doc_row() {
	python3 "$LAB_SRC/../docs/check_samples.py" --row "$1" "$2" >"$WORK/row" 2>&1 ||
		{ show "$WORK/row"; return 1; }
}

# running_jobs: "SITE ID STATE" for each job Slurm knows at those sites.
running_jobs() {
	local s
	for s in $SLURM_SITES; do "$LAB" login "$s" -- squeue -h -o "$s %i %T" 2>/dev/null; done
}
no_running_jobs() { [ -z "$(running_jobs)" ]; }

# slurm_pids: every Slurm and munge process on this machine (pgrep -x takes
# one name).  A zombie (a daemon's parent, exited when it forked, not reaped
# yet) runs nowhere: left out.
slurm_pids() {
	local n p
	for n in slurmctld slurmd slurmstepd slurmscriptd munged; do pgrep -x "$n" || true; done |
		while read -r p; do
			case $(ps -o stat= -p "$p" 2>/dev/null) in Z* | "") ;; *) echo "$p" ;; esac
		done
}

slurm_restore() {
	"$LAB" up >"$WORK/restore" 2>&1 || { show "$WORK/restore"; echo "FAIL: up without --batch" >&2; }
}

# scancel_fw_part SUBMIT OUT: scancel of fw's part of the running job whose
# qcg-submit is process SUBMIT (its output in OUT) ends the job everywhere,
# naming fw as docs/user.md's row says (which lists the other parts: the job
# must be over nata, fw and sym); no job and nothing of the user left.  A
# failure says which of these it was.
scancel_fw_part() {
	local submit=$1 out=$2 fw_job t0 rc=0
	fw_job=$("$LAB" login fw -- squeue -h -u nobody -o %i | head -n 1)
	t0=$(ms)
	"$LAB" login fw -- scancel "$fw_job"
	submit_exit "$submit" "$out" 30 || rc=$?
	if [ "$rc" = 124 ]; then
		bad "scancel of fw's part: qcg-submit did not exit within 30 s"
	elif [ "$rc" = 0 ]; then
		show "$out"
		bad "scancel of fw's part: qcg-submit exits 0"
	elif ! grep -q "the part at fw (Slurm job $fw_job) ended (CANCELLED)" "$out"; then
		# qcg-submit's own lines: the tail of $out is the first part's output.
		grep -a '^qcg-submit: ' "$out" | sed 's/^/     | /' >&2
		bad "scancel of fw's part: qcg-submit exits $rc without naming fw's part"
	elif ! doc_row "ended (CANCELLED)" "$out"; then
		bad "scancel of fw's part: qcg-submit's line is not docs/user.md's row: $(grep 'the part at fw' "$out")"
	else
		note "ok   scancel of fw's part: qcg-submit exits $rc after $(($(ms) - t0)) ms: $(grep 'the part at fw' "$out")"
	fi
	poll 20 "no job left" no_running_jobs || bad "jobs left after scancel: $(running_jobs)"
	no_user_processes "scancel of fw's part" || true
}

# slurm_put_back: the lab back without Slurm: no Slurm or munge process, no
# state.
slurm_put_back() {
	trap scratch_cleanup EXIT
	slurm_restore
	slurm_gone() { [ -z "$(slurm_pids)" ]; }
	poll 10 "Slurm to be gone" slurm_gone || bad "Slurm or munge still runs after up without --batch: $(slurm_pids)"
	[ ! -e "$LAB_STATE/slurm" ] || bad "$LAB_STATE/slurm is left after up without --batch"
}
