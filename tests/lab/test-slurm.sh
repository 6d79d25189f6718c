#!/usr/bin/env bash
# lab-slurm: every site a Slurm cluster (qcg-lab up --batch slurm) and a
# cross-site job submitted as a user of those clusters submits it: qcg-submit
# runs each site's own sbatch (on its head, as the lab's user, through
# `qcg-lab login`), the parts' `srun qcg-agent` serve the job, the first
# part's qcg-mpirun runs the all-pairs program over 2 nodes of nata (NAT) and
# fw (firewall) and 1 of sym (symmetric NAT; --nodes sym:1), every task given
# its helper's socket by docs/admin.md's TaskProlog.  Checked: the program's
# verdict and exit status from the batch jobs' output files; a success is
# quiet (no srun or slurmstepd line in any part's output); MPI_Abort's
# status; the secret on no command line and in no world-readable file;
# scancel of one site's part ends the job everywhere, nothing of the user
# left; a part that cannot start (its queue full) times out naming its site;
# Ctrl-C while that site's slurmctld is stopped exits 130 without waiting
# for it, naming it, nata's part cancelled; one its partition can never hold
# (3 nodes of 2) fails at once, naming it; Ctrl-C, and a site refusing the
# submission, cancel every part.  Each failure's line is docs/user.md's row
# for it.  A qcg-submit that does not exit in time is shown with its
# processes (the step that holds it).  The lab is put back without Slurm.
. "$(dirname "$0")/test-lib.sh"
# shellcheck source=slurm-checks.sh
. "$(dirname "$0")/slurm-checks.sh"
require_lab
require_services
command -v mpirun >/dev/null 2>&1 || skip "mpirun is not installed"
command -v slurmctld >/dev/null 2>&1 || skip "slurmctld is not installed (scripts/install-deps)"
[ -x "$QCG_BUILD_DIR/launch/qcg-submit" ] || skip "qcg-submit is not built"
progs=$QCG_BUILD_DIR/tests/mpi
[ -x "$progs/qcg-mpi-allpairs" ] || skip "the MPI test programs are not built in $progs"
scratch
# The staged BTL (qcg-lab login stages it, as qcg-lab mpirun does).
COMPONENTS=$LAB_STATE/user/lib:$(ompi_info --path pkglibdir 2>/dev/null | sed -n 's/.*Pkglibdir: *//p')

SLURM_SITES="nata fw sym"
# A controller the test stopped (case 4b) runs again whatever happens.
stopped=""
trap 'rc=$?; [ -z "$stopped" ] || kill -CONT "$stopped"; slurm_restore; (exit $rc); scratch_cleanup' EXIT

"$LAB" up --batch slurm >"$WORK/up" 2>&1 || { show "$WORK/up"; fail "up --batch slurm"; }
note "$(tail -n 1 "$WORK/up")"
"$LAB" status >"$WORK/status" 2>&1 || true
for s in open fw nata natb sym; do
	grep -q "^  $s: partition batch\* up, 2 nodes idle ${s}\[1-2\]" "$WORK/status" ||
		{ show "$WORK/status" 8; bad "status does not show site $s's Slurm nodes idle"; }
done
# None outside the lab's namespaces.
[ -n "$(slurm_pids)" ] || bad "no Slurm process runs"
for pid in $(slurm_pids); do
	# (A process that ended meanwhile is left out.)
	ns=$(ip netns identify "$pid" 2>/dev/null) || continue
	[[ $ns == qcg-* ]] || bad "$(cat "/proc/$pid/comm") [$pid] runs outside the lab's namespaces"
done

# 0. --nodes naming a site that is not given: refused before anything runs.
rc=0
"${SUBMIT[@]}" --nodes natb:1 nata fw -- /bin/true >"$WORK/out0" 2>&1 || rc=$?
if [ "$rc" = 2 ] && grep -q "^qcg-submit: --nodes natb:1: natb is not one of the sites (nata fw)" "$WORK/out0"; then
	note "ok   --nodes natb:1 for sites nata fw: $(head -n 1 "$WORK/out0")"
else
	show "$WORK/out0"
	bad "--nodes natb:1 for sites nata fw: exit $rc"
fi

# 1. The all-pairs program over nata, fw (2 nodes each) and sym (1 node).
t0=$(date +%s.%N)
rc=0
timeout -k 10 180 "${SUBMIT[@]}" --start-timeout 60 --nodes sym:1 nata fw sym -- \
	--mca mca_base_component_path "$COMPONENTS" "$progs/qcg-mpi-allpairs" 1048576 \
	>"$WORK/out1" 2>&1 || rc=$?
t1=$(date +%s.%N)
ids=$(sed -n 's/^qcg-submit: done after .*outputs: .*: \(.*\))$/\1/p' "$WORK/out1")
main_out=$HOME_DIR/qcg-nata-$(tr ' ' '\n' <<<"$ids" | sed -n 's/^nata://p').out
if [ "$rc" = 0 ] && grep -q "^PASS allpairs: 5 ranks" "$main_out" 2>/dev/null; then
	note "ok   allpairs over nata, fw, sym (5 ranks) by qcg-submit: $(grep '^PASS' "$main_out")"
else
	show "$WORK/out1" 30
	bad "qcg-submit allpairs: status $rc, no PASS in $main_out"
fi
for s in fw:2 sym:1; do
	f=$HOME_DIR/qcg-${s%:*}-$(tr ' ' '\n' <<<"$ids" | sed -n "s/^${s%:*}://p").out
	[ "$(grep -c 'ready: agent' "$f" 2>/dev/null)" = "${s#*:}" ] ||
		{ show "$f"; bad "${s%:*}'s output file does not show its ${s#*:} agent(s) ready"; }
done
# Quiet: Slurm's complaints about steps it had to end, in no part's output.
for s in nata fw sym; do
	f=$HOME_DIR/qcg-$s-$(tr ' ' '\n' <<<"$ids" | sed -n "s/^$s://p").out
	if grep -E "^(srun|slurmstepd)|\*\*\* STEP|CANCELLED|error:" "$f"; then
		bad "the part at $s of a successful job printed Slurm's complaints above ($f)"
	fi
done
grep -E "^(srun|slurmstepd)|\*\*\* STEP" "$WORK/out1" && bad "qcg-submit printed Slurm's complaints above for a successful job"
for f in "$HOME_DIR"/qcg-*.out; do
	[ "$(stat -c %a "$f")" = 600 ] || bad "$f is mode $(stat -c %a "$f"), not 600"
done
started=$(sed -n 's/^qcg-submit: mpirun starts at \([0-9.]*\).*/\1/p' "$main_out")
ended=$(sed -n 's/^qcg-submit: mpirun exited with status 0 at \([0-9.]*\).*/\1/p' "$main_out")
if [ -n "$started" ] && [ -n "$ended" ]; then
	note "time: submission to mpirun $(awk -v a="$t0" -v b="$started" 'BEGIN { printf "%.1f", b - a }') s, mpirun $(awk -v a="$started" -v b="$ended" 'BEGIN { printf "%.1f", b - a }') s, qcg-submit in all $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
fi

# 2. A rank's MPI_Abort: its status is qcg-submit's.
rc=0
timeout -k 10 120 "${SUBMIT[@]}" --start-timeout 60 nata fw -- \
	--mca mca_base_component_path "$COMPONENTS" "$progs/qcg-mpi-abort" 9 >"$WORK/out2" 2>&1 || rc=$?
if [ "$rc" = 9 ]; then note "ok   MPI_Abort(9) in a rank: qcg-submit exits 9"; else
	show "$WORK/out2"
	bad "MPI_Abort(9): qcg-submit exits $rc"
fi
poll 20 "the jobs to end" no_running_jobs || bad "jobs left after the MPI_Abort: $(running_jobs)"

# 3. scancel of fw's part while the program runs: the job ends everywhere.
start_sleeper "$WORK/out3" nata fw sym
sleep_on_sym2() { user_processes | grep -q '^sym2 .*sleep'; }
poll 60 "the program on sym2" sleep_on_sym2 || { user_processes >&2; bad "no rank on sym2"; }
# The secret: in the agents' environment, on no command line, in no file
# others may read.
agent=$(user_processes | awk '/qcg-agent/ { print $2; exit }')
secret=""
[ -z "$agent" ] || secret=$(tr '\0' '\n' <"/proc/$agent/environ" 2>/dev/null | sed -n 's/^QCG_JOB_SECRET=//p')
if [ -z "$secret" ]; then
	bad "no QCG_JOB_SECRET in an agent's environment"
else
	for f in /proc/[0-9]*/cmdline; do
		tr '\0' ' ' 2>/dev/null <"$f" | grep -q "$secret" && bad "the secret is on the command line of $f"
	done 2>/dev/null
	while read -r f; do
		grep -qF "$secret" "$f" 2>/dev/null && bad "the secret is in $f, which others may read"
	done < <(find "$LAB_STATE" -type f -perm /044 2>/dev/null)
	note "ok   the job's secret is on no command line and in no world-readable file"
fi
scancel_fw_part "$JOB_PID" "$WORK/out3"

# 4. fw's queue full (the user's own job holds both nodes): the part there
# does not start; the job is cancelled everywhere, naming fw.
"$LAB" login fw -- sbatch -N 2 -o /dev/null --wrap "sleep 120" >"$WORK/blocker" 2>&1 ||
	{ show "$WORK/blocker"; fail "sbatch of a blocker at fw"; }
rc=0
t0=$(ms)
timeout -k 10 60 "${SUBMIT[@]}" --start-timeout 8 nata fw -- /bin/true >"$WORK/out4" 2>&1 || rc=$?
if [ "$rc" != 0 ] && grep -q "the part at fw (Slurm job [0-9]*) did not start within 8 s (PENDING" "$WORK/out4" &&
	doc_row "did not start within" "$WORK/out4"; then
	note "ok   fw's queue full: after $(($(ms) - t0)) ms: $(grep 'did not start' "$WORK/out4")"
else
	show "$WORK/out4"
	bad "fw's queue full: qcg-submit exits $rc without naming fw"
fi

# 4b. Ctrl-C while fw's Slurm does not answer (its slurmctld stopped, fw's
# part queued behind the blocker): qcg-submit exits 130 without waiting for
# fw, naming it (its scancel is bounded), and nata's part is cancelled.
ctld=""
for pid in $(slurm_pids); do
	[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmctld ] &&
		[ "$(ip netns identify "$pid" 2>/dev/null)" = qcg-fw-head ] && ctld=$pid
done
[ -n "$ctld" ] || fail "no slurmctld in qcg-fw-head"
start_job "$WORK/out4b" --start-timeout 60 nata fw -- /bin/true
poll 20 "the submission at fw" grep -q "^qcg-submit: fw: Slurm job" "$WORK/out4b" ||
	{ show "$WORK/out4b"; fail "no submission at fw"; }
nata_job=$(sed -n 's/^qcg-submit: nata: Slurm job \([0-9]*\).*/\1/p' "$WORK/out4b")
stopped=$ctld
kill -STOP "$ctld"
sleep 1 # (qcg-submit's next poll of fw hangs)
t0=$(ms)
kill -INT "$JOB_PID"
rc=0
submit_exit "$JOB_PID" "$WORK/out4b" 30 || rc=$?
kill -CONT "$ctld"
stopped=""
if [ "$rc" = 130 ] && doc_row "scancel at fw failed" "$WORK/out4b" &&
	doc_row "interrupted: cancelling" "$WORK/out4b"; then
	note "ok   Ctrl-C, fw's slurmctld stopped: exit 130 after $(($(ms) - t0)) ms: $(grep 'scancel at fw' "$WORK/out4b")"
else
	show "$WORK/out4b"
	bad "Ctrl-C with fw's slurmctld stopped: qcg-submit exits $rc without docs/user.md's lines"
fi
nata_gone() {
	local ids
	ids=$("$LAB" login nata -- squeue -h -o %i) || return 1
	! grep -qx "$nata_job" <<<"$ids"
}
poll 20 "nata's part to end" nata_gone || bad "nata's part (Slurm job $nata_job) left after Ctrl-C"
"$LAB" login fw -- scancel -u nobody
poll 20 "no job left" no_running_jobs || bad "jobs left after the timeout: $(running_jobs)"
no_user_processes "fw's queue full" || true

# 5. 3 nodes at fw, whose partition has 2: it can never start; qcg-submit
# says so at once (Slurm holds the part, PENDING PartitionNodeLimit, for ever).
rc=0
t0=$(ms)
timeout -k 10 60 "${SUBMIT[@]}" --start-timeout 40 --nodes 1,fw:3 nata fw -- /bin/true >"$WORK/out5" 2>&1 || rc=$?
if [ "$rc" = 1 ] && grep -q "^qcg-submit: the part at fw (Slurm job [0-9]*) can never start (PENDING, PartitionNodeLimit: partition batch has 2 node(s), the part asks for 3;" "$WORK/out5" &&
	doc_row "can never start" "$WORK/out5"; then
	note "ok   3 nodes at fw: after $(($(ms) - t0)) ms: $(grep 'can never start' "$WORK/out5")"
else
	show "$WORK/out5"
	bad "3 nodes at fw: qcg-submit exits $rc without saying that fw's part can never start"
fi
poll 20 "no job left" no_running_jobs || bad "jobs left after the part that never fits: $(running_jobs)"

# 6. Ctrl-C of qcg-submit while the program runs: every part is cancelled.
start_sleeper "$WORK/out6" nata fw
t0=$(ms)
kill -INT "$JOB_PID"
rc=0
submit_exit "$JOB_PID" "$WORK/out6" 30 || rc=$?
if [ "$rc" = 130 ] && doc_row "interrupted: cancelling" "$WORK/out6"; then
	note "ok   Ctrl-C: qcg-submit exits 130 after $(($(ms) - t0)) ms: $(grep 'interrupted' "$WORK/out6")"
else
	show "$WORK/out6"
	bad "Ctrl-C: qcg-submit exits $rc without docs/user.md's line"
fi
poll 20 "no job left" no_running_jobs || bad "jobs left after Ctrl-C: $(running_jobs)"
no_user_processes "Ctrl-C of qcg-submit" || true

# 7. fw refuses the submission (its partition drained by its admin): the
# part already submitted at nata is cancelled, sbatch's reason stands above.
fw_admin() { SLURM_CONF=$LAB_STATE/slurm/fw/slurm.conf ip netns exec qcg-fw-head "$@"; }
fw_admin scontrol update PartitionName=batch State=DRAIN || bad "could not drain fw's partition"
rc=0
timeout -k 10 60 "${SUBMIT[@]}" --start-timeout 40 nata fw -- /bin/true >"$WORK/out7" 2>&1 || rc=$?
if [ "$rc" = 1 ] && grep -q "^sbatch: error: " "$WORK/out7" && doc_row "sbatch failed at" "$WORK/out7"; then
	note "ok   fw refuses: $(grep -m1 '^sbatch: error' "$WORK/out7") / $(grep 'sbatch failed' "$WORK/out7")"
else
	show "$WORK/out7"
	bad "fw refuses the submission: qcg-submit exits $rc without docs/user.md's line"
fi
fw_admin scontrol update PartitionName=batch State=UP || bad "could not put fw's partition up again"
poll 20 "no job left" no_running_jobs || bad "nata's part left after fw refused: $(running_jobs)"

# 8. Back to the lab without Slurm: no Slurm or munge process, no state.
slurm_put_back
[ "$failed" = 0 ] || fail "$failed checks failed"
echo PASS
