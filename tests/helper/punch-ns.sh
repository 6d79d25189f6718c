#!/usr/bin/env bash
# helper-punch-ns: TCP hole punching through real netfilter routers, in
# network namespaces of its own (qcg-hp-<pid>-*), driven by punch-driver.
#
#   a1 198.18.100.2   -- ra NAT (MASQUERADE, keeps ports)  203.0.113.194 --+
#   b1 198.18.100.18  -- rb NAT (same)                      203.0.113.195 --+
#   f1 198.51.100.194 -- rf stateful firewall, no NAT       203.0.113.196 --+-- wan (bridge)
#   s1 198.18.100.34  -- rs symmetric NAT (--random-fully)  203.0.113.197 --+      |
#                                                   broker 203.0.113.193:7704 (reflector)
#
# Every router drops INVALID and inbound NEW, accepts ESTABLISHED,RELATED
# (the rules of lab/qcg-lab).  Checks: NAT<->NAT and FW->NAT connect and
# carry 4 MiB each way intact (sha256 on both ends); sym<->natb with sym
# declared port-preserving fails at once with FAIL naming the
# misconfiguration; without the flag it fails within the punch's timeout.
# Measures setup times: 100 punches NAT<->NAT (from 3 ports each, so every
# port is reused at once) vs a plain connect to the broker.
#
#   punch-ns.sh PUNCH-DRIVER         exit 0 ok, 1 failures, 77 skipped (not root)
set -u
driver=$1
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: needs root (network namespaces, iptables)"
  exit 77
fi
for t in ip iptables-restore sysctl; do
  command -v $t >/dev/null || { echo "SKIP: $t missing"; exit 77; }
done

P=qcg-hp-$$-
W=${P}wan
KEY=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
RUN=$$
TIMEOUT_MS=4000
BYTES=$((4 * 1024 * 1024))
work=$(mktemp -d /tmp/punch-ns.XXXXXX)
broker_pid=''

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

# wire NS IFACE ADDR/LEN: a veth from NS (named IFACE) to a port of the wan bridge.
wire_wan() {
  ip link add wan netns "$P$1" type veth peer name "$1" netns "$W" || exit 1
  in_ns wan ip link set "$1" master br0 up
  in_ns "$1" ip addr add "$2" dev wan
  in_ns "$1" ip link set wan up
}

# A site: router R (wan address), host H on a /28 behind it.
site() { # router host wan-addr lan-net-prefix router-lan host-lan rules
  local r=$1 h=$2
  new_ns "$r"
  new_ns "$h"
  wire_wan "$r" "$3/26"
  ip link add lan netns "$P$r" type veth peer name eth0 netns "$P$h" || exit 1
  in_ns "$r" ip addr add "$5/28" dev lan
  in_ns "$r" ip link set lan up
  in_ns "$r" sysctl -qw net.ipv4.ip_forward=1
  in_ns "$h" ip addr add "$6/28" dev eth0
  in_ns "$h" ip link set eth0 up
  in_ns "$h" ip route add default via "$5"
  "rules_$7" | in_ns "$r" iptables-restore || { echo "iptables-restore failed in $r"; exit 1; }
}

rules_stateful_filter() {
  cat <<-EOF
		*filter
		:INPUT ACCEPT [0:0]
		:FORWARD DROP [0:0]
		:OUTPUT ACCEPT [0:0]
		-A INPUT -i wan -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
		-A INPUT -i wan -j DROP
		-A FORWARD -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
		-A FORWARD -m conntrack --ctstate INVALID -j DROP
		-A FORWARD -i lan -o wan -j ACCEPT
		COMMIT
	EOF
}
rules_fw() { rules_stateful_filter; }
rules_nat() {
  printf '*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n'
  printf ':POSTROUTING ACCEPT [0:0]\n-A POSTROUTING -o wan -j MASQUERADE\nCOMMIT\n'
  rules_stateful_filter
}
rules_sym() {
  printf '*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n'
  printf ':POSTROUTING ACCEPT [0:0]\n-A POSTROUTING -o wan -j MASQUERADE --random-fully\nCOMMIT\n'
  rules_stateful_filter
}

# ---- topology ----
t0=$(date +%s%N)
new_ns wan
in_ns wan ip link add br0 type bridge
in_ns wan ip link set br0 up
new_ns brk
wire_wan brk 203.0.113.193/26
site ra a1 203.0.113.194 - 198.18.100.1 198.18.100.2 nat
site rb b1 203.0.113.195 - 198.18.100.17 198.18.100.18 nat
site rf f1 203.0.113.196 - 198.51.100.193 198.51.100.194 fw
site rs s1 203.0.113.197 - 198.18.100.33 198.18.100.34 sym
# The firewalled site's public subnet is reached through its router.
for ns in brk ra rb rs; do in_ns $ns ip route add 198.51.100.192/28 via 203.0.113.196; done
echo "topology up in $((($(date +%s%N) - t0) / 1000000)) ms (${#made_ns[@]} namespaces)"

# start_broker RUN COUNT PRESERVING0 PRESERVING1
start_broker() {
  [ -n "$broker_pid" ] && { kill "$broker_pid"; wait "$broker_pid" 2>/dev/null; }
  # Not through in_ns: a backgrounded function is a subshell, and $! must be
  # the driver itself for kill to reach it.
  ip netns exec "${P}brk" "$driver" broker 203.0.113.193:7704 "$KEY" "$1" "$2" "$3" "$4" \
    >"$work/broker.out" 2>"$work/broker.log" &
  broker_pid=$!
  for _ in $(seq 100); do
    grep -q ready "$work/broker.out" 2>/dev/null && return 0
    kill -0 $broker_pid 2>/dev/null || break
    sleep 0.05
  done
  echo "broker did not start:"
  cat "$work/broker.log"
  exit 1
}

# punch NAME NS0 ADDR0 LOW0 NS1 ADDR1 LOW1 RUN FIRST COUNT BYTES [PORTS]: both
# sides at once, each from a range of PORTS ports (50 unless given).
punch() {
  local name=$1 span=${12:-50}
  in_ns "$2" "$driver" punch 203.0.113.193 7704 "$KEY" "$8" "$9" "${10}" 0 "$3" "$4" \
    $(($4 + span - 1)) $TIMEOUT_MS "${11}" >"$work/$name.0" 2>"$work/$name.0.log" &
  local p0=$!
  in_ns "$5" "$driver" punch 203.0.113.193 7704 "$KEY" "$8" "$9" "${10}" 1 "$6" "$7" \
    $(($7 + span - 1)) $TIMEOUT_MS "${11}" >"$work/$name.1" 2>"$work/$name.1.log"
  local rc1=$?
  wait $p0
  local rc0=$?
  return $((rc0 | rc1))
}

# check_data NAME: both ends ok, each one's sent hash is the other's received.
check_data() {
  local a b
  a=$(grep '^ok 0 ' "$work/$1.0") b=$(grep '^ok 0 ' "$work/$1.1")
  if [ -z "$a" ] || [ -z "$b" ]; then
    fail "$1: $(cat "$work/$1.0" "$work/$1.1" | tr '\n' ' ')"
    return
  fi
  local as=${a#*sent=} ar=${a#*recv=} bs=${b#*sent=} br=${b#*recv=}
  as=${as%% *} bs=${bs%% *}
  if [ "$as" = "$br" ] && [ "$bs" = "$ar" ]; then
    pass "$1: $(echo "$a" | grep -o 'setup_ms=[0-9]*') / $(echo "$b" | grep -o 'setup_ms=[0-9]*'), 4 MiB each way intact, ${a#*peer=}" | cut -c1-160
  else
    fail "$1: data differs: $a / $b"
  fi
}

median() { sort -n | awk '{v[NR]=$1} END {if (NR==0) print "n/a"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# ---- NAT <-> NAT: both declared port-preserving (true) ----
start_broker $RUN 101 1 1
punch natnat a1 198.18.100.2 40000 b1 198.18.100.18 41000 $RUN 0 1 $BYTES
check_data natnat
# 100 in a row from 3 ports each: every port is used again within
# milliseconds, over what its earlier punches left.  Seen in CI with 50 ports:
# a punch that closed its reflector connection before the reflector's FIN
# left a TIME_WAIT on its port; a later connect from that port to the
# reflector was refused (EADDRNOTAVAIL), the sides fell out of step, and 4
# punches failed.  With the old code this check failed 1 run in 4.
punch natnat-t a1 198.18.100.2 40000 b1 198.18.100.18 41000 $RUN 1 100 1024 3
ok=$(cat "$work/natnat-t.0" "$work/natnat-t.1" | grep -c '^ok ')
[ "$ok" -eq 200 ] && pass "100 punches NAT<->NAT from 3 ports each" ||
  fail "100 punches NAT<->NAT from 3 ports each: $ok of 200 ends ok"
# The side that came last to the reflector waited least: its time is the protocol's.
punch_min=$(paste <(grep -o 'setup_us=[0-9]*' "$work/natnat-t.0" | cut -d= -f2) \
  <(grep -o 'setup_us=[0-9]*' "$work/natnat-t.1" | cut -d= -f2) |
  awk '{print ($1 < $2 ? $1 : $2)}' | median)
punch_all=$(cat "$work/natnat-t.0" "$work/natnat-t.1" | grep -o 'setup_us=[0-9]*' | cut -d= -f2 | median)
plain=$(in_ns a1 "$driver" connect 203.0.113.193 7704 20 | grep -o '[0-9]*$' | median)

# ---- firewall -> NAT: the public side is port-preserving by nature ----
RUN2=$((RUN + 1))
start_broker $RUN2 1 1 1
punch fwnat f1 198.51.100.194 42000 a1 198.18.100.2 40000 $RUN2 0 1 $BYTES
check_data fwnat

# ---- symmetric NAT declared port-preserving: FAIL at once, both sides ----
RUN3=$((RUN + 2))
start_broker $RUN3 1 1 1
punch symmis s1 198.18.100.34 43000 b1 198.18.100.18 41000 $RUN3 0 1 1024
for side in 0 1; do
  line=$(cat "$work/symmis.$side")
  ms=$(echo "$line" | grep -o 'setup_ms=[0-9]*' | cut -d= -f2)
  if echo "$line" | grep -q "^fail .*misconfiguration: cluster site0 node node0 is declared port-preserving" &&
    [ "${ms:-99999}" -lt 1000 ]; then
    pass "sym declared preserving, side $side: FAIL in $ms ms"
  else
    fail "sym declared preserving, side $side: $line"
  fi
done
grep -q "misconfiguration" "$work/broker.log" && pass "broker logged the misconfiguration" ||
  fail "no misconfiguration in the broker's log"

# ---- symmetric NAT declared as such: the punch times out ----
RUN4=$((RUN + 3))
start_broker $RUN4 1 0 1
punch symto s1 198.18.100.34 43000 b1 198.18.100.18 41000 $RUN4 0 1 1024
for side in 0 1; do
  line=$(cat "$work/symto.$side")
  ms=$(echo "$line" | grep -o 'setup_ms=[0-9]*' | cut -d= -f2)
  if echo "$line" | grep -q "^fail " && [ "${ms:-0}" -ge $((TIMEOUT_MS - 100)) ] &&
    [ "${ms:-0}" -lt $((TIMEOUT_MS + 1000)) ]; then
    pass "sym undeclared, side $side: fails at the timeout ($ms ms): ${line#*why=}"
  else
    fail "sym undeclared, side $side: $line"
  fi
done
kill "$broker_pid" && wait "$broker_pid" 2>/dev/null
broker_pid=''

echo "setup times (no added delay): punch NAT<->NAT median ${punch_min} us (last side in;" \
  "both sides ${punch_all} us) over 100; plain TCP connect a1 -> broker median ${plain} us"
[ $failed -eq 0 ] && echo "helper-punch-ns: all checks passed" && exit 0
echo "helper-punch-ns: $failed check(s) failed"
for f in "$work"/*.log; do echo "== $f"; tail -5 "$f"; done
# The drivers' own lines of every punch that did not end "ok".
grep -H -v '^ok ' "$work"/natnat* "$work"/fwnat* 2>/dev/null | grep -v '\.log:' | cut -c1-300
exit 1
