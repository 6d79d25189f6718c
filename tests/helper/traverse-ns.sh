#!/usr/bin/env bash
#
# Traversing TCP (helper/traverse.c) against a real stateful firewall, in
# network namespaces of its own (qcg-tv-*; the shared lab is not touched).
#
#   qcg-tv-a ---------- qcg-tv-ra -------- qcg-tv-inet -------- qcg-tv-rb ---------- qcg-tv-b
#   198.18.101.11   lan .1   wan .201    .202 |      .206    .205 wan   lan .193   198.51.100.201
#   (initiator)      MASQUERADE (ports kept),  |  drops 198.18/15   stateful firewall:  (target:
#                    inbound NEW dropped       |                   ESTABLISHED,RELATED  listener +
#                                              | .210               accepted, INVALID    engine)
#                                        qcg-tv-p 203.0.113.209     and inbound NEW
#                                        (public initiator)         dropped (FORWARD)
#
# The two drivers talk through a FIFO on the shared file system (the broker's
# job in the real system).  Checks:
#   1. without the engine, A -> B does not connect (the firewall drops it);
#   2. with it, A -> B (NAT) and P -> B (public) connect, 64 MiB intact both ways;
#   3. afterwards no rule of ours in any namespace, no half-open conntrack entry
#      of the flow in the routers;
#   4. the target refuses a SYN to another port, with ACK set, truncated, to
#      another address, not hex - and injects nothing;
#   2b. with the firewall rejecting A's SYN instead of dropping it (an ICMP
#      port unreachable, then a TCP reset), A -> B still connects: the
#      initiator's guard keeps the rejection from ending A's connect;
#   5. the technique as published (SYN injected, SYN/ACK left alone) fails
#      against the firewall: how is measured and printed;
#   and connect times, traversing against a plain connect through the firewall
#   opened for NEW (medians of 20).
#
# With 6, the same over IPv6 (qcg-tv6-*): no NAT (ra is a stateful ip6tables
# firewall like rb, and A's public address is its own), every address from
# 2001:db8::/32, the firewalls' rules in ip6tables, the rejecting firewall's
# ICMPv6 port unreachable and reset, the engines' rules in ip6tables' raw
# table and their packets through IPv6 raw sockets:
#
#   qcg-tv6-a 2001:db8:a::11 - ra 2001:db8:f1::1 - inet - rb 2001:db8:f2::1 - qcg-tv6-b 2001:db8:b::201
#                                     qcg-tv6-p 2001:db8:f3::9 (public initiator)
#
# usage: traverse-ns.sh PATH/TO/traverse_driver [4|6]  exit 0 passed, 1 failed, 77 skipped
# Every wait is bounded; everything made is removed on exit (trap).

set -euo pipefail
export LC_ALL=C
# shellcheck source=tests/lib/common.sh
. "$(dirname "$0")/../lib/common.sh"

driver=${1:?usage: traverse-ns.sh PATH/TO/traverse_driver [4|6]}
fam=${2:-4}
if [[ $fam == 6 ]]; then
	X=qcg-tv6 ipt=ip6tables
	A=2001:db8:a::11 P=2001:db8:f3::9 B=2001:db8:b::201 B2=2001:db8:b::202
	RA_WAN=$A # no NAT: A's packets leave with its own address
else
	X=qcg-tv ipt=iptables
	A=198.18.101.11 RA_WAN=203.0.113.201 P=203.0.113.209 B=198.51.100.201 B2=198.51.100.202
fi
NS=("$X-a" "$X-ra" "$X-inet" "$X-rb" "$X-b" "$X-p")
PORT=5201 QA=7 QB=8 RUNS=${TRAVERSE_RUNS:-20}

[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces, $ipt, NFQUEUE)"
need_commands ip $ipt conntrack python3 sha256sum mkfifo
for ns in "${NS[@]}"; do
	if ip netns list | grep -qw "$ns"; then
		echo "FAIL: namespace $ns exists already (another run?); remove it first" >&2
		exit 1
	fi
done

tmp=$(mktemp -d /tmp/qcg-tv.XXXXXX)
made=()
pids=()
cleanup() {
	local p ns
	stop_children "${pids[@]}"
	for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
	# TRAVERSE_KEEP=DIR keeps the drivers' outputs.
	if [[ -n ${TRAVERSE_KEEP:-} ]]; then
		mkdir -p "$TRAVERSE_KEEP" && cp "$tmp"/connect-* "$tmp"/target-* "$tmp"/listen-* \
			"$TRAVERSE_KEEP"/ 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap "exit 1" INT TERM HUP


# One wrapper per namespace.
a() { ip netns exec $X-a "$@"; }
ra() { ip netns exec $X-ra "$@"; }
inet() { ip netns exec $X-inet "$@"; }
rb() { ip netns exec $X-rb "$@"; }
b() { ip netns exec $X-b "$@"; }
p() { ip netns exec $X-p "$@"; }

# link NS1 IF1 ADDR1 NS2 IF2 ADDR2: a veth pair between two namespaces
# (IPv6 addresses without duplicate address detection: usable at once).
link() {
	local nodad=()
	[[ $fam == 6 ]] && nodad=(nodad)
	ip link add "$2" netns "$1" type veth peer name "$5" netns "$4"
	ip -n "$1" addr add "$3" dev "$2" "${nodad[@]}"
	ip -n "$4" addr add "$6" dev "$5" "${nodad[@]}"
	ip -n "$1" link set "$2" up
	ip -n "$4" link set "$5" up
}

# (IPv6: neighbour discovery reaches the router itself.)
stateful_filter() {
	cat <<-EOF
		*filter
		:INPUT ACCEPT [0:0]
		:FORWARD DROP [0:0]
		:OUTPUT ACCEPT [0:0]
		$([[ $fam == 6 ]] && echo "-A INPUT -p ipv6-icmp -j ACCEPT")
		-A INPUT -i wan -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
		-A INPUT -i wan -j DROP
		-A FORWARD -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
		-A FORWARD -m conntrack --ctstate INVALID -j DROP
		-A FORWARD -i lan -o wan -j ACCEPT
		COMMIT
	EOF
}

topology6() {
	link $X-a eth0 $A/64 $X-ra lan 2001:db8:a::1/64
	link $X-ra wan 2001:db8:f1::1/64 $X-inet ra 2001:db8:f1::2/64
	link $X-rb wan 2001:db8:f2::1/64 $X-inet rb 2001:db8:f2::2/64
	link $X-b eth0 $B/64 $X-rb lan 2001:db8:b::1/64
	link $X-p eth0 $P/64 $X-inet p 2001:db8:f3::1/64
	a ip -6 route add default via 2001:db8:a::1
	ra ip -6 route add default via 2001:db8:f1::2
	rb ip -6 route add default via 2001:db8:f2::2
	b ip -6 route add default via 2001:db8:b::1
	p ip -6 route add default via 2001:db8:f3::1
	inet ip -6 route add 2001:db8:a::/64 via 2001:db8:f1::1
	inet ip -6 route add 2001:db8:b::/64 via 2001:db8:f2::1
	for ns in $X-ra $X-inet $X-rb; do
		ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.forwarding=1
	done
	stateful_filter | ra ip6tables-restore
	stateful_filter | rb ip6tables-restore
}

topology() {
	local ns
	for ns in "${NS[@]}"; do
		ip netns add "$ns"
		made+=("$ns")
		ip -n "$ns" link set lo up
	done
	if [[ $fam == 6 ]]; then
		topology6
		return
	fi
	link qcg-tv-a eth0 $A/24 qcg-tv-ra lan 198.18.101.1/24
	link qcg-tv-ra wan $RA_WAN/30 qcg-tv-inet ra 203.0.113.202/30
	link qcg-tv-rb wan 203.0.113.205/30 qcg-tv-inet rb 203.0.113.206/30
	link qcg-tv-b eth0 $B/26 qcg-tv-rb lan 198.51.100.193/26
	link qcg-tv-p eth0 $P/30 qcg-tv-inet p 203.0.113.210/30
	a ip route add default via 198.18.101.1
	ra ip route add default via 203.0.113.202
	rb ip route add default via 203.0.113.206
	b ip route add default via 198.51.100.193
	p ip route add default via 203.0.113.210
	inet ip route add 198.51.100.192/26 via 203.0.113.205
	for ns in qcg-tv-ra qcg-tv-inet qcg-tv-rb; do
		ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
	done
	inet iptables -A FORWARD -s 198.18.0.0/15 -j DROP
	# The NAT: plain MASQUERADE keeps source ports (endpoint-independent mapping).
	{
		printf '*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n'
		printf ':POSTROUTING ACCEPT [0:0]\n-A POSTROUTING -o wan -j MASQUERADE\nCOMMIT\n'
		stateful_filter
	} | ra iptables-restore
	stateful_filter | rb iptables-restore
}

# ours NS...: our rules or chains left in these namespaces (printed), else false.
ours() {
	local ns found=1
	for ns in "$@"; do
		if { ip netns exec "$ns" iptables-save; ip netns exec "$ns" ip6tables-save; } |
			grep -E 'QCG-TRAVERSE|NFQUEUE|qcg-helper'; then
			found=0
		fi
	done
	return $found
}

# half_open PORT: conntrack entries of the flow from source port PORT that are
# not established, in both routers (printed), else false.
half_open() {
	local r found=1
	for r in $X-ra $X-rb; do
		if ip netns exec "$r" conntrack -L -f "ipv$fam" -p tcp 2>/dev/null | grep -w "sport=$1" |
			grep -E 'SYN_SENT|SYN_RECV|UNREPLIED'; then
			found=0
		fi
	done
	return $found
}

invalid_drops() {
	rb $ipt -t filter -L FORWARD -v -x -n | awk '/ctstate INVALID/ { print $1 }'
}

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print "n/a" }'; }

# start NAME NS CMD...: runs CMD in namespace NS in the background, output in
# $tmp/NAME; $last is its pid (ip netns exec execs CMD: the same process).
start() {
	local name=$1 ns=$2
	shift 2
	ip netns exec "$ns" "$@" >"$tmp/$name" 2>&1 &
	pids+=($!)
	last=$!
}

# traverse LABEL NSFN PUB: one traversing connection with 64 MiB both ways.
traverse() {
	local label=$1 ns=$2 pub=$3 t l
	rm -f "$tmp/chan"
	mkfifo "$tmp/chan"
	start target-$label $X-b "$driver" target $B --queue $QB --chan "$tmp/chan" --pub "$pub" \
		--port $PORT --count 1 --timeout 30 --debug
	t=$last
	wait_for "the target's engine" 50 grep -q 'target ready' "$tmp/target-$label" ||
		{ fail "$label: target did not start" "$tmp/target-$label"; return; }
	start listen-$label $X-b "$driver" listen $B $PORT --send "$tmp/b.data" \
		--recv "$tmp/b.got-$label" --timeout 30
	l=$last
	wait_for "the listener" 50 b ss -Htln "sport = :$PORT" || true
	if $ns "$driver" connect $B $PORT --watch $QA --chan "$tmp/chan" --send "$tmp/a.data" \
		--recv "$tmp/a.got-$label" --timeout 30 --debug >"$tmp/connect-$label" 2>&1 &&
		wait "$l" && wait "$t"; then
		if cmp -s <(sha256sum <"$tmp/a.data") <(sha256sum <"$tmp/b.got-$label") &&
			cmp -s <(sha256sum <"$tmp/b.data") <(sha256sum <"$tmp/a.got-$label"); then
			pass "$label: traversing connected in $(sed -n 's/^connected 1 from port [0-9]* in //p' \
				"$tmp/connect-$label"), 64 MiB intact both ways (sha256)"
		else
			fail "$label: data corrupted" "$tmp/connect-$label" "$tmp/listen-$label"
		fi
	else
		fail "$label: traversing did not connect" "$tmp/connect-$label" "$tmp/target-$label" \
			"$tmp/listen-$label"
	fi
	wait "$t" 2>/dev/null || true
	wait "$l" 2>/dev/null || true
	local sport
	sport=$(sed -n 's/^connected 1 from port \([0-9]*\) .*/\1/p' "$tmp/connect-$label")
	if ours $X-a $X-b $X-p; then
		fail "$label: rules left behind"
	else
		pass "$label: no rule or chain of ours left (iptables-save in a, b, p)"
	fi
	if [[ -n $sport ]] && ! half_open "$sport"; then
		pass "$label: no half-open conntrack entry of the flow (port $sport) in ra, rb"
	else
		fail "$label: half-open conntrack entries left (port ${sport:-?})"
	fi
	grep -h '^syn ' "$tmp/connect-$label" | head -1 | cut -d' ' -f2 >"$tmp/syn-$label" || true
}

head -c 64M /dev/urandom >"$tmp/a.data"
head -c 64M /dev/urandom >"$tmp/b.data"
topology
wait_for "A reaching the internet through its router" 60 a ping -c1 -W1 \
	"$([[ $fam == 6 ]] && echo 2001:db8:f2::2 || echo 203.0.113.206)" ||
	{ fail "topology: A cannot reach the internet"; exit 1; }

# 1. The firewall drops A's SYN: no connection without the engine.
start listen-plain $X-b "$driver" listen $B $PORT --timeout 5
wait_for "the listener" 50 b ss -Htln "sport = :$PORT" || true
if a "$driver" connect $B $PORT --timeout 3 >"$tmp/connect-plain" 2>&1; then
	fail "without the engine A connected: the firewall does not firewall" "$tmp/connect-plain"
else
	pass "without the engine A -> B fails: $(grep -m1 failed "$tmp/connect-plain")"
fi
kill "$last" 2>/dev/null || true
wait "$last" 2>/dev/null || true

# 2 and 3. Traversing, from behind the NAT and from a public host.
traverse nat a $RA_WAN
traverse public p $P

# 2b. A firewall that answers A's SYN: Linux ends a connect in SYN-SENT on
# the reset, and on the ICMP port unreachable too (ECONNREFUSED both), long
# before B's SYN comes; the guard of A's engine drops them.
rejected() { rb $ipt -L FORWARD -v -x -n | awk '/REJECT/ { s += $1 } END { print s + 0 }'; }
unreachable=icmp-port-unreachable
[[ $fam == 6 ]] && unreachable=icmp6-port-unreachable
for how in $unreachable tcp-reset; do
	rb $ipt -I FORWARD 3 -i wan -p tcp --syn -j REJECT --reject-with $how
	traverse "rejecting-$how" a $RA_WAN
	n=$(rejected)
	rb $ipt -D FORWARD -i wan -p tcp --syn -j REJECT --reject-with $how
	if [[ $n -gt 0 ]]; then
		pass "rejecting-$how: the firewall answered $n SYN(s) of A with $how"
	else
		fail "rejecting-$how: the firewall's REJECT rule answered no SYN"
	fi
done

# 4. What the target refuses; nothing may be injected (IP OutRequests of B).
syn=$(cat "$tmp/syn-nat")
if [[ -z $syn ]]; then
	fail "refusals: no captured SYN to build them from"
else
	mutate() { # mutate HEX WHAT: the SYN with one thing wrong
		python3 - "$1" "$2" "$B2" <<-'EOF'
			import ipaddress, sys
			p = bytearray.fromhex(sys.argv[1]); what = sys.argv[2]
			v6 = p[0] >> 4 == 6
			ihl = 40 if v6 else (p[0] & 15) * 4
			dst = slice(24, 40) if v6 else slice(16, 20)
			if what == "port": p[ihl + 2:ihl + 4] = (5999).to_bytes(2, "big")
			elif what == "ack": p[ihl + 13] |= 0x10
			elif what == "short": p = p[:ihl + 10]
			elif what == "dst": p[dst] = ipaddress.ip_address(sys.argv[3]).packed
			elif what == "nosyn": p[ihl + 13] = 0x10
			print(p.hex())
		EOF
	}
	rm -f "$tmp/chan"
	mkfifo "$tmp/chan"
	# IP OutRequests of B (IPv6: Ip6OutRequests).
	out_requests() {
		if [[ $fam == 6 ]]; then
			b awk '$1 == "Ip6OutRequests" { print $2 }' /proc/net/snmp6
		else
			b awk '/^Ip:/ { n++ } /^Ip:/ && n == 2 { print $11 }' /proc/net/snmp
		fi
	}
	out_before=$(out_requests)
	start target-refuse $X-b "$driver" target $B --queue $QB --chan "$tmp/chan" --pub $RA_WAN \
		--port $PORT --count 6 --timeout 10
	t=$last
	wait_for "the target's engine" 50 grep -q 'target ready' "$tmp/target-refuse" || true
	mkfifo "$tmp/chan2"
	# A second helper-like process: with the same queue number it cannot start
	# (nor touch the first one's chains); with another one it coexists.
	if b "$driver" target $B --queue $QB --chan "$tmp/chan2" --pub $RA_WAN --port $PORT \
		--timeout 1 >"$tmp/target-second" 2>&1; then
		fail "a second engine on queue $QB started" "$tmp/target-second"
	elif grep -q 'another process owns it' "$tmp/target-second" &&
		[[ $(b $ipt-save -t raw | grep -c "QCG-TRAVERSE-.*-$QB") -eq 7 ]]; then
		pass "a second engine on queue $QB is refused ($(grep -o 'cannot bind[^(]*' "$tmp/target-second")), the first one's chains intact"
	else
		fail "a second engine on queue $QB" "$tmp/target-second"
		b $ipt-save -t raw
	fi
	b "$driver" target $B --queue $((QB + 1)) --chan "$tmp/chan2" --pub $RA_WAN --port $PORT \
		--timeout 1 >"$tmp/target-third" 2>&1 || true
	if grep -q 'target ready' "$tmp/target-third" && ! b $ipt-save -t raw | grep -q "TRAVERSE-.*-$((QB + 1))" &&
		[[ $(b $ipt-save -t raw | grep -c "QCG-TRAVERSE-.*-$QB") -eq 7 ]]; then
		pass "an engine on queue $((QB + 1)) coexists and leaves queue $QB's chains alone"
	else
		fail "an engine on another queue" "$tmp/target-third"
	fi
	# A crashed engine leaves its chains; the next one on that queue sweeps them.
	qc=$((QB + 2))
	start target-crash $X-b "$driver" target $B --queue $qc --chan "$tmp/chan2" \
		--pub $RA_WAN --port $PORT --timeout 30
	wait_for "the engine to crash" 50 grep -q 'target ready' "$tmp/target-crash" || true
	kill -KILL "$last" 2>/dev/null || true
	wait "$last" 2>/dev/null || true
	left=$(b $ipt-save -t raw | grep -c "QCG-TRAVERSE-.*-$qc" || true)
	b "$driver" target $B --queue $qc --chan "$tmp/chan2" --pub $RA_WAN --port $PORT \
		--timeout 1 >"$tmp/target-aftercrash" 2>&1 || true
	if [[ $left -eq 7 ]] && grep -q 'target ready' "$tmp/target-aftercrash" &&
		! b $ipt-save -t raw | grep -q "TRAVERSE-.*-$qc"; then
		pass "leftovers of a killed engine (queue $qc: $left lines) swept by the next one, nothing left after it"
	else
		fail "leftover sweep (queue $qc: $left lines after the kill)" "$tmp/target-aftercrash"
	fi
	{
		mutate "$syn" port
		mutate "$syn" ack
		mutate "$syn" short
		mutate "$syn" dst
		mutate "$syn" nosyn
		echo "zz${syn:2}"
	} >"$tmp/chan"
	wait "$t" || true
	out_after=$(out_requests)
	n=$(grep -c '^line [0-9]*: refused' "$tmp/target-refuse" || true)
	if [[ $n -eq 6 && $out_before == "$out_after" ]] && grep -q 'rules left: 0' "$tmp/target-refuse"; then
		pass "refusals: other port, ACK set, truncated, other address, not a SYN, not hex: 6 refused, nothing injected (B's IpOutRequests $out_before -> $out_after)"
		sed -n 's/^line \([0-9]\): refused: /     \1: /p' "$tmp/target-refuse"
	else
		fail "refusals: $n of 6 refused, IpOutRequests $out_before -> $out_after" "$tmp/target-refuse"
	fi
	if grep -q 'refused a SYN' "$tmp/target-refuse"; then
		pass "refusals: each logged by the engine"
	else
		fail "refusals: no log line" "$tmp/target-refuse"
	fi
fi

# 5. As published: A's SYN injected, B's SYN/ACK left alone.
rm -f "$tmp/chan"
mkfifo "$tmp/chan"
drops_before=$(invalid_drops)
start target-published $X-b "$driver" target $B --queue $QB --chan "$tmp/chan" --pub $RA_WAN \
	--port $PORT --count 1 --timeout 10 --published
wait_for "the published target" 50 grep -q 'target ready' "$tmp/target-published" || true
start listen-published $X-b "$driver" listen $B $PORT --timeout 10
wait_for "the listener" 50 b ss -Htln "sport = :$PORT" || true
t0=$(date +%s%N)
if a "$driver" connect $B $PORT --watch $QA --chan "$tmp/chan" --timeout 6 \
	>"$tmp/connect-published" 2>&1; then
	fail "as published: A connected; the firewall should have dropped B's SYN/ACK" \
		"$tmp/connect-published"
else
	secs=$(( ($(date +%s%N) - t0) / 1000000 ))
	drops=$(($(invalid_drops) - drops_before))
	pass "as published: connect fails (gave up after $secs ms); rb dropped $drops of B's SYN/ACKs as INVALID"
	# The flow's state in each router (A's source port from the SYN it shipped).
	psyn=$(sed -n 's/^syn \([0-9a-f]*\) .*/\1/p' "$tmp/connect-published" | head -1)
	if [[ -n $psyn ]]; then
		pport=$((16#${psyn:$([[ $fam == 6 ]] && echo 80 || echo 40):4}))
		echo "     A's SYNs from port $pport: ra tracks $(ra conntrack -L -f "ipv$fam" -p tcp --sport "$pport" \
			2>/dev/null | grep -oE 'SYN_SENT|SYN_RECV|ESTABLISHED|UNREPLIED' | tr '\n' ' ')," \
			"rb $(rb conntrack -L -f "ipv$fam" -p tcp 2>/dev/null | grep -c "port=$pport") entries of it"
	fi
fi
for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done

# Connect times: traversing against a plain connect with the firewall open for NEW.
rm -f "$tmp/chan"
mkfifo "$tmp/chan"
start target-bench $X-b "$driver" target $B --queue $QB --chan "$tmp/chan" --pub $RA_WAN \
	--port $((PORT + 1)) --count "$RUNS" --timeout 60 --debug
bench_engine=$last
wait_for "the target's engine" 50 grep -q 'target ready' "$tmp/target-bench" || true
start listen-bench $X-b "$driver" listen $B $((PORT + 1)) --count "$RUNS" --timeout 60
wait_for "the listener" 50 b ss -Htln "sport = :$((PORT + 1))" || true
a "$driver" connect $B $((PORT + 1)) --watch $QA --chan "$tmp/chan" --count "$RUNS" \
	--timeout 10 --debug >"$tmp/connect-bench" 2>&1 || true
trav=$(sed -n 's/^connected [0-9]* from port [0-9]* in \([0-9.]*\) ms/\1/p' "$tmp/connect-bench")
n_trav=$(grep -c '^connected' "$tmp/connect-bench" || true)

# A server that sends nothing before its client speaks: A's connect() must
# not depend on B's first segment (B's listener answers A's SYN/ACK itself).
start listen-silent $X-b "$driver" listen $B $((PORT + 3)) --count 5 --timeout 30 --silent
wait_for "the listener" 50 b ss -Htln "sport = :$((PORT + 3))" || true
# The bench's engine holds queue $QB until it has removed its rules and
# exited: the next one on that queue waits for it (bounded).
engine_gone() { local st; st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || true; [[ -z $st || $st == Z ]]; }
wait_for "the bench's engine to exit" 100 engine_gone "$bench_engine" || true
wait "$bench_engine" 2>/dev/null || true
start target-silent $X-b "$driver" target $B --queue $QB --chan "$tmp/chan" --pub $RA_WAN \
	--port $((PORT + 3)) --count 5 --timeout 30
wait_for "the target's engine" 50 grep -q 'target ready' "$tmp/target-silent" || true
a "$driver" connect $B $((PORT + 3)) --watch $QA --chan "$tmp/chan" --count 5 --timeout 10 \
	>"$tmp/connect-silent" 2>&1 || true
silent=$(sed -n 's/^connected [0-9]* from port [0-9]* in \([0-9.]*\) ms/\1/p' "$tmp/connect-silent")
if [[ $(wc -l <<<"$silent") -eq 5 ]] && awk '$1 > 500 { bad = 1 } END { exit bad }' <<<"$silent"; then
	pass "silent server: 5 traversing connects, slowest $(sort -n <<<"$silent" | tail -1) ms"
else
	fail "silent server: connect times ${silent//$'\n'/ }" "$tmp/connect-silent" "$tmp/target-silent"
fi

rb $ipt -I FORWARD -p tcp -d $B --dport $((PORT + 2)) -m conntrack --ctstate NEW -j ACCEPT
start listen-plainbench $X-b "$driver" listen $B $((PORT + 2)) --count "$RUNS" --timeout 60
wait_for "the listener" 50 b ss -Htln "sport = :$((PORT + 2))" || true
a "$driver" connect $B $((PORT + 2)) --count "$RUNS" --timeout 10 >"$tmp/connect-plainbench" 2>&1 || true
plain=$(sed -n 's/^connected [0-9]* from port [0-9]* in \([0-9.]*\) ms/\1/p' "$tmp/connect-plainbench")
rb $ipt -D FORWARD -p tcp -d $B --dport $((PORT + 2)) -m conntrack --ctstate NEW -j ACCEPT
if [[ $n_trav -eq $RUNS ]]; then
	pass "connect time, median of $RUNS: traversing $(median <<<"$trav") ms, plain (firewall open) $(median <<<"$plain") ms"
else
	fail "benchmark: $n_trav of $RUNS traversing connects" "$tmp/connect-bench" "$tmp/target-bench"
fi
if ours $X-a $X-b; then fail "benchmark: rules left behind"; fi

# Under a sanitizer build, a report in any driver's output is a failure.
if grep -l 'Sanitizer' "$tmp"/connect-* "$tmp"/target-* "$tmp"/listen-* 2>/dev/null; then
	fail "sanitizer reports in the drivers' outputs (above)"
fi

echo "traverse-ns (IPv$fam): $passed passed, $failed failed"
[[ $failed -eq 0 ]]
