#!/usr/bin/env bash
# proxy-stall: one leg of a relayed pair goes silent, as when the NAT in
# front of its end forgets the connection (a symmetric NAT's conntrack -F):
# its packets are dropped both ways, no reset comes.  The proxy acknowledges
# the live end's data itself, so that end cannot tell; the proxy must abort
# the pair within stall-timeout, not when the dead leg's keepalive or
# retransmissions give up minutes later.  With stall-timeout 0 the live end
# is still open 10 s later (the check this test adds is what ends it).
#
#   proxy-client (initiator) --> qcg-proxy :18351 --X--> proxy-client (target)
#
# Runs in a network namespace of its own (unshare -n: the iptables rules die
# with it; ports 18350-18352 there).
#
#   test-stall.sh QCG-PROXY PROXY-CLIENT QCG-CERTS   exit 0 passed, 1 failed, 77 skipped
set -u
command -v iptables >/dev/null || { echo "skipped: needs iptables"; exit 77; }
# shellcheck source=../lib/own_netns.sh
. "$(dirname "$0")/../lib/own_netns.sh"
own_netns QCG_STALL_NETNS "$@"
proxy_bin=$1 client_bin=$2 certs_bin=$3
port=18351 cport=18352
PROXY_TEST=proxy-stall
# shellcheck source=tests/proxy/lib.sh
. "$(dirname "$0")/lib.sh"

# run STALL-TIMEOUT: a proxy with it, a streaming pair whose target's packets
# are then dropped both ways; the client's exit status (0: the initiator's
# end was closed within 10 s).
run() {
  local log=$work/proxy-$1.log out=$work/client-$1.out rc=0 tport
  "$proxy_bin" --listen 127.0.0.1 --port $port --control-port $cport --ca "$ca/ca.crt" \
    --cert "$ca/proxy-p1.pem" --key-file "$key" --stall-timeout "$1" 2>"$log" &
  proxy_pid=$!
  wait_log "$log" "relaying on" $proxy_pid || { echo "proxy did not start:"; cat "$log"; exit 1; }
  "$client_bin" $port "$key" stall 10 >"$out" 2>&1 &
  client_pid=$!
  wait_log "$out" "^streaming target-port" $client_pid || { fail "no pair: $(cat "$out")"; return 1; }
  tport=$(sed -n 's/^streaming target-port //p' "$out")
  iptables -I INPUT -p tcp --dport "$tport" -j DROP
  iptables -I INPUT -p tcp --sport "$tport" -j DROP
  wait $client_pid || rc=$?
  client_pid=
  iptables -D INPUT -p tcp --dport "$tport" -j DROP
  iptables -D INPUT -p tcp --sport "$tport" -j DROP
  stop_pids "$proxy_pid"
  proxy_pid=
  return $rc
}

if run 3; then
  pass "stall-timeout 3: $(tail -n 1 "$work/client-3.out")"
else
  fail "stall-timeout 3: $(cat "$work/client-3.out")"
fi
if grep -q "pair [0-9a-f]* aborted: 127.0.0.1:[0-9]* acknowledged nothing for 3 s (stall-timeout" \
  "$work/proxy-3.log"; then
  pass "the proxy says which leg stalled"
else
  fail "no stall line in the proxy's log: $(tail -n 5 "$work/proxy-3.log")"
fi
if run 0; then
  fail "stall-timeout 0: the pair was closed all the same: $(tail -n 1 "$work/client-0.out")"
else
  pass "stall-timeout 0: the live end is still open after 10 s (nothing else ends it)"
fi
echo "$failed failure(s)"
[ "$failed" -eq 0 ]
