#!/usr/bin/env bash
# lab-coll: coll_qcg, the site-aware collectives, across the lab's sites
# (qcg-lab mpirun: agents, qcg-mpirun on nata1, btl self,vader,qcg).
#
#   qcg-mpi-collectives (Barrier, Bcast, Reduce, Allreduce, Allgather, Gather,
#   Scatter; counts 0 .. 1 MiB; contiguous, vector and MPI_IN_PLACE; on
#   MPI_COMM_WORLD, one communicator per site, one mixing the sites and a
#   copy of MPI_COMM_WORLD with reordered ranks): integer results checked against the
#   values MPI defines, so against Open MPI's own as well, which the same
#   program gets with --mca coll ^qcg.
#     five sites (open,nata without a proxy), 2 ranks per node: coll_qcg
#       says it takes MPI_COMM_WORLD ("spans 5 sites: hierarchical") and
#       leaves each site's communicator to Open MPI ("one site");
#     the same with coll ^qcg: Open MPI's own, the same results;
#     one site (nata), 2 per node: coll_qcg is never selected (no line).
. "$(dirname "$0")/test-lib.sh"

require_lab
require_services
require_mpi_programs
[ -e "$QCG_BUILD_DIR/btl_qcg/mca_btl_qcg.so" ] || skip "btl_qcg is not built (libopenmpi-dev missing?)"
[ -e "$QCG_BUILD_DIR/coll_qcg/mca_coll_qcg.so" ] || skip "coll_qcg is not built (libopenmpi-dev missing?)"
[ -x "$progs/qcg-mpi-collectives" ] || skip "qcg-mpi-collectives is not built in $progs"
if [ -e "$LAB_STATE/etc/proxy.conf" ]; then
	sites=open,fw,nata,natb,sym
else
	sites=open,nata
	note "the lab runs no proxy: sites open,nata only"
fi
n_sites=$(echo "$sites" | tr , '\n' | wc -l)
scratch
out=$WORK/out

# run WHAT SITES MPIRUN_ARGS: qcg-mpi-collectives, bounded; its PASS line wanted.
run() {
	local what=$1 where=$2 rc=0 t0
	t0=$(ms)
	QCG_MPIRUN_ARGS="$3" timeout -k 10 300 "$LAB" mpirun --sites "$where" --ppn 2 -- \
		"$progs/qcg-mpi-collectives" >"$out" 2>&1 || rc=$?
	if [ "$rc" -eq 0 ] && grep -q "^PASS collectives" "$out"; then
		note "ok   $what: $(grep "^PASS collectives" "$out") [$(($(ms) - t0)) ms]"
		return 0
	fi
	bad "$what: exit $rc"
	show "$out" 30
	return 1
}

if run "coll_qcg over $sites" "$sites" "--mca coll_qcg_verbose 1"; then
	grep -q "coll_qcg: communicator MPI_COMM_WORLD of $((n_sites * 4)) ranks spans $n_sites sites: hierarchical" "$out" ||
		{ bad "coll_qcg did not take MPI_COMM_WORLD over $sites"; show "$out" 30; }
	grep -q "coll_qcg: communicator .* of 4 ranks: one site: Open MPI's collectives" "$out" ||
		{ bad "coll_qcg did not leave a site's communicator to Open MPI"; show "$out" 30; }
fi
if run "Open MPI's own (coll ^qcg) over $sites" "$sites" "--mca coll ^qcg --mca coll_qcg_verbose 1"; then
	! grep -q "coll_qcg:" "$out" || { bad "coll ^qcg still ran coll_qcg"; show "$out" 10; }
fi
if run "one site (nata)" nata "--mca coll_qcg_verbose 1"; then
	! grep -q "coll_qcg:" "$out" || { bad "coll_qcg was selected in a one-site job"; show "$out" 10; }
fi

[ "$failed" -eq 0 ] || fail "$failed collective checks failed"
note "coll: coll_qcg's results are MPI's across the sites; one-site jobs never use it"
