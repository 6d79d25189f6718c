#!/usr/bin/env bash
# lab-ipv6: the lab's IPv6 (2001:db8::/32), and what qcg-connect does over it.
# `up --v6` adds the IPv6-only site v6; `up` alone takes it away again.
#
#   broker 2001:db8::10, proxy 2001:db8::20   dual-stack, on the internet
#   open   2001:db8:1::/64    dual-stack, forwarded (open1 2001:db8:1::11)
#   nata   2001:db8:3::/48    dual-stack: NAT44, and a stateful ip6tables
#                             firewall that lets in 2001:db8:3:5::/64 only
#                             (nata1 2001:db8:3::11 closed, nata2
#                             2001:db8:3:5::12 open: the site's open-addresses)
#   v6     2001:db8:6::/64    IPv6 only (no IPv4 address at all), stateful
#                             ip6tables firewall, nothing let in (v61 ::11)
#
# Checks, as a user would: v61 has no IPv4 route out but reaches the broker
# over IPv6; from the internet only nata2's range is let in over IPv6;
# qcg-probe --local-only on v61 names its IPv6 hop count to the reflector
# (and the punching variant) and checks the proxy at its IPv6 address, on
# nata1 both families' (the proxy is configured with both); then
# qcg-cat --json ("address": the far end, so the family) for
#   open1 -> nata2   direct over IPv6, through nata's firewall (open range)
#   v61   -> nata2   direct over IPv6, out of v6's firewall, into nata's
#   nata1 -> open1   direct over IPv6 (no NAT: open1 sees nata1's own address)
#   open1 -> v61     reversed: v61's helper calls back open1's IPv6 address
#   nata1 -> open1   with IPv6 to open1's port dropped at open's router: the
#                    same connect goes on over IPv4 (through the NAT) after
#                    2 s, and nata1's helper logs why
#   v61   -> fw1     an IPv6-only node to an IPv4-only one, and back: the
#   fw1   -> v61     proxy at once, v61 reaching it over IPv6 and fw1 over
#                    IPv4, the proxy bridging the two
. "$(dirname "$0")/test-lib.sh"
require_lab
command -v nc >/dev/null 2>&1 || skip "nc (netcat-openbsd) is not installed"
command -v ip6tables >/dev/null 2>&1 || skip "ip6tables is not installed"
scratch
DROP_RULE=()
drop_off() {
	[ ${#DROP_RULE[@]} -eq 0 ] || "$LAB" exec r-open -- ip6tables -D "${DROP_RULE[@]}" 2>/dev/null || true
}
up_back() { "$LAB" up >/dev/null 2>&1 || true; }
trap 'scratch_cleanup; drop_off; up_back' EXIT

"$LAB" up --v6 >"$WORK/up.out" 2>&1 || { cat "$WORK/up.out"; fail "up --v6 failed"; }
require_services
"$LAB" status >"$WORK/status" || { cat "$WORK/status"; fail "status after up --v6 is not complete"; }
for n in v61 v62; do
	grep -Eq "^helper-$n +$n +[0-9]+ +yes" "$WORK/status" ||
		{ grep -E "helper-$n" "$WORK/status"; fail "the helper of $n is not connected"; }
done
note "up --v6: $(tail -n 1 "$WORK/up.out")"

# --- the network ---------------------------------------------------------------
[ -z "$("$LAB" exec v61 -- ip -4 addr show scope global)" ] || fail "v61 has an IPv4 address"
out=$("$LAB" exec v61 -- nc -v -z -w 2 203.0.113.10 7700 2>&1) && fail "v61 reached the broker over IPv4"
echo "$out" | grep -q "Network is unreachable" || fail "v61 -> 203.0.113.10: not unreachable: $out"
"$LAB" exec v61 -- nc -z -w 2 2001:db8::10 7700 || fail "v61 does not reach the broker over IPv6"
note "v61: no IPv4 address or route; the broker at [2001:db8::10]:7700 over IPv6"

# From the internet (broker), a listener on each of nata1, nata2 and v61 (on a
# port of verify's, outside the helpers' ranges): only nata2, in nata's open
# range, takes the connection; the firewalls drop the others.
declare -A LISTEN6=([nata1]="2001:db8:3::11 27998" [nata2]="2001:db8:3:5::12 28998"
	[v61]="2001:db8:6::11 44998")
listening() { "$LAB" exec "$1" -- ss -Hltn "sport = :$2" | grep -q .; }
for n in nata1 nata2 v61; do
	read -r addr port <<<"${LISTEN6[$n]}"
	BG_NAME=nc-$n run_bg "$n" timeout 15 nc -6 -l "$addr" "$port"
	poll 5 "a listener on $n port $port" listening "$n" "$port"
done
for n in nata1 nata2 v61; do
	read -r addr port <<<"${LISTEN6[$n]}"
	if "$LAB" exec broker -- nc -z -w 2 "$addr" "$port" 2>/dev/null; then
		[ "$n" = nata2 ] || fail "broker -> $n [$addr]:$port: connected through the firewall"
	else
		[ "$n" != nata2 ] || fail "broker -> nata2 [$addr]:$port: not let in (the open range)"
	fi
done
note "from the internet over IPv6: nata2 (open range) takes a connection; nata1 and v61 do not"

# --- qcg-probe, per family -------------------------------------------------------
for n in v61:ipv6 nata1:ipv4,ipv6; do
	node=${n%%:*} fams=${n#*:}
	"$LAB" exec "$node" -- qcg-probe --json --local-only --no-report --timeout 60 \
		>"$WORK/probe-$node.json" 2>"$WORK/probe-$node.err" ||
		{ cat "$WORK/probe-$node.err"; fail "$node: qcg-probe --local-only failed"; }
	lines=$(python3 "$LAB_SRC/probe_check.py" families "$WORK/probe-$node.json" "$fams") ||
		fail "$node: qcg-probe's punching and proxy per family ($fams)"
	note "$node qcg-probe: $(echo "$lines" | paste -sd ';')"
done
# What docs/admin.md shows of v61's page.
"$LAB" exec v61 -- qcg-probe --local-only --no-report --timeout 60 >"$WORK/probe-v61.txt" 2>&1 ||
	{ cat "$WORK/probe-v61.txt"; fail "v61: qcg-probe --local-only (human output) failed"; }
python3 "$LAB_SRC/../docs/check_samples.py" --block probe-punching-v6 "$WORK/probe-v61.txt" ||
	fail "docs/admin.md's sample of v61's hole punching lines"

# --- qcg-cat over IPv6 ---------------------------------------------------------
JOB=$(new_job ipv6)
size=$((4 << 20))
head -c "$size" /dev/urandom >"$WORK/in"

# v6pair FROM TO TECHNIQUE TO_ADDRESS FROM_ADDRESS: 4 MiB FROM -> TO with
# TECHNIQUE on both ends; the connecting side's far end is [TO_ADDRESS], the
# accepting side's [FROM_ADDRESS] (qcg-cat --json "address").
v6pair() {
	local from=$1 to=$2 tech=$3 to6=$4 from6=$5
	cat_transfer "$from" "$to"
	xfer_expect "$from" "$to" "$tech" "$size" "[$to6]:" "[$from6]:"
	note "$from -> $to: 4 MiB identical, $tech over IPv6 ([$from6] -> [$to6]), setup $XFER_SETUP_US us"
}

v6pair open1 nata2 direct 2001:db8:3:5::12 2001:db8:1::11
v6pair v61 nata2 direct 2001:db8:3:5::12 2001:db8:6::11
v6pair nata1 open1 direct 2001:db8:1::11 2001:db8:3::11
# Reversed: the connection is v61's helper calling back, so the far ends are
# the same two addresses.
v6pair open1 v61 reversed 2001:db8:6::11 2001:db8:1::11

# --- IPv6 blocked: the same connect falls back to IPv4 ------------------------------
rfrom=$((XFER_RANK + 1)) rto=$XFER_RANK
XFER_RANK=$((XFER_RANK + 2))
cat_listen open1 "$rto" fallback --timeout 60
listener=$BG_PID
port=$(json_event "$WORK/fallback.err" listening | json_field port)
DROP_RULE=(FORWARD -d 2001:db8:1::11 -p tcp --dport "$port" -j DROP)
"$LAB" exec r-open -- ip6tables -I "${DROP_RULE[@]}"
t0=$(ms)
"$LAB" exec nata1 -- qcg-cat --job "$JOB" --rank "$rfrom" --json --timeout 30 connect "$rto" \
	<"$WORK/in" >/dev/null 2>"$WORK/fallback.cerr" ||
	{ cat "$WORK/fallback.cerr"; fail "nata1 -> open1 with IPv6 dropped: connect failed"; }
took=$(($(ms) - t0))
wait_exit "$listener" 30 || { cat "$WORK/fallback.err"; fail "nata1 -> open1 with IPv6 dropped: the listener failed"; }
dropped=$("$LAB" exec r-open -- ip6tables -L FORWARD -v -n -x | awk '/DROP/ { s += $1 } END { print s + 0 }')
drop_off
DROP_RULE=()
cmp -s "$WORK/in" "$WORK/fallback.out" || fail "nata1 -> open1 with IPv6 dropped: the data differ"
sent=$(json_event "$WORK/fallback.cerr" sent)
acc=$(json_event "$WORK/fallback.err" accepted)
[ "$(echo "$sent" | json_field technique)" = direct ] || fail "fallback: not direct: $sent"
[ "$(echo "$sent" | json_field address)" = "198.51.100.11:$port" ] ||
	fail "fallback: did not connect to open1's IPv4 address: $sent"
# Over IPv4 nata1 is behind its NAT: open1 sees the router's address.
[[ $(echo "$acc" | json_field address) == 203.0.113.66:* ]] ||
	fail "fallback: open1 accepted from $(echo "$acc" | json_field address), not nata's NAT"
[ "$dropped" -gt 0 ] || fail "fallback: open's router dropped no IPv6 SYN"
# The IPv6 attempt's SYNs were dropped: silent for 2 s, then IPv4.
grep -Eq "rank $rfrom -> rank $rto: direct connected after: IPv6 direct to rank $rto failed: no connection to 2001:db8:1::11 port $port within 2000 ms; IPv4 direct to 198.51.100.11 port $port" \
	"$LAB_STATE/log/helper-nata1.log" ||
	{ grep "connected after" "$LAB_STATE/log/helper-nata1.log" | tail -n 3; fail "fallback: nata1's helper does not say why it went on over IPv4"; }
note "nata1 -> open1, IPv6 dropped ($dropped SYNs): direct over IPv4 after $took ms; nata1's helper: $(grep -o "direct connected after: .*port $port$" "$LAB_STATE/log/helper-nata1.log" | tail -n 1)"

# --- an IPv6-only node and an IPv4-only one: the proxy bridges them ---------------
# They share no family, so the broker plans the proxy at once (no punch or
# traversal first) and gives each end the proxy's address in its own family:
# v61 reaches it at [2001:db8::20], fw1 at 203.0.113.20, and the proxy relays
# between its IPv6 leg and its IPv4 leg.
# bridged FROM TO FROM_NODE_ADDRESS FROM_PROXY TO_PROXY
bridged() {
	local from=$1 to=$2 from_addr=$3 from_px=$4 to_px=$5 t0 took far plan
	t0=$(ms)
	cat_transfer "$from" "$to"
	took=$(($(ms) - t0))
	[ "$XFER_TECH" = proxy ] || fail "$from -> $to: the connecting side used $XFER_TECH, not proxy"
	[ "$(echo "$XFER_ACCEPTED" | json_field technique)" = proxy ] ||
		fail "$from -> $to: the accepting side says $XFER_ACCEPTED"
	[ "$(echo "$XFER_SENT" | json_field bytes)" = "$size" ] || fail "$from -> $to: sent $XFER_SENT"
	far=$(echo "$XFER_SENT" | json_field address)
	[ "$far" = "$from_px:7703" ] || fail "$from -> $to: $from reached the proxy at $far, not $from_px:7703"
	far=$(echo "$XFER_ACCEPTED" | json_field address)
	[ "$far" = "$to_px:7703" ] || fail "$from -> $to: $to reached the proxy at $far, not $to_px:7703"
	# The first plan was the proxy: nothing tried before it.
	plan=$(grep "job $JOB rank $XFER_FROM_RANK (.*) -> rank $((XFER_FROM_RANK - 1)) " \
		"$LAB_STATE/log/broker.log" | head -n 1)
	[[ $plan == *": proxy; proxy-connect ordered to "* && $plan != *"tried before"* ]] ||
		fail "$from -> $to: the broker's first plan was not the proxy: ${plan:-none logged}"
	grep -Eq "pair [0-9a-f]+: \[?$from_addr\]?:[0-9]+ \(initiator\) <-> " "$LAB_STATE/log/proxy.log" ||
		fail "$from -> $to: the proxy logged no pair with initiator $from_addr"
	note "$from -> $to: 4 MiB identical through the proxy, $from at $from_px, $to at $to_px; setup $XFER_SETUP_US us, $took ms in all"
}
bridged v61 fw1 2001:db8:6::11 "[2001:db8::20]" 203.0.113.20
bridged fw1 v61 198.51.100.75 203.0.113.20 "[2001:db8::20]"
