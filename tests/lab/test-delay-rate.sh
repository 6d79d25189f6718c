#!/usr/bin/env bash
# lab-delay-rate: reconfigures the shared lab with --delay 5 --rate 100, checks the
# measured round trips (20 ms between sites, 10 ms to the broker) and rate, then puts
# the lab back as the fixture made it (plain) and checks the shaping is gone.
. "$(dirname "$0")/test-lib.sh"
require_lab
require_delayline

restore() { "$LAB" up >/dev/null || echo "could not restore the plain lab" >&2; }
trap restore EXIT

"$LAB" up --delay 5 --rate 100
out=$("$LAB" verify) || { echo "$out"; fail "verify failed with --delay 5 --rate 100"; }
echo "$out"
# verify holds the figures to their expected values; make sure it measured them.
for check in rtt-site rtt-inet rate delayline; do
	echo "$out" | grep -q "^PASS  $check .*[0-9]" || fail "verify did not measure $check"
done
echo "$out" | grep -q "^PASS  rtt-site .*expected 20 ms" || fail "no 20 ms site-to-site expectation"

trap - EXIT
"$LAB" up
poll 10 "delay lines to exit" no_live_delaylines || fail "delay lines still run after up without --delay"
for s in open fw nata natb sym; do
	! ip netns exec "qcg-r-$s" iptables -t mangle -S | grep -q NFQUEUE ||
		fail "NFQUEUE rules left on r-$s"
	! ip netns exec "qcg-r-$s" tc qdisc show | grep -q tbf || fail "tbf left on r-$s"
	! ip netns exec qcg-inet tc qdisc show dev "qcg-w-$s" | grep -q tbf ||
		fail "tbf left on inet's link to $s"
done
rtt=$("$LAB" exec fw1 -- ping -U -n -c 3 -i 0.05 -W 2 198.51.100.11 | sed -n 's/.*time=\([0-9.]*\).*/\1/p' | sort -n | tail -n 1)
awk -v r="${rtt:-99}" 'BEGIN { exit !(r < 2) }' || fail "fw1 -> open1 still ${rtt:-?} ms after removing the delay"
note "back to the plain lab: no delay line, no tbf, fw1 -> open1 $rtt ms"
