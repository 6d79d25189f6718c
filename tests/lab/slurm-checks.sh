# shellcheck shell=bash
# What the lab's Slurm tests (test-slurm.sh, ../trixie/test-trixie-slurm.sh)
# check alike, sourced after test-lib.sh.  SLURM_SITES: the sites their jobs
# use.

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
	wait_exit "$submit" 30 || rc=$?
	if [ "$rc" = 0 ]; then
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
