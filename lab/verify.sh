# shellcheck shell=bash
# qcg-lab verify (sourced by qcg-lab, after the plan and services.sh): checks that
# the grid is what it claims to be (reachability, filtering, NAT behaviour, the
# delay lines, the services, delay and rate), with listeners and probes of its own
# inside the namespaces, on the last VERIFY_PORTS ports of each node's range.

# The probes verify runs inside the namespaces.
PROBE_PY='
import socket, sys, time

def listener(port):
    """Both families where the namespace has IPv6, else IPv4."""
    try:
        s = socket.socket(socket.AF_INET6)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("::", port))
    except OSError:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))
    s.listen(128)
    return s

def serve(port):
    """Answers every connection with the address:port it came from (an IPv4
    peer of a dual-stack listener as plain IPv4)."""
    s = listener(int(port))
    while True:
        c, peer = s.accept()
        host = peer[0][7:] if peer[0].startswith("::ffff:") else peer[0]
        try:
            c.sendall(("%s:%d\n" % (host, peer[1])).encode())
        except OSError:
            pass
        c.close()

def probe(host, port, timeout, src=None):
    """Connects (from port src if given), prints what the server says."""
    v6 = ":" in host
    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if src:
        s.bind(("::" if v6 else "0.0.0.0", int(src)))
    s.settimeout(float(timeout))
    try:
        s.connect((host, int(port)))
        data = b""
        while True:
            d = s.recv(256)
            if not d:
                break
            data += d
    except OSError as e:
        print("no connection: %s" % (e.strerror or e.__class__.__name__))
        sys.exit(1)
    print(data.decode().strip())

def sink(port):
    """Takes one connection, reads to EOF, prints bytes and seconds from first byte."""
    s = listener(int(port))
    c, _ = s.accept()
    n, first = 0, None
    while True:
        d = c.recv(1 << 20)
        if not d:
            break
        if first is None:
            first = time.monotonic()
        n += len(d)
    print(n, time.monotonic() - (first or time.monotonic()))
    c.close()

def source(host, port, nbytes):
    s = socket.create_connection((host, int(port)), timeout=10)
    s.settimeout(None)
    buf, left = bytes(1 << 20), int(nbytes)
    while left > 0:
        left -= s.send(buf[:min(left, len(buf))])
    s.shutdown(socket.SHUT_WR)
    s.recv(1)

{"serve": serve, "probe": probe, "sink": sink, "source": source}[sys.argv[1]](*sys.argv[2:])
'

PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3

VT=""                 # verify's scratch dir
V_LISTENERS=()        # background listener pids
V_PROBES=()           # background probe pids
V_PASS=0 V_FAIL=0

verify_cleanup() {
	local pid
	for pid in "${V_LISTENERS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${V_LISTENERS[@]}" "${V_PROBES[@]}"; do wait "$pid" 2>/dev/null || true; done
	[ -n "$VT" ] && rm -rf "$VT"
}

report() {
	local result=$1 check=$2
	shift 2
	printf '%-4s  %-10s %s\n' "$result" "$check" "$*"
	if [ "$result" = PASS ]; then V_PASS=$((V_PASS + 1)); else V_FAIL=$((V_FAIL + 1)); fi
}

listening() { ip netns exec "$(node_ns "$1")" ss -ltnH "sport = :$2" 2>/dev/null | grep -q .; }

# listen NODE PORT: an address reporter on NODE:PORT, in the background.
listen() {
	ip netns exec "$(node_ns "$1")" "$PY" -c "$PROBE_PY" serve "$2" </dev/null >/dev/null 2>&1 9<&- &
	V_LISTENERS+=($!)
}

# probe_bg ID NODE HOST PORT TIMEOUT [SRCPORT]: a connection attempt in the background;
# its output and status land in $VT/ID.out and $VT/ID.rc.
probe_bg() {
	local id=$1 node=$2 host=$3 port=$4 tmo=$5 src=${6:-}
	(
		rc=0
		timeout $((${tmo%.*} + 5)) ip netns exec "$(node_ns "$node")" \
			"$PY" -c "$PROBE_PY" probe "$host" "$port" "$tmo" $src >"$VT/$id.out" 2>&1 || rc=$?
		echo "$rc" >"$VT/$id.rc"
	) </dev/null 9<&- &
	V_PROBES+=($!)
}

probes_wait() {
	local pid
	for pid in "${V_PROBES[@]}"; do wait "$pid" 2>/dev/null || true; done
	V_PROBES=()
}

probe_ok() { [ "$(cat "$VT/$1.rc" 2>/dev/null)" = 0 ]; }
probe_out() { head -n 1 "$VT/$1.out" 2>/dev/null; }

# The listener port of a node: the last port of its range.
vport() { port_last "$1"; }

# A node's IPv4 address, empty on an IPv6-only one (its NODE_IP is IPv6).
node_ip4() { [[ ${NODE_IP[$1]} == *:* ]] || echo "${NODE_IP[$1]}"; }
# Where a node reaches HOST: its IPv4 address, or its IPv6 one from an
# IPv6-only node.
reach_ip() { if [ -n "$(node_ip4 "$1")" ]; then echo "${NODE_IP[$2]}"; else echo "${NODE_IP6[$2]}"; fi; }

# Every node opens a TCP connection to broker and proxy; what they see is reported.
check_reach() {
	local n h detail ok
	for n in "${NODES[@]}"; do
		for h in "${HOSTS[@]}"; do
			[ "$n" = "$h" ] || probe_bg "reach-$n-$h" "$n" "$(reach_ip "$n" "$h")" "$(vport "$h")" "$T_OK"
		done
	done
	probes_wait
	for n in "${NODES[@]}"; do
		ok=1 detail=""
		for h in "${HOSTS[@]}"; do
			[ "$n" = "$h" ] && continue
			if probe_ok "reach-$n-$h"; then
				detail+="${detail:+; }$h sees $(probe_out "reach-$n-$h")"
			else
				ok=0 detail+="${detail:+; }$h: $(probe_out "reach-$n-$h")"
			fi
		done
		[ $ok = 1 ] && report PASS reach "$n -> $detail" || report FAIL reach "$n -> $detail"
	done
}

# Nothing on the internet (broker, open1) opens a connection to a fw or NATed node,
# at its own address or its NAT's; the same listener does answer from its own LAN.
check_inbound() {
	local n s src lan_peer targets t i
	for n in "${NODES[@]}"; do
		s=${NODE_SITE[$n]}
		case ${SITE_KIND[$s]:-} in firewalled | nat | symmetric-nat) ;; *) continue ;; esac
		[ "$n" = "$s-head" ] && lan_peer="${s}1" || lan_peer="$s-head"
		probe_bg "lan-$n" "$lan_peer" "${NODE_IP[$n]}" "$(vport "$n")" "$T_OK"
		targets=("${NODE_IP[$n]}")
		[ "$(node_public_ip "$n")" != "${NODE_IP[$n]}" ] && targets+=("$(node_public_ip "$n")")
		for src in broker open1; do
			i=0
			for t in "${targets[@]}"; do
				probe_bg "in-$n-$src-$i" "$src" "$t" "$(vport "$n")" "$T_BLOCK"
				i=$((i + 1))
			done
		done
	done
	probes_wait
	for n in "${NODES[@]}"; do
		s=${NODE_SITE[$n]}
		case ${SITE_KIND[$s]:-} in firewalled | nat | symmetric-nat) ;; *) continue ;; esac
		local opened=() tried=()
		targets=("${NODE_IP[$n]}")
		[ "$(node_public_ip "$n")" != "${NODE_IP[$n]}" ] && targets+=("$(node_public_ip "$n")")
		for src in broker open1; do
			i=0
			for t in "${targets[@]}"; do
				tried+=("$src->$t")
				probe_ok "in-$n-$src-$i" && opened+=("$src->$t:$(vport "$n")")
				i=$((i + 1))
			done
		done
		if ! probe_ok "lan-$n"; then
			report FAIL inbound "$n: its listener is not reachable even from its LAN: $(probe_out "lan-$n")"
		elif [ ${#opened[@]} -gt 0 ]; then
			report FAIL inbound "$n: the internet opened ${opened[*]}"
		else
			report PASS inbound "$n: ${#tried[@]} attempts from the internet blocked (${tried[*]}), LAN connects"
		fi
	done
}

# open nodes accept connections from everywhere.
check_open() {
	local n src sources=(broker proxy fw1 nata1 natb1 sym1) bad
	for n in open-head open1 open2; do
		for src in "${sources[@]}"; do
			probe_bg "open-$n-$src" "$src" "${NODE_IP[$n]}" "$(vport "$n")" "$T_OK"
		done
	done
	probes_wait
	for n in open-head open1 open2; do
		bad=()
		for src in "${sources[@]}"; do probe_ok "open-$n-$src" || bad+=("$src"); done
		if [ ${#bad[@]} -eq 0 ]; then
			report PASS open "$n accepts from ${sources[*]}"
		else
			report FAIL open "$n refuses ${bad[*]}"
		fi
	done
}

# From a fixed source port, one connection to broker and one to proxy: a
# port-preserving NAT shows that port to both; a symmetric one a new port each time.
check_mapping() {
	local n src sb sp ip pub
	for n in nata1 natb1 sym1; do
		# One of verify's own ports (never an outbound connection's), not its listener's.
		src=$(( $(port_last "$n") - 2 - RANDOM % (VERIFY_PORTS - 2) ))
		probe_bg "map-$n-broker" "$n" "${NODE_IP[broker]}" "$(vport broker)" "$T_OK" "$src"
		probes_wait
		probe_bg "map-$n-proxy" "$n" "${NODE_IP[proxy]}" "$(vport proxy)" "$T_OK" "$src"
		probes_wait
		sb=$(probe_out "map-$n-broker") sp=$(probe_out "map-$n-proxy")
		pub=$(node_public_ip "$n")
		if ! probe_ok "map-$n-broker" || ! probe_ok "map-$n-proxy"; then
			report FAIL mapping "$n from port $src: broker: $sb; proxy: $sp"
			continue
		fi
		ip=${sb%:*}
		local pb=${sb##*:} pp=${sp##*:}
		case ${SITE_KIND[${NODE_SITE[$n]}]} in
		nat)
			if [ "$ip" = "$pub" ] && [ "$pb" = "$src" ] && [ "$pp" = "$src" ]; then
				report PASS mapping "$n port $src kept: broker sees $sb, proxy sees $sp"
			else
				report FAIL mapping "$n port $src not kept: broker sees $sb, proxy sees $sp (want $pub:$src)"
			fi ;;
		symmetric-nat)
			if [ "$ip" = "$pub" ] && [ "$pb" != "$src" ] && [ "$pp" != "$src" ] && [ "$pb" != "$pp" ]; then
				report PASS mapping "$n port $src not kept, new port per peer: broker sees $sb, proxy sees $sp"
			else
				report FAIL mapping "$n port $src: broker sees $sb, proxy sees $sp (want $pub, a new port per peer)"
			fi ;;
		esac
	done
}

# Nodes of different NATed sites cannot reach each other, neither at the private
# address nor at the peer's NAT.
check_isolation() {
	local a b pairs=("nata1 natb1" "natb1 nata1" "nata1 sym1" "sym1 nata1" "natb1 sym1" "sym1 natb1") p opened
	for p in "${pairs[@]}"; do
		set -- $p
		probe_bg "iso-$1-$2-priv" "$1" "${NODE_IP[$2]}" "$(vport "$2")" "$T_BLOCK"
		probe_bg "iso-$1-$2-pub" "$1" "$(node_public_ip "$2")" "$(vport "$2")" "$T_BLOCK"
	done
	probes_wait
	for p in "${pairs[@]}"; do
		set -- $p
		a=$1 b=$2 opened=""
		probe_ok "iso-$a-$b-priv" && opened+=" ${NODE_IP[$b]}"
		probe_ok "iso-$a-$b-pub" && opened+=" $(node_public_ip "$b")"
		if [ -z "$opened" ]; then
			report PASS isolation "$a cannot reach $b (${NODE_IP[$b]}: $(probe_out "iso-$a-$b-priv"); $(node_public_ip "$b"): $(probe_out "iso-$a-$b-pub"))"
		else
			report FAIL isolation "$a reached $b at$opened"
		fi
	done
}

# Nodes of one site reach each other directly on their LAN.
check_lan() {
	local s
	for s in "${SITES[@]}"; do probe_bg "lan2-$s" "${s}1" "${NODE_IP[${s}2]}" "$(vport "${s}2")" "$T_OK"; done
	probes_wait
	for s in "${SITES[@]}"; do
		if probe_ok "lan2-$s"; then
			report PASS lan "${s}1 -> ${s}2 direct, ${s}2 sees $(probe_out "lan2-$s")"
		else
			report FAIL lan "${s}1 -> ${s}2: $(probe_out "lan2-$s")"
		fi
	done
}

# IPv6, where the lab has it (verify6.sh).
# shellcheck source=verify6.sh
. "$LAB_SRC/verify6.sh"

check_delaylines() {
	local s pid bad=()
	if [ "$DELAY" = 0 ]; then
		for s in "${SITES[@]}"; do
			delayline_pid "$s" >/dev/null && bad+=("$s")
		done
		[ ${#bad[@]} -eq 0 ] && report PASS delayline "none running (no delay set)" ||
			report FAIL delayline "running although no delay is set: ${bad[*]}"
		return
	fi
	local info=()
	for s in "${SITES[@]}"; do
		if pid=$(delayline_pid "$s") && queue_bound "$s" "${SITE_QUEUE[$s]}"; then
			info+=("$s:$pid")
		else
			bad+=("$s")
		fi
	done
	[ ${#bad[@]} -eq 0 ] && report PASS delayline "${#info[@]} running, queues bound (${info[*]})" ||
		report FAIL delayline "not running or queue not bound: ${bad[*]}"
}

# The services run and are connected upstream (or none run, after up --no-services).
check_services() {
	local name bad=() n=0
	if [ "$SERVICES" != yes ]; then
		for name in $(services_list); do
			{ svc_pid "$name" >/dev/null || [ -n "$(svc_strays "$name")" ]; } && bad+=("$name")
		done
		[ ${#bad[@]} -eq 0 ] && report PASS services "none running (up --no-services)" ||
			report FAIL services "running although up --no-services: ${bad[*]}"
		return
	fi
	for name in $(services_list); do
		n=$((n + 1))
		svc_pid "$name" >/dev/null && svc_ready "$name" || bad+=("$name")
	done
	[ ${#bad[@]} -eq 0 ] &&
		report PASS services "$n running; every frontend and helper connected upstream" ||
		report FAIL services "not running or not connected: ${bad[*]} (see $LOG_DIR)"
}

# The least RTT in ms of a few pings (user-to-user: the kernel's receive
# timestamp would be taken before the inbound delay line).  The least, not
# the median: the delay lines are processes, and on a loaded machine (CI's
# two cores) scheduling adds to most samples; what the lab sets shows in the
# least one.
ping_least() {
	ip netns exec "$(node_ns "$1")" ping -U -n -c 10 -i 0.05 -W 2 "$2" 2>/dev/null |
		sed -n 's/.*time=\([0-9.]*\).*/\1/p' | sort -n | head -n 1 | grep .
}

# check_rtt NAME FROM TO LINKS [ADDR]: LINKS = WAN links crossed one way; ADDR
# TO's address to ping (default its first).
check_rtt() {
	local name=$1 from=$2 to=$3 links=$4 addr=${5:-${NODE_IP[$3]}} m expect
	if ! m=$(ping_least "$from" "$addr"); then
		report FAIL "$name" "$from -> $to: no ping reply"
		return
	fi
	expect=$(awk -v d="$DELAY" -v l="$links" 'BEGIN { printf "%g", 2 * l * d }')
	if [ "$DELAY" = 0 ]; then
		if awk -v m="$m" 'BEGIN { exit !(m < 2) }'; then
			report PASS "$name" "$from -> $to RTT $m ms (no delay set)"
		else
			report FAIL "$name" "$from -> $to RTT $m ms although no delay is set"
		fi
	elif awk -v m="$m" -v e="$expect" 'BEGIN { t = e * 0.25; if (t < 2) t = 2; exit !(m >= e * 0.95 && m <= e + t) }'; then
		report PASS "$name" "$from -> $to RTT $m ms (expected $expect ms = $((2 * links)) x $DELAY ms)"
	else
		report FAIL "$name" "$from -> $to RTT $m ms, expected $expect ms = $((2 * links)) x $DELAY ms"
	fi
}

# A timed bulk transfer fw1 -> open1: up fw's WAN link, down open's.
check_rate() {
	if [ "$RATE" = 0 ]; then
		report PASS rate "no rate limit set (not measured)"
		return
	fi
	local port bytes out got secs mbit tmo spid
	port=$(( $(vport open1) - 1 ))
	# About two seconds' worth at the set rate.
	bytes=$(awk -v r="$RATE" 'BEGIN { b = r * 1e6 / 8 * 2; if (b < 1e6) b = 1e6; if (b > 5e8) b = 5e8; printf "%d", b }')
	tmo=$(awk -v r="$RATE" -v b="$bytes" 'BEGIN { printf "%d", b * 8 / (r * 1e6) * 3 + 10 }')
	timeout "$tmo" ip netns exec "$(node_ns open1)" "$PY" -c "$PROBE_PY" sink "$port" \
		</dev/null >"$VT/sink.out" 2>&1 9<&- &
	spid=$!
	if ! wait_until 5 "the rate sink on open1" listening open1 "$port"; then
		report FAIL rate "no sink listening on open1:$port"
		return
	fi
	timeout "$tmo" ip netns exec "$(node_ns fw1)" "$PY" -c "$PROBE_PY" source \
		"${NODE_IP[open1]}" "$port" "$bytes" </dev/null >"$VT/source.out" 2>&1 || true
	wait "$spid" || true
	out=$(cat "$VT/sink.out")
	read -r got secs <<<"$out" || true
	if [ -z "${secs:-}" ] || [ "${got:-0}" != "$bytes" ]; then
		report FAIL rate "transfer fw1 -> open1 failed: ${out:-no output} $(cat "$VT/source.out")"
		return
	fi
	mbit=$(awk -v b="$got" -v s="$secs" 'BEGIN { printf "%.1f", b * 8 / s / 1e6 }')
	# Goodput: tbf counts Ethernet/IP/TCP headers too (~4.5% at full size).
	if awk -v m="$mbit" -v r="$RATE" 'BEGIN { exit !(m >= 0.80 * r && m <= 1.05 * r) }'; then
		report PASS rate "fw1 -> open1 $mbit Mbit/s goodput ($got bytes in $(printf %.2f "$secs") s; limit $RATE Mbit/s)"
	else
		report FAIL rate "fw1 -> open1 $mbit Mbit/s goodput, limit $RATE Mbit/s"
	fi
}

cmd_verify() {
	local ns missing=() n t0
	[ $# -eq 0 ] || die "verify takes no arguments"
	need_root
	need_tools ip ss ping timeout awk "$PY"
	t0=$(date +%s.%N)
	for ns in $(lab_namespaces); do ns_exists "$ns" || missing+=("$ns"); done
	if [ ${#missing[@]} -gt 0 ] || [ ! -r "$STATE/config" ]; then
		report FAIL lab "the lab is not up (missing: ${missing[*]:-config}); run $PROG up"
		exit 1
	fi
	DELAY=$(sed -n 's/^DELAY=//p' "$STATE/config")
	RATE=$(sed -n 's/^RATE=//p' "$STATE/config")
	SERVICES=$(sed -n 's/^SERVICES=//p' "$STATE/config")
	# Long enough for a handshake across two delayed links (and a lost SYN's retry);
	# a blocked attempt waits as long as a good one takes, plus a margin.
	T_OK=$(awk -v d="$DELAY" 'BEGIN { printf "%d", 3 + 12 * d / 1000 }')
	T_BLOCK=$(awk -v d="$DELAY" 'BEGIN { printf "%d", 1 + 8 * d / 1000 }')
	echo "qcg-lab verify: $(describe_shaping "$DELAY" "$RATE")"

	VT=$(mktemp -d "${TMPDIR:-/tmp}/qcg-lab-verify.XXXXXX")
	trap verify_cleanup EXIT
	for n in "${NODES[@]}"; do listen "$n" "$(vport "$n")"; done
	for n in "${NODES[@]}"; do
		wait_until 10 "a listener on $n" listening "$n" "$(vport "$n")" ||
			report FAIL lab "no listener on $n:$(vport "$n")"
	done

	check_reach
	check_lan
	check_inbound
	check_open
	check_mapping
	check_isolation
	check_delaylines
	check_services
	check_rtt rtt-site fw1 open1 2
	check_rtt rtt-inet nata1 broker 1
	check_ipv6
	check_rate

	echo "qcg-lab verify: $V_PASS passed, $V_FAIL failed in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
	[ "$V_FAIL" -eq 0 ]
}
