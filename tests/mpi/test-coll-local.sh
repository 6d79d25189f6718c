#!/usr/bin/env bash
# mpi-coll-local: coll_qcg's results without the lab, so that a change to the
# site-aware collectives is checked wherever Open MPI is installed (and under
# the sanitizers).  Seven ranks on this host, by shared memory, given three
# sites by hand the way qcg-mpirun gives them (QCG_COLOURS_SITE for the job,
# QCG_COLOUR_SITE per rank), sites interleaved over the ranks (a b c a b c a)
# so that no site is a block of consecutive ranks; qcg-mpi-collectives checks
# every operation against what it must give, and coll_qcg must have taken
# MPI_COMM_WORLD (its verbose line).  tests/lab/test-coll.sh runs the same
# program across the lab's real sites and times nothing either.
#   tests/mpi/test-coll-local.sh BUILD_DIR     exit 0 passed, 1 failed, 77 skipped
set -euo pipefail
build=${1:?usage: test-coll-local.sh BUILD_DIR}
prog=$build/tests/mpi/qcg-mpi-collectives
coll=$build/coll_qcg/mca_coll_qcg.so
for f in "$prog" "$coll"; do
	[[ -e $f ]] || { echo "SKIPPED: $f not built"; exit 77; }
done
command -v mpirun >/dev/null || { echo "SKIPPED: no mpirun"; exit 77; }

ompi_dir=$(ompi_info --path pkglibdir 2>/dev/null | sed -n 's/.*Pkglibdir: *//p')
work=$(mktemp -d "${TMPDIR:-/tmp}/qcg-coll-local.XXXXXX")
trap 'rm -rf "$work"' EXIT
out=$work/out
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PMIX_MCA_mca_base_component_show_load_errors=none
# Open MPI leaves much allocated at exit (a sanitizer build of the program).
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
export QCG_COLOURS_SITE=a,b,c QCG_COLOURS_NODE=here QCG_COLOUR_NODE=here

# One app context of seven ranks, each taking its site from its rank (Open
# MPI 5.0's mpirun crashes on seven app contexts of one rank each).
cat >"$work/rank.sh" <<'EOF2'
#!/bin/sh
r=${OMPI_COMM_WORLD_RANK:?no rank in the environment}
case $((r % 3)) in 0) s=a ;; 1) s=b ;; *) s=c ;; esac
QCG_COLOUR_SITE=$s exec "$@"
EOF2
chmod +x "$work/rank.sh"
rc=0
timeout -k 5 240 mpirun --oversubscribe --bind-to none \
	--mca mca_base_component_path "$build/coll_qcg${ompi_dir:+:$ompi_dir}" \
	--mca pml ob1 --mca btl self,vader --mca mpi_yield_when_idle 1 --mca coll_qcg_verbose 1 \
	-x ASAN_OPTIONS -x QCG_COLOURS_SITE -x QCG_COLOURS_NODE -x QCG_COLOUR_NODE \
	-np 7 "$work/rank.sh" "$prog" >"$out" 2>&1 || rc=$?
failed=0
if [ "$rc" -eq 0 ] && grep -q "^PASS collectives" "$out"; then
	echo "ok   $(grep "^PASS collectives" "$out")"
else
	echo "FAIL qcg-mpi-collectives, 7 ranks at 3 sites on this host: exit $rc"
	tail -n 30 "$out" | sed 's/^/     | /'
	failed=1
fi
if grep -q "coll_qcg: communicator MPI_COMM_WORLD of 7 ranks spans 3 sites: hierarchical" "$out"; then
	echo "ok   coll_qcg took MPI_COMM_WORLD (7 ranks, 3 sites)"
else
	echo "FAIL coll_qcg did not take MPI_COMM_WORLD:"
	grep "coll_qcg" "$out" | head -n 5 | sed 's/^/     | /'
	failed=1
fi
exit "$failed"
