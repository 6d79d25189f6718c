#!/usr/bin/env bash
# helper-punch6-ns: TCP hole punching over IPv6 between two stateful ip6tables
# firewalls, in network namespaces of its own (qcg-h6-<pid>-*), driven by
# punch-driver.
#
#   a1 2001:db8:a::2 -- ra stateful firewall  2001:db8:ff::2 --+
#   b1 2001:db8:b::2 -- rb stateful firewall  2001:db8:ff::3 --+-- wan (bridge)
#                                  broker 2001:db8:ff::1 port 7704 (reflector)
#
# Both firewalls let nothing in (the rules of lab/qcg-lab's IPv6 sites: ESTABLISHED,
# RELATED in, INVALID and inbound NEW dropped).  Checks: one punch a1 <-> b1
# carries 4 MiB each way intact (sha256 on both ends), between the nodes' own
# addresses (no NAT); 20 punches in a row all connect, each within 1 s (the
# kernels' SYN retransmission would take longer: the staggered SYNs cross once);
# the firewalls dropped inbound SYNs meanwhile (the first side's, as meant).
#
#   punch6-ns.sh PUNCH-DRIVER        exit 0 ok, 1 failures, 77 skipped (not root)
set -u
driver=$1
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: needs root (network namespaces, ip6tables)"
  exit 77
fi
for t in ip ip6tables-restore ip6tables sysctl; do
  command -v $t >/dev/null || { echo "SKIP: $t missing"; exit 77; }
done

P=qcg-h6-$$-
W=${P}wan
KEY=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
RUN=$$
TIMEOUT_MS=4000
N=20
work=$(mktemp -d /tmp/punch6-ns.XXXXXX)
broker_pid='' NS_IPV6=yes

cleanup() {
  stop_children "$broker_pid"
  ns_remove
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# shellcheck source=tests/lib/common.sh
. "$(dirname "$0")/../lib/common.sh"
# shellcheck source=tests/helper/netns.sh
. "$(dirname "$0")/netns.sh"

# wire_wan NS ADDR/LEN: a veth from NS (named wan) to a port of the wan bridge.
wire_wan() {
  ip link add wan netns "$P$1" type veth peer name "$1" netns "$W" || exit 1
  in_ns wan ip link set "$1" master br0 up
  in_ns "$1" ip addr add "$2" dev wan nodad
  in_ns "$1" ip link set wan up
}

rules6() {
  cat <<-EOF
		*filter
		:INPUT ACCEPT [0:0]
		:FORWARD DROP [0:0]
		:OUTPUT ACCEPT [0:0]
		-A INPUT -p ipv6-icmp -j ACCEPT
		-A INPUT -i wan -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
		-A INPUT -i wan -j DROP
		-A FORWARD -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
		-A FORWARD -m conntrack --ctstate INVALID -j DROP
		-A FORWARD -i lan -o wan -j ACCEPT
		COMMIT
	EOF
}

# site ROUTER HOST WAN-ADDR PREFIX: HOST at PREFIX::2 behind ROUTER (PREFIX::1).
site() {
  local r=$1 h=$2
  new_ns "$r"
  new_ns "$h"
  wire_wan "$r" "$3/64"
  ip link add lan netns "$P$r" type veth peer name eth0 netns "$P$h" || exit 1
  in_ns "$r" ip addr add "$4::1/64" dev lan nodad
  in_ns "$r" ip link set lan up
  in_ns "$r" sysctl -qw net.ipv6.conf.all.forwarding=1
  in_ns "$h" ip addr add "$4::2/64" dev eth0 nodad
  in_ns "$h" ip link set eth0 up
  in_ns "$h" ip -6 route add default via "$4::1"
  rules6 | in_ns "$r" ip6tables-restore || { echo "ip6tables-restore failed in $r"; exit 1; }
}

new_ns wan
in_ns wan ip link add br0 type bridge
in_ns wan ip link set br0 up
new_ns brk
wire_wan brk 2001:db8:ff::1/64
site ra a1 2001:db8:ff::2 2001:db8:a
site rb b1 2001:db8:ff::3 2001:db8:b
for ns in brk rb; do in_ns $ns ip -6 route add 2001:db8:a::/64 via 2001:db8:ff::2; done
for ns in brk ra; do in_ns $ns ip -6 route add 2001:db8:b::/64 via 2001:db8:ff::3; done

ip netns exec "${P}brk" "$driver" broker "[2001:db8:ff::1]:7704" "$KEY" "$RUN" $((N + 1)) 1 1 \
  >"$work/broker.out" 2>"$work/broker.log" &
broker_pid=$!
for _ in $(seq 100); do
  grep -q ready "$work/broker.out" 2>/dev/null && break
  sleep 0.05
done
grep -q ready "$work/broker.out" || { cat "$work/broker.log"; fail "the reflector did not start"; exit 1; }

# punch NAME FIRST COUNT BYTES: a1 (side 0) and b1 (side 1) at once.
punch() {
  in_ns a1 "$driver" punch 2001:db8:ff::1 7704 "$KEY" "$RUN" "$2" "$3" 0 2001:db8:a::2 40000 \
    40049 $TIMEOUT_MS "$4" >"$work/$1.0" 2>"$work/$1.0.log" &
  local p0=$!
  in_ns b1 "$driver" punch 2001:db8:ff::1 7704 "$KEY" "$RUN" "$2" "$3" 1 2001:db8:b::2 41000 \
    41049 $TIMEOUT_MS "$4" >"$work/$1.1" 2>"$work/$1.1.log"
  wait $p0
}

punch one 0 1 $((4 * 1024 * 1024))
a=$(grep '^ok 0 ' "$work/one.0") b=$(grep '^ok 0 ' "$work/one.1")
if [ -z "$a" ] || [ -z "$b" ]; then
  fail "a1 <-> b1: $(cat "$work/one.0" "$work/one.1" | tr '\n' ' ')"
else
  as=${a#*sent=} ar=${a#*recv=} bs=${b#*sent=} br=${b#*recv=}
  as=${as%% *} bs=${bs%% *}
  [ "$as" = "$br" ] && [ "$bs" = "$ar" ] &&
    pass "a1 <-> b1: 4 MiB each way intact, $(echo "$a" | grep -o 'setup_ms=[0-9]*') / $(echo "$b" | grep -o 'setup_ms=[0-9]*')" ||
    fail "a1 <-> b1: the data differ: $a / $b"
  case "$a $b" in
  *"peer=[2001:db8:b::2]:"*"peer=[2001:db8:a::2]:"*) pass "between the nodes' own IPv6 addresses" ;;
  *) fail "not between the nodes' own addresses: $a / $b" ;;
  esac
fi

punch many 1 $N 1024
ok=$(cat "$work/many.0" "$work/many.1" | grep -c '^ok ')
[ "$ok" -eq $((2 * N)) ] && pass "$N punches in a row, both ends of each connected" ||
  fail "$N punches in a row: $ok of $((2 * N)) ends ok"
slow=$(cat "$work/many.0" "$work/many.1" | grep -o 'setup_ms=[0-9]*' | cut -d= -f2 | awk '$1 >= 1000' | wc -l)
[ "$slow" -eq 0 ] && pass "each within 1 s (no SYN retransmission needed)" ||
  fail "$slow ends took 1 s or more"
median=$(cat "$work/many.0" "$work/many.1" | grep -o 'setup_ms=[0-9]*' | cut -d= -f2 | sort -n |
  awk '{v[NR]=$1} END {print NR ? v[int((NR+1)/2)] : "n/a"}')
drops=$(for r in ra rb; do in_ns $r ip6tables -L FORWARD -v -n -x | sed -n 's/.*policy DROP \([0-9]*\) packets.*/\1/p'; done |
  awk '{s += $1} END {print s + 0}')
[ "$drops" -gt 0 ] && pass "the firewalls dropped $drops inbound packets meanwhile" ||
  fail "the firewalls dropped nothing: no firewall in the way"
echo "setup ms median $median over $N punches (both ends)"

[ "$failed" -eq 0 ] && echo "helper-punch6-ns: all checks passed" && exit 0
echo "helper-punch6-ns: $failed check(s) failed"
for f in "$work"/*.log; do echo "== $f"; tail -5 "$f"; done
grep -H -v '^ok ' "$work"/one.? "$work"/many.? 2>/dev/null | cut -c1-300
exit 1
