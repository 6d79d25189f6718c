#!/usr/bin/env bash
# broker-proxy-alive: the broker plans pairs only through proxies that beat
# (issue 19).  A real qcg-broker with two proxies configured, p1 and p2; a
# real qcg-proxy p1 beating every second (--broker); p2 never runs.
#
#   test-proxy-alive.sh QCG-BROKER SOAP-CALL QCG-CERTS QCG-PROXY
#
#   qcg-proxy p1 (127.0.0.1:17761, control 17762) --proxyAlive--> qcg-broker 127.0.0.1:17760
#   p2 configured at 127.0.0.1:17763, never started; ports 17760-17769 are ours.
#   p1 is configured with an IPv6 address too ([::1]:17761): siteInfo's proxy
#   list and --grid name both.
#
# Before: half of the pairs went to the dead p2, and a killed p1 was planned
# until the broker restarted.
set -u
broker_bin=$1 call_bin=$2 certs_bin=$3 proxy_bin=$4
port=17760
url=https://127.0.0.1:$port/
work=$(mktemp -d /tmp/broker-proxy-alive.XXXXXX)
broker_pid="" proxy_pid="" stranger_pid=""

cleanup() {
  stop_children "$broker_pid" "$proxy_pid" "$stranger_pid"
  rm -rf "$work"
}
trap cleanup EXIT

# shellcheck source=tests/broker/lib.sh
. "$(dirname "$0")/lib.sh"

make_ca "$work/ca" nata open
for p in p1 p3; do "$certs_bin" --dir "$ca" issue proxy "$p" --san 127.0.0.1 >/dev/null; done
fe=$ca/frontend-nata.pem fo=$ca/frontend-open.pem
(umask 077 && openssl rand -hex 32 >"$work/proxy.key")

log=$work/broker.log
start_broker "$log" broker_pid $port --proxy p1@127.0.0.1:17761,p1@[::1]:17761,p2@127.0.0.1:17763 \
  --proxy-key "$work/proxy.key" --proxy-dead-after 3
expect_ok "register nata" "$fe" registerCluster name=nata kind=nat nodeRange=198.18.3.0/24
expect_ok "register open" "$fo" registerCluster name=open kind=open nodeRange=203.0.113.20/31
expect_ok "node nata1" "$fe" registerNode name=nata1 address=198.18.3.11 portLow=20000 portHigh=20999 canIntercept=0
expect_ok "node open1" "$fo" registerNode name=open1 address=203.0.113.21 portLow=20000 portHigh=20999 canIntercept=0
expect_ok "publish nata" "$fe" publish job=j secret=s rank=0 node=nata1 address=198.18.3.11 port=20001
expect_ok "publish open" "$fo" publish job=j secret=s rank=1 node=open1 address=203.0.113.21 port=20001

# The proxy list a frontend relays to qcg-probe: every address of each proxy,
# one after the other, in the endpoints an older frontend already relays.
expect_ok "siteInfo for frontend nata" "$fe" siteInfo
out_has proxy.count=3 proxy.0.address=127.0.0.1 proxy.0.port=17761 proxy.1.address=::1 \
  proxy.1.port=17761 proxy.2.address=127.0.0.1 proxy.2.port=17763 &&
  pass "siteInfo: p1's two addresses, then p2's" || fail "siteInfo: $out"

# proxy_ports N: the proxy ports of N proxy plans open -> nata, one per line.
proxy_ports() {
  for _ in $(seq "$1"); do
    call "$fo" lookup job=j secret=s fromRank=1 toRank=0 tried=reversed
    if out_has plan.technique=proxy; then field plan.port; fi
  done
}

# Nobody beats yet: both are planned, as before proxies beat.
[ "$(proxy_ports 20 | sort -u | wc -l)" -eq 2 ] &&
  pass "no beat yet: pairs go to both configured proxies" || fail "no beat yet: $(proxy_ports 4)"

# start_proxy NAME PORT LOG: a qcg-proxy beating every second; its pid in $started.
start_proxy() {
  "$proxy_bin" --listen 127.0.0.1 --port "$2" --control-port $(($2 + 1)) --ca "$ca/ca.crt" \
    --cert "$ca/proxy-$1.pem" --key-file "$work/proxy.key" --broker "$url" --alive-interval 1 \
    2>"$3" &
  started=$!
}
start_proxy p1 17761 "$work/p1.log"
proxy_pid=$started
wait_log "$log" "proxy p1 is alive \(was unknown\)" "$broker_pid" &&
  pass "the broker hears p1" || fail "no beat from p1: $(tail -n 3 "$work/p1.log")"
wait_log "$work/p1.log" "hears our beats" "$proxy_pid" &&
  pass "p1 logs that its beats are heard" || fail "p1: $(tail -n 3 "$work/p1.log")"
ports=$(proxy_ports 20 | sort | uniq -c)
[[ $ports =~ ^\ *20\ 17761$ ]] && pass "p1 beats, p2 never did: every pair goes to p1" ||
  fail "pairs while p1 beats: $ports"

"$broker_bin" --grid --url "$url" --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" >"$work/grid.txt" 2>&1
# p2, never heard from: unknown, or dead once proxy-dead-after has passed
# since the broker started (a slow machine), never "0 s ago".
grep -Eq '^p1 +127\.0\.0\.1:17761, \[::1\]:17761 +alive +[0-9]+ s ago' "$work/grid.txt" &&
  grep -Eq '^p2 +127\.0\.0\.1:17763 +(unknown|dead) +never' "$work/grid.txt" &&
  pass "--grid: p1 alive, p2 never heard" || fail "--grid: $(cat "$work/grid.txt")"
"$broker_bin" --grid --json --url "$url" --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" \
  >"$work/grid.json" 2>&1
grep -Eq '"proxies":\[\{"name":"p1","address":"127.0.0.1","state":"alive","port":17761,"addresses":\["127.0.0.1:17761","\[::1\]:17761"\],"last_seen_s":[0-9]*,"pairs":0,"bytes":0,"planned":[0-9]*\},\{"name":"p2",.*"state":"(unknown|dead)",.*"addresses":\["127.0.0.1:17763"\],"last_seen_s":null' "$work/grid.json" &&
  pass "--grid --json: the proxies" || fail "--grid --json: $(cat "$work/grid.json")"

# A proxy certificate the broker has no proxy of: refused, and p3 says so.
start_proxy p3 17764 "$work/p3.log"
stranger_pid=$started
wait_log "$work/p3.log" "refused our beat \(qcg:notfound\)" "$stranger_pid" &&
  pass "a beat from an unknown proxy name is refused (notfound)" || fail "p3: $(tail -n 3 "$work/p3.log")"
wait_log "$log" "proxyAlive from proxy p3 refused \(qcg:notfound\)" "$broker_pid" &&
  pass "the broker logs the refusal" || fail "broker: no refusal line for p3"
kill -9 "$stranger_pid"
wait "$stranger_pid" 2>/dev/null
stranger_pid=
[ "$(proxy_ports 1)" = 17761 ] && pass "p3's beats change no plan" || fail "p3's beats changed the plans"

# p1 killed: dead after proxy-dead-after (3 s), never planned.  For 4 times
# that after its last beat a pair that needs it is told to ask again (a
# stalled host, not a dead proxy, held the beats up in the lab's storms);
# then the plan says no proxy is alive.
kill -9 "$proxy_pid"
wait "$proxy_pid" 2>/dev/null
proxy_pid=
late_plan() {
  call "$fo" lookup job=j secret=s fromRank=1 toRank=0 tried=reversed
  [ $rc -eq 1 ] && [[ $out == "fault retry:"*"proxy p1 has not beaten for"* ]]
}
for _ in $(seq 100); do late_plan && break; sleep 0.1; done
late_plan && pass "p1 killed: late, the lookup is told to retry ($out)" || fail "p1 late: rc=$rc $out"
dead_plan() {
  call "$fo" lookup job=j secret=s fromRank=1 toRank=0 tried=reversed
  out_has plan.status=unavailable plan.technique=proxy && [[ $(field plan.reason) == *"no live proxy"* ]]
}
for _ in $(seq 300); do dead_plan && break; sleep 0.1; done
dead_plan && pass "p1 killed: 4 x proxy-dead-after after its last beat, no proxy planned ('no live proxy')" ||
  fail "p1 killed: $out"
"$broker_bin" --grid --url "$url" --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" >"$work/grid.txt" 2>&1
grep -Eq '^p1 +127\.0\.0\.1:17761, \[::1\]:17761 +dead +[0-9]+ s ago' "$work/grid.txt" &&
  pass "--grid: p1 dead" || fail "--grid after the kill: $(cat "$work/grid.txt")"
# p2, never heard, dead since p1 beat more than proxy-dead-after ago.
grep -Eq '^p2 +127\.0\.0\.1:17763 +dead +never' "$work/grid.txt" &&
  pass "--grid: p2 dead, never heard (not '0 s ago')" || fail "--grid, p2: $(cat "$work/grid.txt")"
call "$fe" stats
beats=$(field counter.proxy_beats)
[[ $beats =~ ^[0-9]+$ ]] && [ "$beats" -ge 1 ] &&
  pass "stats count the beats" || fail "stats: $out"

# p1 back: planned again at its first beat.
start_proxy p1 17761 "$work/p1b.log"
proxy_pid=$started
wait_log "$log" "proxy p1 is alive \(was dead\)" "$broker_pid" &&
  [ "$(proxy_ports 1)" = 17761 ] && pass "p1 started again: planned again" ||
  fail "p1 again: $out"

if [ "$failed" -gt 0 ]; then
  echo "== broker log"; tail -n 30 "$log"
  echo "$failed check(s) failed"
  exit 1
fi
echo "all checks passed"
