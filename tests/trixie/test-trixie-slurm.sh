#!/usr/bin/env bash
# trixie-slurm: qcg-submit on Debian 13's Slurm.  Every site of the lab a
# Slurm 24.11 cluster run from the Debian 13 root (qcg-lab up --batch slurm
# with QCG_LAB_ROOT: lab/slurm.sh), the tree built in that root
# ($QCG_BUILD_DIR/trixie-build, as trixie-lab builds it), and a user's job
# over two sites' clusters the way docs/user.md's Open MPI 5 recipe says, its
# block pasted (the repository's paths made this build's):
#
#   1. allpairs over nata and fw (2 nodes each, NAT and firewall): exit 0,
#      its verdict, each part's agents ready, no Slurm complaint and no
#      warning anywhere (qcg-submit's output, every part's output file);
#      every Slurm daemon the root's (Slurm 24.11), none outside the lab;
#   2. a job over nata, fw and sym (one node there) whose every rank prints
#      its node, Debian release and mpirun's version, then sleeps: one line
#      per rank, on its own node, Debian 13 and Open MPI 5; then scancel of
#      fw's part ends it everywhere
#      (qcg-submit exits non-zero naming fw's part as docs/user.md's row
#      says, no job and nothing of the user left: slurm-checks.sh);
#   3. the lab put back without Slurm: no Slurm or munge process, no state.
#
# A lab test (fixture, lock) labelled trixie; about 60 s with the root made
# and the tree built.
# shellcheck source=../lab/test-lib.sh
. "$(dirname "$0")/../lab/test-lib.sh"
# shellcheck source=../lab/slurm-checks.sh
. "$(dirname "$0")/../lab/slurm-checks.sh"
# shellcheck source=../../lab/debian13.sh
. "$(dirname "$0")/../../lab/debian13.sh"

require_lab
require_services
command -v mmdebstrap >/dev/null 2>&1 || skip "mmdebstrap not installed (scripts/install-deps)"
[ -x "$QCG_BUILD_DIR/launch/qcg-submit" ] || skip "qcg-submit is not built"
trixie_root
[ -x "$TRIXIE_ROOT/usr/sbin/slurmctld" ] || fail "the Debian 13 root has no slurmctld (lab/debian13.sh)"
scratch

# --- the tree built in the root (what the jobs run) ------------------------------------
tb=$QCG_BUILD_DIR/trixie-build
t0=$(ms)
trixie_build "$tb" qcg-agent qcg-launch mca_btl_qcg qcgcolour qcg-mpi-allpairs ||
	fail "the tree did not build in the Debian 13 root"
note "ok   built in the Debian 13 root ($(($(ms) - t0)) ms)"

# doc_block: docs/user.md's block after the marker, its paths this build's.
doc_block() {
	awk '$0 == "<!-- tested by tests/trixie/test-trixie-slurm.sh: slurm -->" { on = 1; next }
		on && /^    / { sub(/^    /, ""); print; seen = 1; next }
		on && seen { exit }' "$TRIXIE_REPO/docs/user.md" |
		sed -e "s#/var/cache/qcg-debian/trixie#$TRIXIE_ROOT#g" -e "s#/run/qcg-lab#$LAB_STATE#g" \
			-e "s#\(^\|[ =\"]\)lab/qcg-lab#\1$LAB#g" -e "s#\(^\|[ =]\)build/#\1$QCG_BUILD_DIR/#g"
}
block=$(doc_block)
[ "$(grep -c 'qcg-submit' <<<"$block")" -ge 1 ] || fail "docs/user.md: no qcg-submit block after the trixie-slurm marker"

SLURM_SITES="nata fw sym"
trap 'rc=$?; slurm_restore; (exit $rc); scratch_cleanup' EXIT

# --- 1. the guide's recipe: allpairs over nata and fw -----------------------------------
t0=$(ms)
rc=0
(cd "$WORK" && timeout -k 10 240 bash -e -o pipefail -c "$block") >"$WORK/out1" 2>&1 || rc=$?
ids=$(sed -n 's/^qcg-submit: done after .*outputs: .*: \(.*\))$/\1/p' "$WORK/out1")
part_out() { echo "$HOME_DIR/qcg-$1-$(tr ' ' '\n' <<<"$ids" | sed -n "s/^$1://p").out"; }
if [ "$rc" = 0 ] && grep -q "^PASS allpairs: 4 ranks" "$WORK/out1"; then
	note "ok   docs/user.md's Open MPI 5 recipe with Slurm: allpairs over nata, fw ($(($(ms) - t0)) ms with up): $(grep '^PASS' "$WORK/out1")"
else
	show "$WORK/out1" 40
	bad "docs/user.md's Open MPI 5 recipe with Slurm: exit $rc, no 'PASS allpairs: 4 ranks'"
fi
[ "$(grep -c 'ready: agent' "$(part_out fw)" 2>/dev/null)" = 2 ] ||
	{ show "$(part_out fw)"; bad "fw's output file does not show its 2 agents ready"; }
# Quiet: no Slurm complaint, no warning, in what the user sees.
for f in "$WORK/out1" "$(part_out nata)" "$(part_out fw)"; do
	if grep -aiE "^(srun|slurmstepd)|\*\*\* STEP|CANCELLED|error|warning" "$f" | grep -av '^PASS' >"$WORK/noise"; then
		show "$WORK/noise" 5
		bad "a successful job printed the lines above ($f)"
	fi
done
# The lab's Slurm is the root's 24.11, and runs in the lab's namespaces only.
ver=$("$LAB" login nata -- sinfo --version 2>&1 || true)
[[ $ver =~ ^slurm(-wlm)?\ 24\.11\. ]] || bad "the lab's sinfo says '$ver', not Slurm 24.11"
[ -n "$(slurm_pids)" ] || bad "no Slurm process runs"
for pid in $(slurm_pids); do
	ns=$(ip netns identify "$pid" 2>/dev/null) || continue
	[[ $ns == qcg-* ]] || bad "$(cat "/proc/$pid/comm") [$pid] runs outside the lab's namespaces"
	[ "$(readlink "/proc/$pid/root")" = "$TRIXIE_ROOT" ] ||
		bad "$(cat "/proc/$pid/comm") [$pid] runs in $(readlink "/proc/$pid/root"), not the Debian 13 root"
done
note "ok   $ver: every Slurm and munge daemon in the Debian 13 root, in the lab's namespaces"
no_user_processes "after allpairs"

# --- 2. every rank's line, then scancel of fw's part -------------------------------------
# shellcheck disable=SC2016 # expanded by each rank
start_job "$WORK/out2" --start-timeout 60 --nodes sym:1 nata fw sym -- \
	/bin/sh -c 'echo "rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE on $(hostname) Debian $(cat /etc/debian_version) $(mpirun --version | head -n 1)"; exec sleep 300'
all_ranks() { [ "$(grep -c '^rank [0-9] of 5 on ' "$MAIN_OUT" 2>/dev/null)" = 5 ]; }
poll 90 "every rank's line" all_ranks || bad "not every rank's line in $MAIN_OUT"
n_ok=0 r=0
for n in nata1 nata2 fw1 fw2 sym1; do
	grep -aqE "^rank $r of 5 on $n Debian 13\.[0-9]+ mpirun \(Open MPI\) 5\." "$MAIN_OUT" && n_ok=$((n_ok + 1))
	r=$((r + 1))
done
if [ "$n_ok" = 5 ]; then
	note "ok   5 ranks on nata1, nata2, fw1, fw2, sym1, each on Debian 13 with Open MPI 5"
else
	show "$MAIN_OUT"
	bad "$n_ok of 5 rank lines name their node, Debian 13 and Open MPI 5"
fi
# scancel of fw's part ends the job everywhere, naming fw's part as on 4.1
# (docs/user.md's row; Open MPI 5's mpirun ends at once, exit 0, on losing
# fw's daemons).
scancel_fw_part "$JOB_PID" "$WORK/out2"

# --- 3. back to the lab without Slurm -----------------------------------------------------
slurm_put_back
[ "$failed" = 0 ] || fail "$failed checks failed"
note "trixie-slurm: qcg-submit over two sites' Slurm 24.11 with Open MPI 5, the guide's recipe as written"
