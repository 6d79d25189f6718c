#!/usr/bin/env bash
# lab-punch-fallback: a hole punch over IPv6 that fails falls back to the
# IPv4 punch within the same connect, and the broker remembers the IPv6
# failure apart from the IPv4 punch.
#
#   nata  NAT44 + stateful ip6tables firewall   nata1 198.18.1.11, 2001:db8:3::11
#   open  declared firewalled (QCG_LAB_DECLARE), its helpers unprivileged, so
#         neither direct, reversed nor traversing applies: hole punching does
#                                               open1 198.51.100.11, 2001:db8:1::11
#   open's router drops every IPv6 SYN between open1 and nata1 (a rule of
#   this test, removed at the end, also on failure): the IPv6 punch fails.
#
# Checks, as a user would: nata1 -> open1 carries 4 MiB intact by hole
# punching over IPv4 (qcg-cat --json: holepunch, IPv4 far ends), the broker
# planned the IPv6 punch, then the IPv4 one with `tried before: holepunch6`,
# and the initiator's helper logs why (the IPv6 punch failed).  A second
# connect goes to the IPv4 punch at once.  The lab is put back (`qcg-lab up`).
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
scratch
RNS=qcg-r-open
RULE=(FORWARD -p tcp --syn -m comment --comment qcg-punch-fallback -j DROP)
unblock() {
	while ip netns exec "$RNS" ip6tables -D "${RULE[@]}" 2>/dev/null; do :; done
}
restore() {
	unblock
	QCG_LAB_DECLARE="" QCG_LAB_UNPRIVILEGED="" "$LAB" up >/dev/null 2>&1 || true
}
trap 'scratch_cleanup; restore' EXIT

QCG_LAB_DECLARE=open=firewalled QCG_LAB_UNPRIVILEGED=open "$LAB" up >/dev/null ||
	fail "up with open declared firewalled failed"
unblock
ip netns exec "$RNS" ip6tables -I "${RULE[@]}" -s 2001:db8:1::11 -d 2001:db8:3::11 ||
	fail "cannot add the IPv6 SYN drop rule"
ip netns exec "$RNS" ip6tables -I "${RULE[@]}" -s 2001:db8:3::11 -d 2001:db8:1::11 ||
	fail "cannot add the IPv6 SYN drop rule"

JOB=$(new_job punchfallback)
size=$((4 << 20))
head -c "$size" /dev/urandom >"$WORK/in"
BLOG=$LAB_STATE/log/broker.log

cat_transfer nata1 open1
xfer_expect nata1 open1 holepunch "$size" "198.51.100.11:" "203.0.113.66:"
pair="job $JOB rank $XFER_FROM_RANK \(nata\) -> rank $((XFER_FROM_RANK - 1)) \(open/open1\)"
grep -Eq "$pair: holepunch over IPv6; punch ordered to open" "$BLOG" ||
	fail "the broker did not plan the IPv6 punch first"
grep -Eq "$pair: holepunch over IPv4; punch ordered to open \(seq [0-9]+\), tried before: holepunch6$" \
	"$BLOG" || { grep -E "$pair" "$BLOG" >&2; fail "the broker did not plan the IPv4 punch after the IPv6 one"; }
grep -Eq "job $JOB rank $XFER_FROM_RANK -> rank $((XFER_FROM_RANK - 1)): holepunch connected after: holepunch over IPv4 after holepunch over IPv6: " \
	"$LAB_STATE/log/helper-nata1.log" || fail "nata1's helper does not say why IPv4 was punched"
note "nata1 -> open1: 4 MiB identical, holepunch over IPv4 after IPv6's failed, setup $XFER_SETUP_US us"
note "  $(grep -Eo "holepunch connected after: .*" "$LAB_STATE/log/helper-nata1.log" | tail -n 1)"

# The job's own IPv6 failure is remembered: the next connect punches IPv4 at once.
cat_transfer nata1 open1
xfer_expect nata1 open1 holepunch "$size" "198.51.100.11:" "203.0.113.66:"
pair="job $JOB rank $XFER_FROM_RANK \(nata\) -> rank $((XFER_FROM_RANK - 1)) \(open/open1\)"
grep -Eq "$pair: holepunch over IPv4; punch ordered to open \(seq [0-9]+\)$" "$BLOG" ||
	{ grep -E "$pair" "$BLOG" >&2; fail "the second connect did not go to the IPv4 punch at once"; }
grep -Eq "job $JOB rank $XFER_FROM_RANK -> rank $((XFER_FROM_RANK - 1)): holepunch connected after" \
	"$LAB_STATE/log/helper-nata1.log" && fail "the second connect tried the IPv6 punch again"
note "second connect: holepunch over IPv4 at once, setup $XFER_SETUP_US us"
