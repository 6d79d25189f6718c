#!/usr/bin/env bash
# lab-probe: qcg-probe tells each site what it is and what connects from it.
#
# 1. On a node of each of the five sites, `qcg-probe --json`: the site's kind as
#    observed (public address, mapping endpoint-independent or -dependent, ports
#    kept or not, unsolicited inbound open or dropped) is what qcg-lab built and
#    what the frontend declares; every other site gets a test endpoint, every
#    technique a verdict with a setup time or a reason, and a choice.
#    Per family (IPv4, IPv6): nata1's addresses, services, inbound and what
#    connected over each (direct to open over IPv6); fw1 says it has no
#    IPv6; qcg-helper --status shows every address of the node.
# 2. The choice is what qcg-cat then gets for each of the 20 ordered pairs.
# 3. --capture writes a pcap tcpdump reads, with the probe's SYNs to the
#    reflector; the dial-back SYN reaches open1 and never fw1.
# 4. A router that rejects instead of dropping is seen as "rejected".
# 5. sym's frontend declares a port-keeping NAT: the probe flags the mismatch
#    and the broker's grid picture shows it.
#    The README's samples of qcg-probe (nata1's, its JSON, sym1's mismatch)
#    and of qcg-broker --grid have the shape of what steps 1 and 5 print; the
#    grid shows each site's declared ranges, IPv6 ones too
#    (tests/docs/check_samples.py --block).
# 6. The exit status says when the frontend (3) or the broker (4) is out of reach.
# 7. A router that turns connections to its public address back in is seen as
#    hair-pinning; a router running a real NAT-PMP/PCP/UPnP daemon (miniupnpd)
#    is seen offering all three.
# 8. An admin may probe again straight away: a finished probe's endpoints
#    withdraw and free their slots (8 per cluster) at once.
# The lab is put back as it was at the end, also on failure.
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
[ -x "$QCG_BUILD_DIR/tools/qcg-probe" ] || skip "qcg-probe is not built in $QCG_BUILD_DIR"
command -v tcpdump >/dev/null 2>&1 || skip "tcpdump is not installed (scripts/install-deps)"
scratch
CHECK=$LAB_SRC/probe_check.py
SAMPLES=$LAB_SRC/../docs/check_samples.py
RULES=() # "NODE TABLE-RULE" to delete at the end
restore() {
	local r
	for r in "${RULES[@]}"; do
		# shellcheck disable=SC2086 # the rule's words
		"$LAB" exec "${r%% *}" -- iptables -D ${r#* } 2>/dev/null || true
	done
	QCG_LAB_DECLARE="" "$LAB" up >/dev/null 2>&1 || true
}
trap 'scratch_cleanup; restore' EXIT
# add_rule NODE CHAIN SPEC...: iptables -I CHAIN 1 SPEC in NODE, deleted by
# drop_rule (the last one added) or at the end.
add_rule() {
	local node=$1 chain=$2
	shift 2
	"$LAB" exec "$node" -- iptables -I "$chain" 1 "$@"
	RULES+=("$node $chain $*")
}
drop_rule() {
	local last=$((${#RULES[@]} - 1)) r
	r=${RULES[$last]}
	# shellcheck disable=SC2086 # the rule's words
	"$LAB" exec "${r%% *}" -- iptables -D ${r#* }
	unset "RULES[$last]"
}
declare -A KIND=([open]=open [fw]=firewalled [nata]=nat [natb]=nat [sym]=symnat)

# --- 1: every site --------------------------------------------------------------
for s in open fw nata natb sym; do
	rc=0
	"$LAB" exec "${s}1" -- qcg-probe --json --timeout 150 >"$WORK/$s.json" 2>"$WORK/$s.err" || rc=$?
	[ "$rc" -eq 0 ] || { cat "$WORK/$s.err" "$WORK/$s.json"; fail "${s}1: qcg-probe exited $rc"; }
	python3 "$CHECK" site "$WORK/$s.json" "${KIND[$s]}" || fail "${s}1: the site is not what the lab built"
	gw=$("$LAB" exec "${s}1" -- ip -4 route show default | awk '{ print $3; exit }')
	[ "$(python3 "$CHECK" field "$WORK/$s.json" port_mapping.gateway)" = "$gw" ] ||
		fail "${s}1: port mapping asked $(python3 "$CHECK" field "$WORK/$s.json" port_mapping.gateway), not the default gateway $gw"
	python3 "$CHECK" peers "$WORK/$s.json" >"$WORK/$s.chosen" || fail "${s}1: the peers' matrix"
	note "${s}1: ${KIND[$s]} ($(python3 "$CHECK" field "$WORK/$s.json" nat.mapping)," \
		"inbound $(python3 "$CHECK" field "$WORK/$s.json" inbound)), chosen:" \
		"$(tr '\n' ' ' <"$WORK/$s.chosen")in $(python3 "$CHECK" field "$WORK/$s.json" elapsed_ms) ms"
done
# What the README shows of nata1's probe, as a user reads it.
"$LAB" exec nata1 -- qcg-probe --timeout 150 >"$WORK/nata.txt" 2>"$WORK/nata-txt.err" ||
	{ cat "$WORK/nata-txt.err"; fail "nata1: qcg-probe (human output) failed"; }
python3 "$SAMPLES" --block probe-nata "$WORK/nata.txt" || fail "README.md's qcg-probe sample"

# --- 1b: per family (issue 33) ---------------------------------------------------------
# nata1 is dual-stack (NAT44, IPv6 behind a stateful firewall), fw1 IPv4 only:
# each family says its addresses, what it reached, inbound, what connected.
python3 - "$WORK/nata.json" "$WORK/fw.json" <<'PY' || fail "the probes' per-family findings"
import json, sys
nata, fw = (json.load(open(f)) for f in sys.argv[1:3])
f4, f6 = nata["families"]["ipv4"], nata["families"]["ipv6"]
assert nata["addresses"] == ["198.18.1.11", "2001:db8:3::11"], nata["addresses"]
assert f4["addresses"] == ["198.18.1.11"] and f6["addresses"] == ["2001:db8:3::11"], (f4, f6)
assert f4["none"] is None and f6["none"] is None, (f4["none"], f6["none"])
assert {s["to"]: s["reachable"] for s in f4["services"]} == \
    {"frontend": True, "broker": True, "reflector": True, "proxy": True}, f4["services"]
assert f4["inbound"] == "filtered" and f4["inbound_filtering"] == "dropped", f4
# The broker's reflector has an IPv6 address: it dials nata1's back, which
# nata's IPv6 firewall drops (it lets in nata2's /64 only).
assert f6["inbound"] == "filtered" and f6["inbound_filtering"] == "dropped", f6
assert {s["to"]: s["reachable"] for s in f6["services"]}.get("reflector") is True, f6["services"]
peer = lambda fam, site: [p for p in fam["peers"] if p["site"] == site][0]
# open1 takes IPv6 from anywhere: direct goes over IPv6, to open's /64.
assert "direct" in peer(f6, "open")["connected"] and peer(f6, "open")["chosen"], peer(f6, "open")
d = [p for p in nata["peers"] if p["site"] == "open"][0]["techniques"]["direct"]
assert d["family"] == "ipv6" and d["address"].startswith("2001:db8:1::"), d
# fw has no IPv6: what reaches it goes over IPv4, and IPv6 says why not.
assert "traversing" in peer(f4, "fw")["connected"], peer(f4, "fw")
assert peer(f6, "fw")["connected"] == [] and "went over IPv4" in peer(f6, "fw")["why_not"], peer(f6, "fw")
g6 = fw["families"]["ipv6"]
assert fw["addresses"] == ["198.51.100.75"], fw["addresses"]
assert g6["addresses"] == [] and g6["none"] == "this node has no IPv6 address", g6
assert all(p["why_not"] == "this node has no IPv6 address" for p in g6["peers"]), g6["peers"]
assert fw["families"]["ipv4"]["inbound_filtering"] == "dropped", fw["families"]["ipv4"]
# The punching variant: the lab's helpers run punch-ttl auto.
pu = nata["punching"]
assert pu["punch_ttl"] == "auto" and pu["variant"], pu
assert pu["hops"] is None or (pu["hops"] >= 1 and "hops to the reflector" in pu["variant"]), pu
PY
grep -q "^qcg-probe: node nata1 (198.18.1.11, 2001:db8:3::11) of site nata" "$WORK/nata.txt" &&
	grep -A2 "^  IPv6           address 2001:db8:3::11" "$WORK/nata.txt" | grep -q "inbound filtered (dropped)" &&
	sed -n '/^  IPv6 /,$p' "$WORK/nata.txt" | grep -q "^                 to open: direct" ||
	{ cat "$WORK/nata.txt"; fail "nata1: the human output's per-family part"; }
"$LAB" exec fw1 -- qcg-probe --local-only --no-report >"$WORK/fw-local.txt"
grep -q "^  IPv6           none: this node has no IPv6 address" "$WORK/fw-local.txt" ||
	{ cat "$WORK/fw-local.txt"; fail "fw1: the probe does not say plainly that it has no IPv6"; }
# The helper's status names every address of the node.
"$LAB" exec nata1 -- qcg-helper --config "$LAB_STATE/etc/helper-nata1.conf" --status >"$WORK/status.txt"
grep -q "^addresses  *198.18.1.11, 2001:db8:3::11$" "$WORK/status.txt" ||
	{ cat "$WORK/status.txt"; fail "nata1: qcg-helper --status does not show both addresses"; }
"$LAB" exec nata1 -- qcg-helper --config "$LAB_STATE/etc/helper-nata1.conf" --status --json |
	grep -q '"addresses":\["198.18.1.11","2001:db8:3::11"\]' ||
	fail "nata1: qcg-helper --status --json does not list both addresses"
note "per family: nata1 IPv4 and IPv6 (direct to open over IPv6), fw1 says it has no IPv6"

# --- 2: the choices are what qcg-cat gets --------------------------------------------
JOB=$(new_job probe)
head -c $((1 << 20)) /dev/urandom >"$WORK/in"
pairs=0
for s in open fw nata natb sym; do
	while read -r peer chosen node; do
		# To the node the probe's endpoint ran on: its choice is that node's.
		cat_transfer "${s}1" "$node"
		[ "$XFER_TECH" = "$chosen" ] ||
			fail "${s}1 -> $node ($peer): the probe said $chosen, qcg-cat used $XFER_TECH"
		pairs=$((pairs + 1))
	done <"$WORK/$s.chosen"
done
[ "$pairs" -eq 20 ] || fail "$pairs pairs compared, not 20"
note "20 pairs: qcg-cat used the technique each probe chose"

# --- 3: the capture ---------------------------------------------------------------
for n in open1 fw1; do
	"$LAB" exec "$n" -- qcg-probe --json --local-only --capture "$WORK/$n.pcap" \
		>"$WORK/$n-cap.json" 2>"$WORK/$n-cap.err" || { cat "$WORK/$n-cap.err"; fail "$n: --capture run"; }
	tcpdump -nr "$WORK/$n.pcap" >"$WORK/$n.txt" 2>"$WORK/$n.tcpdump-err" ||
		{ cat "$WORK/$n.tcpdump-err"; fail "$n: tcpdump cannot read the capture"; }
	grep -q "> 203.0.113.10.7704: Flags \[S\]" "$WORK/$n.txt" ||
		fail "$n: no SYN to the reflector in the capture"
	[ "$(python3 "$CHECK" field "$WORK/$n-cap.json" capture.packets)" -eq "$(wc -l <"$WORK/$n.txt")" ] ||
		fail "$n: the probe's packet count differs from tcpdump's"
done
[ "$(python3 "$CHECK" field "$WORK/open1-cap.json" inbound_syns_reached_node)" -ge 1 ] ||
	fail "open1: the reflector's dial-back SYN is not in the capture"
[ "$(python3 "$CHECK" field "$WORK/fw1-cap.json" inbound_syns_reached_node)" -eq 0 ] ||
	fail "fw1: a dial-back SYN reached the node through the firewall"
note "capture: tcpdump reads both files; the dial-back SYN reached open1, not fw1"

# --- 4: reset, not dropped --------------------------------------------------------
add_rule r-fw FORWARD -i qcg-wan -p tcp --syn -j REJECT --reject-with tcp-reset
"$LAB" exec fw1 -- qcg-probe --json --local-only >"$WORK/fw-reject.json"
drop_rule
[ "$(python3 "$CHECK" field "$WORK/fw-reject.json" inbound_filtering)" = reset ] ||
	fail "fw1 behind a rejecting router: $(python3 "$CHECK" field "$WORK/fw-reject.json" inbound_why)"
note "a router that resets: inbound filtered (reset)"

# --- 5: a misdeclared site -----------------------------------------------------------
QCG_LAB_DECLARE=sym=nat "$LAB" up >/dev/null
"$LAB" exec sym1 -- qcg-probe --site nata >"$WORK/sym-mis.txt" || fail "sym1: probe failed"
grep -q "^!! MISMATCH: site sym declares nat, but this node observed symnat" "$WORK/sym-mis.txt" ||
	{ cat "$WORK/sym-mis.txt"; fail "sym1: the human output does not flag the mismatch"; }
python3 "$SAMPLES" --block probe-mismatch "$WORK/sym-mis.txt" || fail "README.md's mismatch sample"
"$LAB" exec sym1 -- qcg-probe --site nata --json >"$WORK/sym-mis.json"
python3 "$CHECK" mismatch "$WORK/sym-mis.json" nat symnat || fail "sym1: the mismatch in --json"
python3 "$SAMPLES" --block probe-json "$WORK/sym-mis.json" || fail "README.md's qcg-probe --json sample"
"$LAB" exec broker -- qcg-broker --config "$LAB_STATE/etc/broker.conf" --grid --json \
	--url "$BROKER_URL" >"$WORK/grid.json" || fail "qcg-broker --grid failed"
python3 - "$WORK/grid.json" <<'PY' || fail "the broker's grid picture does not show sym's mismatch"
import json, sys
g = json.load(open(sys.argv[1]))
sym = [c for c in g["clusters"] if c["name"] == "sym"][0]
assert sym["declared"]["kind"] == "nat" and sym["observed"]["kind"] == "symnat" and sym["mismatch"], sym
ok = [c for c in g["clusters"] if c["name"] == "nata"][0]
assert ok["observed"]["kind"] == "nat" and not ok["mismatch"], ok
# Every family a site declares (issue 33).
assert ok["declared"]["node_ranges"] == ["198.18.1.0/24", "2001:db8:3::/48"], ok["declared"]
assert ok["declared"]["open_ranges"] == ["2001:db8:3:5::/64"], ok["declared"]
assert any(o["from"] == "nata" and o["to"] == "fw" for o in g["outcomes"]), g["outcomes"]
PY
# The README's picture of the grid, as an admin reads it.
"$LAB" exec broker -- qcg-broker --config "$LAB_STATE/etc/broker.conf" --grid \
	--url "$BROKER_URL" >"$WORK/grid.txt" || fail "qcg-broker --grid (human output) failed"
grep -q "^addresses: nata nodes 198.18.1.0/24, 2001:db8:3::/48; open to inbound 2001:db8:3:5::/64$" \
	"$WORK/grid.txt" || { cat "$WORK/grid.txt"; fail "qcg-broker --grid does not show nata's IPv6 ranges"; }
# The matrix's diagonal holds what earlier tests of the lab did inside one
# site (none in the README's fresh grid): left out of the comparison.  So is
# which of open -> nata's two techniques the last probe took: nata's probe
# endpoint may be nata2, in nata's IPv6 open range (direct over IPv6), or
# nata1 (reversed, as the README shows); step 1 checked the one it was.
python3 - "$WORK/grid.txt" >"$WORK/grid-sample.txt" <<'PY'
import re, sys
lines, names = open(sys.argv[1]).read().split("\n"), None
for i, line in enumerate(lines):
    cells = re.split(r"\s{2,}", line.strip())
    if names is None and line.startswith("      ") and len(cells) > 1:
        names = cells
    elif names and cells[0] in names and len(cells) == len(names) + 1:
        cells[1 + names.index(cells[0])] = "-"
        if cells[0] == "open" and "nata" in names:
            j = 1 + names.index("nata")
            cells[j] = re.sub(r"^direct ", "reversed ", cells[j])
        lines[i] = "  ".join(cells)
print("\n".join(lines), end="")
PY
python3 "$SAMPLES" --block grid "$WORK/grid-sample.txt" || fail "README.md's qcg-broker --grid sample"
grep -q "misconfiguration: cluster sym declares nat but node sym1 observed symnat" \
	"$LAB_STATE/log/broker.log" || fail "the broker did not log the observed misconfiguration"
QCG_LAB_DECLARE="" "$LAB" up >/dev/null
note "sym declared nat: the probe and the broker's grid flag it"
# A probe ends its connections in order: no test endpoint logs one as broken.
if grep -h "probe endpoint for job .*: a connection closed" "$LAB_STATE"/log/helper-*.log >"$WORK/broken"; then
	cat "$WORK/broken"
	fail "the test endpoints logged the probes' connections as broken"
fi

# --- 6: exit status when a service is out of reach --------------------------------------
add_rule nata-head OUTPUT -d 203.0.113.10 -p tcp --dport 7700 -j REJECT --reject-with tcp-reset
rc=0
"$LAB" exec nata1 -- qcg-probe --json --timeout 60 >"$WORK/nobroker.json" 2>&1 || rc=$?
drop_rule
[ "$rc" -eq 4 ] || { cat "$WORK/nobroker.json"; fail "broker out of the frontend's reach: exit $rc, not 4"; }
add_rule nata1 OUTPUT -d 198.18.1.10 -p tcp --dport 7701 -j REJECT --reject-with tcp-reset
rc=0
"$LAB" exec nata1 -- qcg-probe --timeout 60 >"$WORK/nofrontend.txt" 2>&1 || rc=$?
drop_rule
[ "$rc" -eq 3 ] || { cat "$WORK/nofrontend.txt"; fail "frontend out of reach: exit $rc, not 3"; }
grep -q "the frontend cannot be reached" "$WORK/nofrontend.txt" ||
	{ cat "$WORK/nofrontend.txt"; fail "frontend out of reach: the message does not say so"; }
"$LAB" up >/dev/null
note "exit 4 with the broker out of the frontend's reach, 3 with the frontend out of the node's"

# --- 6b: a user's probe (issue 36, item 6): it measures, it does not report -----------
rc=0
"$LAB" exec nata1 -- setpriv --reuid=65534 --regid=65534 --clear-groups \
	qcg-probe --local-only >"$WORK/user.txt" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { cat "$WORK/user.txt"; fail "nata1: a user's qcg-probe exited $rc"; }
grep -q "not sent to the broker: a user's probe measures all of the above, but only root's" \
	"$WORK/user.txt" && grep -q "NAT mapping" "$WORK/user.txt" ||
	{ cat "$WORK/user.txt"; fail "nata1: a user's probe does not say plainly that it is not reported"; }
! grep -q "warn .*OBSERVED refused" "$LAB_STATE/log/helper-nata1.log" ||
	fail "nata1's helper warned about a user's probe: $(grep 'OBSERVED refused' "$LAB_STATE/log/helper-nata1.log")"
note "a user's probe on nata1: measured, not reported, no warning at the helper"

# --- 7: hair-pinning and port mapping offered by the router ---------------------------
# Hair-pinning as a home router does it: from the LAN, the public address is
# forwarded to nata1 and the source rewritten so that replies come back.
NATA1=198.18.1.11 NATA_PUBLIC=203.0.113.66
add_rule r-nata PREROUTING -t nat -i qcg-lan -d "$NATA_PUBLIC" -p tcp -j DNAT --to-destination "$NATA1"
add_rule r-nata POSTROUTING -t nat -o qcg-lan -s 198.18.1.0/24 -d "$NATA1" -j MASQUERADE
add_rule r-nata FORWARD -i qcg-lan -o qcg-lan -j ACCEPT
"$LAB" exec nata1 -- qcg-probe --json --local-only --no-report >"$WORK/hairpin.json"
drop_rule
drop_rule
drop_rule
[ "$(python3 "$CHECK" field "$WORK/hairpin.json" hairpinning)" = true ] ||
	fail "nata1 behind a hair-pinning router: $(python3 "$CHECK" field "$WORK/hairpin.json" hairpinning_why)"
note "a hair-pinning router: $(python3 "$CHECK" field "$WORK/hairpin.json" hairpinning_why)"

if command -v miniupnpd >/dev/null 2>&1 || [ -x /usr/sbin/miniupnpd ]; then
	# miniupnpd in nata's router, answering on the LAN side only.  It loads an
	# (empty) legacy nat table in that namespace, which goes with the lab.
	cat >"$WORK/miniupnpd.conf" <<-EOF
		ext_ifname=qcg-wan
		listening_ip=qcg-lan
		port=0
		enable_natpmp=yes
		enable_upnp=yes
		secure_mode=yes
		uuid=5b8a0b6a-6d0e-4f3e-9d46-1f5c0a7e5e01
		allow 1024-65535 198.18.1.0/24 1024-65535
		deny 0-65535 0.0.0.0/0 0-65535
	EOF
	"$LAB" exec r-nata -- /usr/sbin/miniupnpd -f "$WORK/miniupnpd.conf" -d -P "$WORK/miniupnpd.pid" \
		>"$WORK/miniupnpd.log" 2>&1 &
	UPNPD=$! # qcg-lab exec execs: this is miniupnpd
	BG_PIDS+=("$UPNPD")
	stop_upnpd() { kill "$UPNPD" 2>/dev/null || true; wait "$UPNPD" 2>/dev/null || true; }
	listening() { "$LAB" exec r-nata -- ss -Hlun 'sport = :5351' | grep -q .; }
	poll 10 "miniupnpd listening on 5351/udp" listening || { cat "$WORK/miniupnpd.log"; fail "miniupnpd did not start"; }
	"$LAB" exec nata1 -- qcg-probe --json --local-only --no-report >"$WORK/portmap.json"
	"$LAB" exec nata1 -- qcg-probe --local-only --no-report >"$WORK/portmap.txt"
	stop_upnpd
	python3 - "$WORK/portmap.json" <<'PY' || { cat "$WORK/miniupnpd.log"; fail "the port-mapping protocols of miniupnpd"; }
import json, sys
pm = json.load(open(sys.argv[1]))["port_mapping"]
assert pm["gateway"] == "198.18.1.1", pm
for proto in ("pcp", "upnp"):
    assert pm[proto]["offered"] is True and pm[proto]["answered"] is True, (proto, pm[proto])
assert "http://198.18.1.1:" in pm["upnp"]["detail"], pm["upnp"]
# miniupnpd refuses NAT-PMP mappings when its external address is a reserved
# one (203.0.113.0/24 is TEST-NET-3): it answers, with result 3.
n = pm["nat_pmp"]
assert n["answered"] is True and n["offered"] is False and "network failure" in n["detail"], n
PY
	grep -q "port mapping   gateway 198.18.1.1: nat-pmp no, pcp yes, upnp yes" "$WORK/portmap.txt" &&
		grep -q "nat-pmp: answered: result 3 (network failure)" "$WORK/portmap.txt" &&
		grep -q "any host of this site may open inbound ports on this router" "$WORK/portmap.txt" ||
		{ cat "$WORK/portmap.txt"; fail "the human output does not show the port-mapping protocols"; }
	note "miniupnpd in nata's router: pcp and upnp offered, nat-pmp answered with result 3"
else
	note "miniupnpd is not installed: the port-mapping detection was not checked against a real gateway"
fi

# --- 8: again, straight away -------------------------------------------------------
# Step 1 left no live probe: three full probes in a row from open1 (12 test
# endpoints, more than the 8 slots) each get an endpoint at every site.
for i in 1 2 3; do
	"$LAB" exec open1 -- qcg-probe --json --timeout 60 >"$WORK/again.json" ||
		fail "open1: probe $i in a row failed"
	python3 "$CHECK" peers "$WORK/again.json" >/dev/null || fail "open1: probe $i in a row"
done
note "three probes in a row from open1: endpoints everywhere each time"
