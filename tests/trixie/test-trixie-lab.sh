#!/usr/bin/env bash
# trixie-lab: the lab's all-sites MPI job launched through the agents with
# Debian 13's programs: Open MPI 5.0.7, whose mpirun (PRRTE) has each node's
# qcg-agent start prted.  The tree is built in the Debian 13 root
# (lab/debian13.sh; into $QCG_BUILD_DIR/trixie-build, kept between runs)
# and every program of the user (qcg-agent, qcg-mpirun, mpirun, prted, the
# ranks) runs in that root on its lab node: `qcg-lab mpirun` with
# QCG_LAB_ROOT (lab/mpirun.sh, as_user).  The lab's services stay
# Debian 12's, as a site's administrator may keep them.
#
#   mpirun on fw1 (behind a firewall), one rank on each of the 10 nodes of the
#   five sites: every rank says where it runs (its node, Debian 13); then
#   allpairs over btl_qcg between all of them, each pair's technique in
#   btl_qcg_verbose's lines; the storm (40 ranks, 4 on each node, every pair
#   connecting at once: tests/lab/test-storm-delay.sh's job on the plain lab),
#   passing with no btl_qcg line; the site-aware collectives (coll_qcg, as
#   openmpi-coll-qcg installs them on Debian 13) over the five sites, one
#   rank per node: qcg-mpi-collectives' results are MPI's, coll_qcg takes
#   MPI_COMM_WORLD and leaves each site's communicator to Open MPI (lab-coll
#   does the same on Open MPI 4.1); nothing of the user left on any node
#   after each.
# shellcheck source=../lab/test-lib.sh
. "$(dirname "$0")/../lab/test-lib.sh"
# shellcheck source=../../lab/debian13.sh
. "$(dirname "$0")/../../lab/debian13.sh"

require_lab
require_services
command -v mmdebstrap >/dev/null 2>&1 || skip "mmdebstrap not installed (scripts/install-deps)"
trixie_root
[ -x "$TRIXIE_ROOT/usr/bin/prted" ] || skip "the Debian 13 root has no prted"
scratch
ALL="open1 open2 fw1 fw2 nata1 nata2 natb1 natb2 sym1 sym2"

# --- the tree built in the root (what the user's nodes run) ----------------------------
tb=$QCG_BUILD_DIR/trixie-build
t0=$(ms)
trixie_build "$tb" qcg-agent qcg-launch mca_btl_qcg mca_coll_qcg qcgcolour qcg-mpi-allpairs qcg-mpi-storm \
	qcg-mpi-collectives ||
	fail "the tree did not build in the Debian 13 root"
note "ok   built in the Debian 13 root ($(($(ms) - t0)) ms)"

# trixie_mpirun OUT SECONDS [qcg-lab mpirun args...]: the lab's mpirun with the
# root's programs, bounded; its status in rc.
trixie_mpirun() {
	local o=$1 secs=$2
	shift 2
	rc=0
	QCG_LAB_ROOT=$TRIXIE_ROOT QCG_LAB_USER_BUILD=$tb timeout -k 10 "$secs" "$LAB" mpirun "$@" \
		>"$o" 2>&1 || rc=$?
}

# --- 1. every rank in the root, on its own node -------------------------------------------
t0=$(ms)
# shellcheck disable=SC2016 # expanded by each rank
trixie_mpirun "$WORK/out1" 120 --from fw1 -- /bin/sh -c \
	'echo "rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE on $(hostname) Debian $(cat /etc/debian_version) $(mpirun --version | head -n 1)"'
n_ok=0 r=0
for n in $ALL; do
	grep -aqE "^rank $r of 10 on $n Debian 13\.[0-9]+ mpirun \(Open MPI\) 5\." "$WORK/out1" && n_ok=$((n_ok + 1))
	r=$((r + 1))
done
if [ "$rc" -eq 0 ] && [ "$n_ok" -eq 10 ]; then
	note "ok   10 ranks on 10 nodes of 5 sites, mpirun on fw1, Debian 13 and Open MPI 5 on each ($(($(ms) - t0)) ms)"
else
	bad "10 ranks from fw1: exit $rc, $n_ok of 10 rank lines naming their node, Debian 13 and Open MPI 5"
	show "$WORK/out1" 40
fi
no_user_processes "after the ranks' lines"

# --- 2. allpairs over btl_qcg, every pair across the sites ---------------------------------
t0=$(ms)
QCG_MPIRUN_ARGS="--mca btl_qcg_verbose 1" trixie_mpirun "$WORK/out2" 300 -- \
	"$tb/tests/mpi/qcg-mpi-allpairs"
pairs=$(grep -acE 'btl_qcg: rank [0-9]+ -> rank [0-9]+ \(host [a-z0-9]+\): [a-z]+' "$WORK/out2" || true)
if [ "$rc" -eq 0 ] && grep -aq "^PASS allpairs: 10 ranks" "$WORK/out2" && [ "$pairs" -ge 45 ]; then
	note "ok   allpairs over btl_qcg, 10 ranks on 5 sites, mpirun on nata1 ($(($(ms) - t0)) ms, $pairs connections): $(grep -aE '^PASS' "$WORK/out2" | cut -c1-70)"
	note "     techniques: $(grep -aoE 'btl_qcg: rank [0-9]+ -> rank [0-9]+ \(host [a-z0-9]+\): [a-z]+' "$WORK/out2" |
		awk '{ print $NF }' | sort | uniq -c | awk '{ printf "%s%s x%s", (NR > 1 ? ", " : ""), $2, $1 }')"
else
	bad "allpairs over btl_qcg on Open MPI 5: exit $rc, $pairs connections"
	show "$WORK/out2" 40
fi
# Open MPI's own setpgid race aside (harmless: docs/user.md).  No PMIx
# "has bad prefix": the lab gives PMIx its own component path (user_env).
if grep -aiE 'warning|error|has bad prefix' "$WORK/out2" | grep -v '^PASS' | grep -qv 'setpgid'; then
	bad "the job printed warnings"
	grep -aiE 'warning|error|has bad prefix' "$WORK/out2" | grep -v '^PASS' | grep -v setpgid | head -n 5 | sed 's/^/     | /' >&2
fi
no_user_processes "after allpairs"

# --- 3. the storm: 40 ranks, every pair connecting at once ----------------------------------
t0=$(ms)
trixie_mpirun "$WORK/out3" 300 --ppn 4 -- "$tb/tests/mpi/qcg-mpi-storm"
if [ "$rc" -eq 0 ] && grep -aq "^PASS storm" "$WORK/out3"; then
	note "ok   $(grep -a '^PASS storm' "$WORK/out3" | cut -c1-90) [$(($(ms) - t0)) ms, mpirun on nata1]"
	# Anything of btl_qcg's, or PMIx's "has bad prefix", is a fault.
	if grep -aE 'btl_qcg|has bad prefix' "$WORK/out3" >"$WORK/noise3"; then
		bad "the storm passed but printed $(wc -l <"$WORK/noise3") btl_qcg or 'has bad prefix' lines"
		head -n 5 "$WORK/noise3" | sed 's/^/     | /' >&2
	fi
else
	bad "the 40-rank storm on Open MPI 5: exit $rc after $(($(ms) - t0)) ms"
	grep -av '^ *[0-9]* *[0-9]* ' "$WORK/out3" | tail -n 30 | sed 's/^/     | /' >&2
fi
no_user_processes "after the storm"

# --- 4. the site-aware collectives across the five sites ----------------------------------
t0=$(ms)
QCG_MPIRUN_ARGS="--mca coll_qcg_verbose 1" trixie_mpirun "$WORK/out4" 300 -- "$tb/tests/mpi/qcg-mpi-collectives"
if [ "$rc" -eq 0 ] && grep -aq "^PASS collectives" "$WORK/out4" &&
	grep -aq "coll_qcg: communicator MPI_COMM_WORLD of 10 ranks spans 5 sites: hierarchical" "$WORK/out4" &&
	grep -aq "coll_qcg: communicator .* of 2 ranks: one site: Open MPI's collectives" "$WORK/out4"; then
	note "ok   coll_qcg over 5 sites on Open MPI 5, MPI_COMM_WORLD hierarchical, each site's Open MPI's ($(($(ms) - t0)) ms): $(grep -a '^PASS collectives' "$WORK/out4" | cut -c1-70)"
else
	bad "the collectives over 5 sites with coll_qcg on Open MPI 5: exit $rc"
	show "$WORK/out4" 40
fi
no_user_processes "after the collectives"

[ "$failed" -eq 0 ] || fail "$failed checks failed"
note "trixie-lab: the all-sites job, the storm and the site-aware collectives through the agents on Debian 13's Open MPI 5"
