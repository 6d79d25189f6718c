#!/usr/bin/env bash
# lab-mpi-tcp: the MPI test programs with `qcg-lab mpirun --tcp` (btl
# self,vader,tcp) on one site, two ranks per node: the programs themselves are
# sound, whatever btl_qcg does.
. "$(dirname "$0")/test-lib.sh"

require_lab
require_services
command -v mpirun >/dev/null 2>&1 || skip "mpirun is not installed"
progs=$QCG_BUILD_DIR/tests/mpi
[ -x "$progs/qcg-mpi-allpairs" ] || skip "the MPI test programs are not built in $progs"
scratch
failed=0
out=$WORK/out

for prog in allpairs ring anysource alltoall firstsend pairs; do
	rc=0
	timeout -k 10 240 "$LAB" mpirun --sites open --ppn 2 --tcp -- "$progs/qcg-mpi-$prog" \
		>"$out" 2>&1 || rc=$?
	if [ "$rc" -eq 0 ] && grep -q "^PASS $prog" "$out"; then
		note "ok   $(grep "^PASS $prog" "$out")"
	else
		echo "FAIL: $prog with --tcp on open (exit $rc):" >&2
		tail -n 30 "$out" | sed 's/^/     | /' >&2
		failed=$((failed + 1))
	fi
done
[ "$failed" -eq 0 ] || fail "$failed MPI programs failed over btl_tcp"
note "the MPI test programs pass over btl_tcp on one site (4 ranks, 2 per node)"
