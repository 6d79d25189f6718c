#!/usr/bin/env bash
# helper-punch-reject-ns: hole punching into sites whose firewalls answer an
# unsolicited SYN (a TCP reset, ICMP port unreachable) instead of dropping it,
# in network namespaces of its own (qcg-hj-<pid>-*), driven by punch-driver.
#
#   ha 198.18.10.2 -- ra NAT, drops inbound NEW          203.0.113.34 --+
#   hr 198.18.11.2 -- rr NAT, REJECT --reject-with tcp-reset  .50     --+-- inet router
#   hu 198.18.12.2 -- ru NAT, REJECT icmp-port-unreachable    .66     --+   (one hop: the
#                                                 brk 203.0.113.10:7704 --+   punch's TTL)
#
# Each site's router sits one hop from the inet router, which routes between
# them and to the reflector: a node is 2 routers from the reflector, so its
# punch's first SYN leaves with TTL 2 and expires in inet, short of the
# peer's firewall.  Checks: 5 punches each way between the dropping and the
# resetting site, and from the dropping and the resetting site to the ICMP
# one; every one connects and carries 64 KiB each way intact (sha256).  With
# the plain punch (every SYN with the normal TTL) most of the punches with
# the ICMP site fail (1 of 10 and 0 of 10 in a run here).  Last, the opener's
# node itself drops bare inbound SYNs: the punch takes the kernel's 1 s
# retransmission, but connects.
#
# With 6, the same over IPv6: no NAT, each site's node 2001:db8:1N::2 behind
# a stateful ip6tables firewall (the lab's IPv6 rules, the same REJECTs),
# the inet router 2001:db8:f0::1 routing each site's prefix, the reflector
# at 2001:db8:f0::10.  The hop count is measured over IPv6 too, and each
# punch must say it used it ("first SYN with TTL 2").
#
# Last, the inet router sends its ICMP errors with TTL 255: over IPv4 the
# punches stay TTL-limited (the floor still keeps the errors out), over IPv6
# they must find it with their hop count and go staggered, saying why.
#
#   punch-reject-ns.sh PUNCH-DRIVER [4|6]  exit 0 ok, 1 failures, 77 skipped (not root)
set -u
driver=$1 fam=${2:-4}
ipt=iptables
[ "$fam" = 6 ] && ipt=ip6tables NS_IPV6=yes
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: needs root (network namespaces, $ipt)"
  exit 77
fi
for t in ip $ipt $ipt-restore sysctl; do
  command -v $t >/dev/null || { echo "SKIP: $t missing"; exit 77; }
done

P=qcg-hj-$$-
KEY=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
RUN=$$
N=${PUNCH_REJECT_N:-5} # punches per pair
work=$(mktemp -d /tmp/punch-reject-ns.XXXXXX)
broker_pid='' fails=0

cleanup() {
  [ -n "$broker_pid" ] && kill "$broker_pid" 2>/dev/null
  wait 2>/dev/null
  ns_remove
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# shellcheck source=tests/helper/netns.sh
. "$(dirname "$0")/netns.sh"

# rules REJECT-WITH: a NAT keeping ports (IPv4), a stateful filter that
# drops (no argument) or rejects inbound NEW SYNs.
rules() {
  local r=""
  [ -n "$1" ] && r="-p tcp --syn -m conntrack --ctstate NEW -j REJECT --reject-with $1"
  [ "$fam" = 6 ] || cat <<-EOF
	*nat
	:PREROUTING ACCEPT [0:0]
	:INPUT ACCEPT [0:0]
	:OUTPUT ACCEPT [0:0]
	:POSTROUTING ACCEPT [0:0]
	-A POSTROUTING -o wan -j MASQUERADE
	COMMIT
	EOF
  cat <<-EOF
	*filter
	:INPUT ACCEPT [0:0]
	:FORWARD DROP [0:0]
	:OUTPUT ACCEPT [0:0]
	$([ "$fam" = 6 ] && echo "-A INPUT -p ipv6-icmp -j ACCEPT")
	-A INPUT -i wan -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
	${r:+-A INPUT -i wan $r}
	-A INPUT -i wan -j DROP
	-A FORWARD -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
	-A FORWARD -m conntrack --ctstate INVALID -j DROP
	-A FORWARD -i lan -o wan -j ACCEPT
	${r:+-A FORWARD -i wan $r}
	COMMIT
	EOF
}

# ---- topology ----
# The addresses of each family: the inet router's and the reflector's on
# the bridge, a site's link to inet (inet's end, the router's), its LAN
# (the router's, the node's).
if [ "$fam" = 6 ]; then
  len=64 wlen=64 llen=64 unr=icmp6-port-unreachable fwd=net.ipv6.conf.all.forwarding
  inet_a=2001:db8:f0::1 refl=2001:db8:f0::10 refl_hp="[2001:db8:f0::10]:7704"
  wan_a() { echo "2001:db8:f$(($1 + 1))::$2"; }
  lan_a() { echo "2001:db8:1$1::$2"; }
else
  len=27 wlen=28 llen=24 unr=icmp-port-unreachable fwd=net.ipv4.ip_forward
  inet_a=203.0.113.1 refl=203.0.113.10 refl_hp=203.0.113.10:7704
  wan_a() { echo "203.0.113.$((32 + 16 * $1 + $2))"; }
  lan_a() { echo "198.18.$((10 + $1)).$2"; }
fi
# addr NS ADDR/LEN DEV: an address (no duplicate detection to wait for).
addr() {
  if [ "$fam" = 6 ]; then in_ns "$1" ip addr add "$2" dev "$3" nodad; else in_ns "$1" ip addr add "$2" dev "$3"; fi
}
new_ns inet
in_ns inet sysctl -qw $fwd=1
in_ns inet ip link add br0 type bridge
in_ns inet ip link set br0 up
addr inet $inet_a/$len br0
new_ns brk
ip link add eth0 netns "${P}brk" type veth peer name hb netns "${P}inet" || exit 1
in_ns inet ip link set hb master br0 up
addr brk $refl/$len eth0
in_ns brk ip link set eth0 up
in_ns brk ip route add default via $inet_a
i=0
for s in a r u; do
  new_ns "r$s"
  new_ns "h$s"
  in_ns "r$s" sysctl -qw $fwd=1
  ip link add wan netns "${P}r$s" type veth peer name "w$s" netns "${P}inet" || exit 1
  addr inet "$(wan_a $i 1)/$wlen" "w$s"
  in_ns inet ip link set "w$s" up
  addr "r$s" "$(wan_a $i 2)/$wlen" wan
  in_ns "r$s" ip link set wan up
  in_ns "r$s" ip route add default via "$(wan_a $i 1)"
  ip link add lan netns "${P}r$s" type veth peer name eth0 netns "${P}h$s" || exit 1
  addr "r$s" "$(lan_a $i 1)/$llen" lan
  in_ns "r$s" ip link set lan up
  addr "h$s" "$(lan_a $i 2)/$llen" eth0
  in_ns "h$s" ip link set eth0 up
  in_ns "h$s" ip route add default via "$(lan_a $i 1)"
  # No NAT over IPv6: inet routes each site's prefix to its router.
  [ "$fam" = 6 ] && in_ns inet ip route add "$(lan_a $i 0)/$llen" via "$(wan_a $i 2)"
  case $s in
  a) rules "" ;;
  r) rules tcp-reset ;;
  u) rules $unr ;;
  esac | in_ns "r$s" $ipt-restore || { echo "$ipt-restore failed in r$s"; exit 1; }
  i=$((i + 1))
done

ip netns exec "${P}brk" "$driver" broker "$refl_hp" "$KEY" $RUN 100 1 1 \
  >"$work/broker.out" 2>"$work/broker.log" &
broker_pid=$!
for _ in $(seq 100); do
  grep -q ready "$work/broker.out" 2>/dev/null && break
  sleep 0.05
done
grep -q ready "$work/broker.out" || { echo "broker did not start:"; cat "$work/broker.log"; exit 1; }

first=0
# pair NAME NS0 ADDR0 LOW0 NS1 ADDR1 LOW1: N punches, both sides at once.
pair() {
  in_ns "$2" env VERBOSE=1 "$driver" punch $refl 7704 "$KEY" $RUN $first $N 0 "$3" "$4" $(($4 + 49)) \
    4000 65536 >"$work/$1.0" 2>"$work/$1.0.log" &
  local p0=$!
  in_ns "$5" env VERBOSE=1 "$driver" punch $refl 7704 "$KEY" $RUN $first $N 1 "$6" "$7" $(($7 + 49)) \
    4000 65536 >"$work/$1.1" 2>"$work/$1.1.log"
  wait $p0
  first=$((first + N))
  local ok
  ok=$(cat "$work/$1.0" "$work/$1.1" | grep -c '^ok ')
  local ms
  ms=$(cat "$work/$1.0" "$work/$1.1" | grep -o 'setup_ms=[0-9]*' | cut -d= -f2 | sort -n |
    awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
  if [ "$ok" -eq $((2 * N)) ]; then
    echo "ok: $1: $N punches, every end connected, 64 KiB each way intact; median setup ${ms} ms"
  else
    echo "FAIL: $1: $ok of $((2 * N)) ends ok"
    grep -hv '^ok ' "$work/$1.0" "$work/$1.1" | head -4 | cut -c1-200
    fails=$((fails + 1))
  fi
}
ha=$(lan_a 0 2) hr=$(lan_a 1 2) hu=$(lan_a 2 2)
pair drop-reset ha "$ha" 40000 hr "$hr" 41000
pair reset-drop hr "$hr" 41100 ha "$ha" 40100
pair drop-icmp ha "$ha" 40200 hu "$hu" 42000
pair reset-icmp hr "$hr" 41200 hu "$hu" 42100
# The opener's own node drops bare inbound SYNs (as lab-fallback's open1 does):
# the connector's SYN never gets in; the opener's retransmitted SYN (normal
# TTL, 1 s later) must still meet the connector's socket, kept waiting.
in_ns ha $ipt -I INPUT -p tcp --syn --dport 40300:40349 -j DROP
pair node-drops-syns ha "$ha" 40300 hr "$hr" 41300
# Every punch measured its hop count and sent its first SYN with it.
plain=$(cat "$work"/*.log | grep -c "punch from port .* connected" || true)
ttl2=$(cat "$work"/*.log | grep "punch from port .* connected" | grep -c "first SYN with TTL 2 (2 hops" || true)
if [ "$plain" -gt 0 ] && [ "$ttl2" -eq "$plain" ]; then
  echo "ok: all $ttl2 punches with their first SYN at TTL 2 (2 hops to the reflector, measured)"
else
  echo "FAIL: $ttl2 of $plain connected punches used TTL 2 (2 hops)"
  cat "$work"/*.log | grep "punch from port .* connected" | grep -v "TTL 2 (2 hops" | head -3 | cut -c1-250
  fails=$((fails + 1))
fi
# The inet router now sends its ICMP errors with TTL (hop limit) 255, as
# some routers do.  Over IPv4 the opener's floor (PUNCH_MIN_TTL) still keeps
# the first SYN's time-exceeded out (Linux checks the quoted header's TTL):
# the punches stay TTL-limited and the nodes' TCPMinTTLDrop counters show
# the errors dropped.  Over IPv6 the floor checks the error's own hop limit
# and would let it through (on a path with delay it ends the punch): a new
# hop count finds that out, and the punches go staggered, saying why.
# mindrops: the opener nodes' count of errors their floor dropped.
mindrops() {
  local n=0 ns
  for ns in ha hr hu; do
    n=$((n + $(in_ns $ns awk '/^TcpExt:/ { if (!k) { for (i = 1; i <= NF; i++) if ($i == "TCPMinTTLDrop") k = i } else print $k }' /proc/net/netstat)))
  done
  echo $n
}
if [ "$fam" = 6 ]; then
  in_ns inet sh -c 'for f in /proc/sys/net/ipv6/conf/*/hop_limit; do echo 255 >"$f"; done' || exit 1
  n0=hu a0=$hu p0=42200
  want="staggered (2 hops to the reflector, but router 2's ICMP errors arrive with TTL 128 or more"
else
  in_ns inet sysctl -qw net.ipv4.ip_default_ttl=255 || exit 1
  n0=hr a0=$hr p0=41400
  want="first SYN with TTL 2 (2 hops to the reflector)"
fi
rm -f "$work"/*.log
d0=$(mindrops)
pair icmp-ttl-255 ha "$ha" 40400 $n0 "$a0" $p0
dropped=$(($(mindrops) - d0))
high=$(cat "$work"/*.log | grep "punch from port .* connected" | grep -cF "$want" || true)
all=$(cat "$work"/*.log | grep -c "punch from port .* connected" || true)
if [ "$all" -gt 0 ] && [ "$high" -eq "$all" ] && { [ "$fam" = 6 ] || [ "$dropped" -gt 0 ]; }; then
  echo "ok: router 2's ICMP errors at TTL 255: all $all punches said: $want ($dropped time-exceeded kept out by the floor)"
else
  echo "FAIL: $high of $all connected punches said: $want; $dropped time-exceeded kept out by the floor"
  cat "$work"/*.log | grep "punch from port .* connected" | head -3 | cut -c1-250
  fails=$((fails + 1))
fi
[ $fails -eq 0 ] && echo "helper-punch-reject-ns: all checks passed" && exit 0
echo "helper-punch-reject-ns: $fails check(s) failed"
exit 1
