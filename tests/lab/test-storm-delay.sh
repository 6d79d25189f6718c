#!/usr/bin/env bash
# lab-storm-delay: the connection storm across the five sites over a WAN of
# 20 ms round trips (issue 29): 40 ranks, 4 per node on the two compute nodes
# of each site, every rank sending to every other at once, on the lab
# reconfigured with --delay 5; then the lab is put back as the fixture made
# it.  The job must pass and, having passed, print no btl_qcg line (a healthy
# job that warns sends its user looking for a fault).  The 80-rank storm is
# bench/README.md's (tests/lab/repeat.sh with test-mpi-scale.sh).
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
require_delayline
command -v mpirun >/dev/null 2>&1 || skip "mpirun is not installed"
[ -e "$QCG_BUILD_DIR/btl_qcg/mca_btl_qcg.so" ] || skip "btl_qcg is not built (libopenmpi-dev missing?)"
storm=$QCG_BUILD_DIR/tests/mpi/qcg-mpi-storm
[ -x "$storm" ] || skip "qcg-mpi-storm is not built"
[ -e "$LAB_STATE/etc/proxy.conf" ] || skip "the lab runs no proxy: NATed sites cannot all meet"
scratch
out=$WORK/out
restore() { "$LAB" up >/dev/null || echo "could not restore the plain lab" >&2; }
trap restore EXIT
"$LAB" up --delay 5 >/dev/null || fail "qcg-lab up --delay 5 failed"
rc=0
t0=$(ms)
timeout -k 10 300 "$LAB" mpirun --ppn 4 -- "$storm" >"$out" 2>&1 || rc=$?
took=$(($(ms) - t0))
if [ "$rc" -ne 0 ] || ! grep -q "^PASS storm" "$out"; then
	grep -v '^ *[0-9]* *[0-9]* ' "$out" | tail -n 30 | sed 's/^/     | /' >&2
	fail "the 40-rank storm with --delay 5: exit $rc after $took ms"
fi
note "ok   $(grep '^PASS storm' "$out") [$took ms, --delay 5]"
if grep -q "btl_qcg" "$out"; then
	grep "btl_qcg" "$out" | head -n 10 | sed 's/^/     | /' >&2
	fail "the storm passed but printed $(grep -c btl_qcg "$out") btl_qcg lines"
fi
note "ok   no btl_qcg line in the passing job's output"
trap - EXIT
"$LAB" up >/dev/null || fail "the plain lab could not be put back"
poll 10 "delay lines to exit" no_live_delaylines || fail "delay lines still run after up without --delay"
note "back to the plain lab"
