#!/usr/bin/env bash
# lab-mpi-scale: a job of 80 ranks over the five sites, 8 per node on the two
# compute nodes of each site (issue 15: 80 ranks doing their first all-to-all
# used to hit the helper's bound on clients).  The connection storm (every
# rank sends to every other at once), all-to-all, all-pairs up to 65600 bytes
# (eager and rendezvous) and pairs, whose summary must count all 3160 pairs:
# the 280 inside a node by shared memory, every other one by a qcg technique.
# The helpers must still serve afterwards (qcg-helper --status on every node).
#
# Sites: all five when the lab runs a proxy (NAT to NAT needs it), else skipped.
. "$(dirname "$0")/test-lib.sh"

require_lab
require_services
command -v mpirun >/dev/null 2>&1 || skip "mpirun is not installed"
[ -e "$QCG_BUILD_DIR/btl_qcg/mca_btl_qcg.so" ] || skip "btl_qcg is not built (libopenmpi-dev missing?)"
progs=$QCG_BUILD_DIR/tests/mpi
[ -x "$progs/qcg-mpi-storm" ] || skip "the MPI test programs are not built in $progs"
[ -e "$LAB_STATE/etc/proxy.conf" ] || skip "the lab runs no proxy: NATed sites cannot all meet"
scratch
failed=0
out=$WORK/out
ppn=8
ranks=$((10 * ppn))
pairs=$((ranks * (ranks - 1) / 2))
local_pairs=$((10 * ppn * (ppn - 1) / 2))

# run NAME SECONDS ARGS...: qcg-lab mpirun with 8 ranks per node, bounded; the
# program's PASS line wanted.
run() {
	local name=$1 secs=$2 rc=0 t0
	shift 2
	t0=$(ms)
	timeout -k 10 "$secs" "$LAB" mpirun --ppn "$ppn" "$@" >"$out" 2>&1 || rc=$?
	if [ "$rc" -eq 0 ] && grep -q "^PASS $name" "$out"; then
		note "ok   $(grep "^PASS $name" "$out") [$(($(ms) - t0)) ms]"
		return 0
	fi
	echo "FAIL: $name: mpirun --ppn $ppn $* (exit $rc after $(($(ms) - t0)) ms):" >&2
	grep -v '^ *[0-9]* *[0-9]* ' "$out" | tail -n 30 | sed 's/^/     | /' >&2
	failed=$((failed + 1))
	return 1
}

run storm 300 -- "$progs/qcg-mpi-storm" && note "$(grep '^STORM' "$out")"
run alltoall 300 -- "$progs/qcg-mpi-alltoall" || true
run allpairs 400 -- "$progs/qcg-mpi-allpairs" 65600 || true
if run pairs 300 -- "$progs/qcg-mpi-pairs"; then
	summary=$(grep '^summary:' "$out")
	note "$summary"
	# Every pair counted once: shared memory inside a node, qcg between nodes.
	total=$(awk '{ s = 0; for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) s += $i; print s }' <<<"$summary")
	shm=$(sed -n 's/.*shared memory \([0-9]*\).*/\1/p' <<<"$summary")
	if [ "$total" != "$pairs" ] || [ "${shm:-0}" != "$local_pairs" ] || grep -q 'other BTL' <<<"$summary"; then
		echo "FAIL: pairs: want $pairs pairs, $local_pairs by shared memory and the rest by qcg; got: $summary" >&2
		failed=$((failed + 1))
	fi
fi
# The helpers took the load and still answer.
for node in open1 open2 fw1 fw2 nata1 nata2 natb1 natb2 sym1 sym2; do
	"$LAB" exec "$node" -- "$QCG_BUILD_DIR/helper/qcg-helper" --status \
		--socket "$LAB_STATE/nodes/$node/helper.sock" >"$WORK/status" 2>&1 || {
		echo "FAIL: $node: qcg-helper --status after the jobs:" >&2
		sed 's/^/     | /' "$WORK/status" >&2
		failed=$((failed + 1))
	}
done
[ "$failed" -eq 0 ] || fail "$failed checks of the $ranks-rank job failed"
note "$ranks ranks over five sites ($ppn per node): storm, alltoall, allpairs and all $pairs pairs connected"
