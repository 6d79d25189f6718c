#!/usr/bin/env bash
# lab-ipv6-punch: traversing and hole punching over IPv6 between two stateful
# IPv6 firewalls.
#
#   v6    2001:db8:6::/64   IPv6 only, stateful ip6tables firewall, nothing let in
#                           (v61 2001:db8:6::11)
#   nata  2001:db8:3::/48   NAT44, stateful ip6tables firewall that lets in
#                           2001:db8:3:5::/64 only (nata1 2001:db8:3::11: closed)
#   broker 2001:db8::10     its reflector on both families (port 7704)
#
# Neither v61 nor nata1 takes an unsolicited connection over IPv6, and v61 has
# no IPv4 at all: without a technique over IPv6 the pair has none (IPv4
# punching and the proxy need an IPv4 route on v61).  Checks, as a user
# would, in both directions (v61 -> nata1, nata1 -> v61): 4 MiB arrive
# intact; qcg-cat --json names the technique on both ends, and its far-end
# addresses are the two nodes' own IPv6 addresses (no NAT in between).
#   1. Every helper intercepts: the pair is traversed over IPv6 (the
#      preference order's traversing before hole punching); the target's
#      helper logs the inject from the initiator's IPv6 address, the broker
#      its plan "traversing over IPv6".
#      qcg-probe --site nata on v61 says traversing works, over IPv6.
#   2. v6's helpers without CAP_NET_ADMIN/CAP_NET_RAW (QCG_LAB_UNPRIVILEGED):
#      hole punching over IPv6; both helpers log the punch "over IPv6", and
#      the broker its plan.
. "$(dirname "$0")/test-lib.sh"
require_lab
scratch
up_back() { QCG_LAB_UNPRIVILEGED="" "$LAB" up >/dev/null 2>&1 || true; }
trap 'scratch_cleanup; up_back' EXIT

QCG_LAB_UNPRIVILEGED="" "$LAB" up --v6 >"$WORK/up.out" 2>&1 ||
	{ cat "$WORK/up.out"; fail "up --v6 failed"; }
require_services

JOB=$(new_job ipv6trav)
size=$((4 << 20))
head -c "$size" /dev/urandom >"$WORK/in"

# traverse6 FROM TO FROM6 TO6: FROM -> TO traversed over IPv6.
traverse6() {
	local from=$1 to=$2 from6=$3 to6=$4 line
	cat_transfer "$from" "$to"
	xfer_expect "$from" "$to" traversing "$size" "[$to6]:" "[$from6]:"
	# The target's helper injected the SYN from the initiator's own address.
	line=$(grep -E "inject for job $JOB rank $((XFER_FROM_RANK - 1)) \(initiator rank $XFER_FROM_RANK at $from6 port [0-9]+\): handshake completed in [0-9]+ ms" \
		"$LAB_STATE/log/helper-$to.log" | tail -n 1)
	[ -n "$line" ] ||
		{ grep "inject for job" "$LAB_STATE/log/helper-$to.log" | tail -n 3; fail "$from -> $to: $to's helper does not log the inject from $from6"; }
	grep -Eq "job $JOB rank $XFER_FROM_RANK \([a-z0-9]+\) -> rank $((XFER_FROM_RANK - 1)) \([a-z0-9]+/$to\): traversing over IPv6; waiting for the SYN" \
		"$LAB_STATE/log/broker.log" ||
		fail "$from -> $to: the broker's log has no plan of traversing over IPv6"
	note "$from -> $to: 4 MiB identical, traversing over IPv6 ([$from6] -> [$to6]), setup $XFER_SETUP_US us"
	note "  $to: $(grep -Eo 'inject for job .*' <<<"$line")"
}

traverse6 v61 nata1 2001:db8:6::11 2001:db8:3::11
traverse6 nata1 v61 2001:db8:3::11 2001:db8:6::11

# qcg-probe's test of traversing alone goes over IPv6 too, as the jobs'
# connections above did (planned over IPv4 only, it was refused: "cluster
# nata is behind a NAT, not a firewall: traversing is for firewalled targets").
"$LAB" exec v61 -- qcg-probe --site nata --json --no-report --timeout 90 >"$WORK/probe-v61-nata.json" \
	2>"$WORK/probe-v61-nata.err" || { cat "$WORK/probe-v61-nata.err"; fail "v61: qcg-probe --site nata failed"; }
tv=$(
	python3 - "$WORK/probe-v61-nata.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["peers"][0]["techniques"]["traversing"]
# The endpoint runs on a node of nata the broker picks (nata1 or nata2).
if not t["works"] or t["family"] != "ipv6" or not (t["address"] or "").startswith("2001:db8:3:"):
    sys.exit(f"traversing: {t}")
print(f"traversing works over IPv6 to {t['address']}, {t['setup_ms']:.1f} ms")
PY
) || fail "v61 -> nata: qcg-probe's traversing test: $tv"
note "v61 qcg-probe --site nata: $tv"

# 2. v6's helpers cannot intercept: hole punching over IPv6.
QCG_LAB_UNPRIVILEGED=v6 "$LAB" up --v6 >"$WORK/up2.out" 2>&1 ||
	{ cat "$WORK/up2.out"; fail "up --v6 with v6 unprivileged failed"; }
require_services
JOB=$(new_job ipv6punch)

# punch6 FROM TO FROM6 TO6: FROM -> TO punched over IPv6.
punch6() {
	local from=$1 to=$2 from6=$3 to6=$4
	cat_transfer "$from" "$to"
	xfer_expect "$from" "$to" holepunch "$size" "[$to6]:" "[$from6]:"
	# The initiator's helper punches for the plan, the target's for its order.
	grep -Eq "holepunch to [a-z0-9]+/$to: connected from port [0-9]+ \(seen as \[$from6\]:[0-9]+\) to \[$to6\]:[0-9]+ in [0-9]+ ms, over IPv6" \
		"$LAB_STATE/log/helper-$from.log" ||
		{ grep "holepunch to" "$LAB_STATE/log/helper-$from.log" | tail -n 3; fail "$from -> $to: $from's helper does not log the punch over IPv6"; }
	grep -Eq "punch for job $JOB rank $((XFER_FROM_RANK - 1)) \(initiator rank $XFER_FROM_RANK\): connected .* to \[$from6\]:[0-9]+ in [0-9]+ ms, over IPv6" \
		"$LAB_STATE/log/helper-$to.log" ||
		{ grep "punch for job" "$LAB_STATE/log/helper-$to.log" | tail -n 3; fail "$from -> $to: $to's helper does not log its punch over IPv6"; }
	note "$from -> $to: 4 MiB identical, holepunch over IPv6 ([$from6] -> [$to6]), setup $XFER_SETUP_US us"
	note "  $(grep -Eo "holepunch to [a-z0-9]+/$to: connected .*over IPv6" "$LAB_STATE/log/helper-$from.log" | tail -n 1)"
}

punch6 v61 nata1 2001:db8:6::11 2001:db8:3::11
punch6 nata1 v61 2001:db8:3::11 2001:db8:6::11
for pair in '\(v6\) -> rank [0-9]+ \(nata/nata1\)' '\(nata\) -> rank [0-9]+ \(v6/v61\)'; do
	grep -Eq "job $JOB rank [0-9]+ $pair: holepunch over IPv6; punch ordered to" \
		"$LAB_STATE/log/broker.log" ||
		fail "the broker's log has no plan of hole punching over IPv6 for $pair"
done
note "broker: $(grep -Eo "job $JOB rank [0-9]+ \(v6\) -> .*: holepunch over IPv6; punch ordered to [a-z0-9]+" "$LAB_STATE/log/broker.log" | tail -n 1)"
