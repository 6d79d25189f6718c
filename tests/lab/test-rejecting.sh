#!/usr/bin/env bash
# lab-rejecting: `up --rejecting` adds two sites whose firewalls answer an
# unsolicited inbound SYN instead of dropping it, and `up` without the flag
# takes them away again:
#
#   rst  NAT (MASQUERADE, keeps ports) 203.0.113.114, LAN 198.18.4.0/24:
#        inbound NEW SYNs get a TCP reset (REJECT --reject-with tcp-reset)
#   unr  firewalled, LAN 198.51.100.128/26 (unr1 198.51.100.139): inbound NEW
#        SYNs get ICMP port unreachable
#
# Both are dual-stack (rst 2001:db8:4::/64, unr 2001:db8:5::/64, no NAT66),
# their IPv6 firewalls answering the same way.
#
# Checks what a user of the lab would: both sites' services run and are
# connected; a SYN from the internet (broker) to rst1's public address and to
# unr1 is refused at once, and the router's REJECT rule counted it (nata1's
# NAT stays silent: the connect times out); rst1 and unr1 reach the broker;
# qcg-probe on rst1 and unr1 tells the reset from the ICMP error (the
# reflector's dial-back and the probe read the socket's error queue; Linux
# reports both as "connection refused"), in --json, in its human output and
# in what the broker shows of the sites; from nata1, traversing into unr
# connects although unr's router answers the initiator's SYN with an ICMP
# error; nata1 and rst1 hole-punch each other over IPv6 through rst's
# resetting IPv6 firewall, with the hop count their helpers measured; then
# `up` alone removes both sites, their services and namespaces,
# and the five-site lab's services are all still connected.
#
# In between it shows (prints, asserts nothing about) what today's hole
# punching does into and out of these sites: for each pair the technique
# the connect ended with and its setup time, or the failure.  The note of
# issue 33 has the table; each run appends it to $TEST_DIR/rejecting-pairs.txt.
. "$(dirname "$0")/test-lib.sh"
require_lab
command -v nc >/dev/null 2>&1 || skip "nc (netcat-openbsd) is not installed"
scratch
up_back() { "$LAB" up >/dev/null 2>&1 || true; }
trap 'scratch_cleanup; up_back' EXIT

"$LAB" up --rejecting >"$WORK/up.out" 2>&1 || { cat "$WORK/up.out"; fail "up --rejecting failed"; }
require_services
"$LAB" status >"$WORK/status" || { cat "$WORK/status"; fail "status after up --rejecting is not complete"; }
for n in rst1 rst2 unr1 unr2; do
	grep -Eq "^helper-$n +$n +[0-9]+ +yes" "$WORK/status" ||
		{ grep -E "helper-$n" "$WORK/status"; fail "the helper of $n is not connected"; }
done
note "up --rejecting: $(tail -n 1 "$WORK/up.out")"

# reject_count ROUTER CHAIN [ip6tables]: packets the REJECT rule of the chain
# has answered.
reject_count() {
	"$LAB" exec "r-$1" -- "${3:-iptables}" -L "$2" -v -n -x | awk '/REJECT/ { s += $1 } END { print s + 0 }'
}

# refused FROM ADDR PORT: the connect is refused within 2 s.
refused() {
	local t0 out
	t0=$(ms)
	out=$("$LAB" exec "$1" -- nc -v -z -w 3 "$2" "$3" 2>&1) && fail "$1 -> $2:$3 connected"
	echo "$out" | grep -q "refused" || fail "$1 -> $2:$3: not refused: $out"
	[ $(($(ms) - t0)) -lt 2000 ] || fail "$1 -> $2:$3: refused only after $(($(ms) - t0)) ms"
}

rst_before=$(reject_count rst INPUT)
refused broker 203.0.113.114 37500
[ "$(reject_count rst INPUT)" -gt "$rst_before" ] || fail "rst's REJECT rule did not count the SYN"
unr_before=$(reject_count unr FORWARD)
refused broker 198.51.100.139 41500
[ "$(reject_count unr FORWARD)" -gt "$unr_before" ] || fail "unr's REJECT rule did not count the SYN"
t0=$(ms)
"$LAB" exec broker -- nc -z -w 2 203.0.113.66 27500 2>/dev/null && fail "broker reached nata's NAT"
[ $(($(ms) - t0)) -ge 1500 ] || fail "nata's NAT answered a SYN (after $(($(ms) - t0)) ms) instead of dropping it"
note "broker -> rst (203.0.113.114): TCP reset; -> unr1 (198.51.100.139): ICMP port unreachable; -> nata: dropped"
# Over IPv6 (no NAT: the nodes' own addresses) the same answers.
rst6_before=$(reject_count rst FORWARD ip6tables) unr6_before=$(reject_count unr FORWARD ip6tables)
refused broker 2001:db8:4::11 38500
refused broker 2001:db8:5::11 41500
[ "$(reject_count rst FORWARD ip6tables)" -gt "$rst6_before" ] || fail "rst's IPv6 REJECT rule did not count the SYN"
[ "$(reject_count unr FORWARD ip6tables)" -gt "$unr6_before" ] || fail "unr's IPv6 REJECT rule did not count the SYN"
note "broker -> rst1 (2001:db8:4::11): TCP reset; -> unr1 (2001:db8:5::11): ICMPv6 port unreachable"
for n in rst1 unr1; do
	"$LAB" exec "$n" -- nc -z -w 3 203.0.113.10 7700 || fail "$n does not reach the broker"
done

# qcg-probe: the reflector's dial-back is answered by a reset at rst, by an
# ICMP port unreachable at unr; the observation reaches the broker's grid.
CHECK=$LAB_SRC/probe_check.py
for w in rst1:reset unr1:icmp; do
	n=${w%%:*} want=${w#*:}
	"$LAB" exec "$n" -- qcg-probe --json --local-only --timeout 60 >"$WORK/$n.json" 2>"$WORK/$n.err" ||
		{ cat "$WORK/$n.err"; fail "$n: qcg-probe --json failed"; }
	got=$(python3 "$CHECK" field "$WORK/$n.json" inbound_filtering)
	[ "$got" = "$want" ] ||
		fail "$n: inbound filtering '$got', expected $want: $(python3 "$CHECK" field "$WORK/$n.json" inbound_why)"
	"$LAB" exec "$n" -- qcg-probe --local-only --timeout 60 >"$WORK/$n.txt" 2>"$WORK/$n-txt.err" ||
		{ cat "$WORK/$n-txt.err"; fail "$n: qcg-probe failed"; }
	grep -Eq "^  inbound TCP +filtered \($want\): " "$WORK/$n.txt" ||
		{ cat "$WORK/$n.txt"; fail "$n: the human output does not say '$want'"; }
done
"$LAB" exec broker -- qcg-broker --config "$LAB_STATE/etc/broker.conf" --grid --json \
	--url "$BROKER_URL" >"$WORK/grid.json" || fail "qcg-broker --grid failed"
python3 - "$WORK/grid.json" <<'PY' || fail "the broker's grid does not show how rst and unr refuse"
import json, sys
seen = {c["name"]: (c.get("observed") or {}).get("inbound") for c in json.load(open(sys.argv[1]))["clusters"]}
assert seen.get("rst") == "reset" and seen.get("unr") == "icmp", seen
PY
note "qcg-probe: rst1 $(grep -E '^  inbound TCP' "$WORK/rst1.txt" | cut -c 18-90)"
note "qcg-probe: unr1 $(grep -E '^  inbound TCP' "$WORK/unr1.txt" | cut -c 18-90)"

# Traversing into unr: its router answers the initiator's SYN with an ICMP
# port unreachable, which ended the initiator's connect before unr1's SYN
# came ("Connection refused"); the initiator's helper now drops it.  qcg-probe
# tries each technique towards unr; traversing and hole punching must work.
"$LAB" exec nata1 -- qcg-probe --site unr --json --timeout 90 >"$WORK/nata-unr.json" 2>"$WORK/nata-unr.err" ||
	{ cat "$WORK/nata-unr.err"; fail "nata1: qcg-probe --site unr failed"; }
tv=$(
	python3 - "$WORK/nata-unr.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["peers"][0]["techniques"]
for k in ("traversing", "holepunch"):
    if not t[k]["works"]:
        sys.exit(f"{k}: {t[k]['why']}")
print(f"traversing {t['traversing']['setup_ms']:.1f} ms, hole punching {t['holepunch']['setup_ms']:.1f} ms")
PY
) || fail "nata1 -> unr: traversing or hole punching does not connect"
note "nata1 -> unr (qcg-probe --site unr): $tv"

# What today's punching does: each connect, its technique and setup time.
JOB=$(new_job rejecting)
head -c $((1 << 20)) /dev/urandom >"$WORK/in"
XFER_RANK=0
show_pair() {
	local from=$1 to=$2 r=$XFER_RANK res
	XFER_RANK=$((XFER_RANK + 2))
	BG_NAME=$from-$to-l run_bg "$to" qcg-cat --job "$JOB" --rank "$r" --json --timeout 40 listen
	wait_published "$BG_PID" "$WORK/$from-$to-l.err" '"event":"listening"' "rank $r on $to"
	# timeout: a connection that stalls after its handshake must not stall the test.
	if timeout -k 5 40 "$LAB" exec "$from" -- qcg-cat --job "$JOB" --rank $((r + 1)) --json \
		--timeout 12 connect "$r" <"$WORK/in" >/dev/null 2>"$WORK/$from-$to.cerr"; then
		res=$(json_event "$WORK/$from-$to.cerr" sent)
		res="$(echo "$res" | json_field technique) $(($(echo "$res" | json_field setup_us) / 1000)) ms ($(echo "$res" | json_field address))"
	else
		res="failed: $(grep -v '^{' "$WORK/$from-$to.cerr" | tail -n 1 | cut -c1-160)"
	fi
	printf -- '-- %-6s -> %-6s %s\n' "$from" "$to" "$res" | tee -a "$TEST_DIR/rejecting-pairs.txt"
	PAIR_RES[$from-$to]=$res
	kill "$BG_PID" 2>/dev/null || true
}
declare -A PAIR_RES
mkdir -p "$TEST_DIR"
echo "== $(date -u +%FT%TZ)" >>"$TEST_DIR/rejecting-pairs.txt"
for p in "nata1 rst1" "fw1 rst1" "natb1 unr1" "nata1 unr1" "rst1 nata1" "unr1 natb1" "rst1 unr1" "unr1 rst1"; do
	show_pair $p
done
# nata and rst are both dual-stack and NATed over IPv4: their punch goes over
# IPv6, through rst's resetting IPv6 firewall, the first SYN limited to the
# hop count the helpers measured (their logs say so).
for p in nata1-rst1 rst1-nata1; do
	[[ ${PAIR_RES[$p]} == "holepunch "*"([2001:db8:"* ]] ||
		fail "${p/-/ -> }: not hole-punched over IPv6: ${PAIR_RES[$p]}"
done
for n in nata1 rst1; do
	grep -aqE "punch from port [0-9]+ to \[2001:db8:[34]::11\]:[0-9]+ connected .*first SYN with TTL [0-9]+ \([0-9]+ hops" \
		"$LAB_STATE/log/helper-$n.log" || fail "$n's helper logged no IPv6 punch with a measured hop count"
done
note "nata1 <-> rst1: hole-punched over IPv6 through rst's resetting firewall, the first SYN TTL-limited"

# up without the flag: the five-site lab, as before.
"$LAB" up >"$WORK/up2.out" 2>&1 || { cat "$WORK/up2.out"; fail "up without --rejecting failed"; }
left=$(ip netns list | awk '$1 ~ /^qcg-(r-)?(rst|unr)/ { print $1 }')
[ -z "$left" ] || fail "up without --rejecting left: $left"
"$LAB" status >"$WORK/status2" || { cat "$WORK/status2"; fail "the five-site lab is not complete after up"; }
grep -Eq "^(frontend-|helper-)(rst|unr)" "$WORK/status2" && fail "status still lists the rejecting sites' services"
note "up: the rejecting sites are gone, the five-site lab's services all connected"
