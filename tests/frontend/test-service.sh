#!/usr/bin/env bash
#
# frontend-service: a real qcg-broker and a qcg-frontend for cluster "nata"
# on 127.0.0.1, called by helpers with their certificates:
#
#   soap-call --(helper nata/nata1)--> qcg-frontend :17802 --> qcg-broker :17801
#
# registerNode, publish, lookup (direct), the second lookup from the cache
# (the broker's lookup counter does not move), withdraw, and the refusals:
# another job's secret, another cluster's helper, a frontend certificate, an
# address that is not the node's.  Then --stats; a second frontend (cluster
# open1, port 17804) whose withdrawal makes the broker invalidate nata's
# cached plan; bad command lines; SIGTERM.

. "$(dirname -- "$0")/lib.sh"

make_certs "frontend nata" "frontend natb" "frontend open1" "helper nata/nata1" \
	"helper nata/nata2" "helper natb/natb1" "helper open1/o1"
start_broker 17801
start_frontend nata 17802 --kind nat --public-address 203.0.113.10 --addresses 198.18.1.0/24

H=helper-nata-nata1

# --- registration and publication
# Before its node registered (this frontend restarted, the helper has not
# noticed yet): transient, not "denied", which users read as a wrong secret.
call $H publish job=job1 secret=s3cret rank=0 address=198.18.1.1 port=5001
expect_fault unregistered "publish before the node registered: unregistered, not denied" \
	"has not registered"
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=1
expect_fault unregistered "lookup before the node registered: unregistered, not denied"
call $H registerNode name=nata1 address=198.18.1.1 portLow=5000 portHigh=5099
expect_ok "registerNode nata1"
epoch=$(field epoch)
call $H registerNode name=nata2 address=198.18.1.2 portLow=5000 portHigh=5099
expect_fault denied "registerNode of another node than the certificate's is denied" "nata2"
call $H publish job=job1 secret=s3cret rank=0 address=198.18.1.1 port=5001
expect_ok "publish job1 rank 0"
call $H publish job=job1 secret=s3cret rank=1 address=198.18.1.1 port=5002
expect_ok "publish job1 rank 1"
call $H publish job=job2 secret=job2secret rank=0 address=198.18.1.1 port=5003
expect_ok "publish job2 rank 0"
call $H publish job=job1 secret=s3cret rank=2 address=198.18.1.9 port=5004
expect_fault denied "publish with an address other than the node's is denied" \
	"198.18.1.9 is not node nata1's registered address 198.18.1.1"
call $H publish job=job1 secret=s3cret rank=2 address=198.18.1.1 port=6000
expect_fault denied "publish with a port outside the node's range is denied" "outside"
call $H publish job='bad job!' secret=s3cret rank=2 address=198.18.1.1 port=5004
expect_fault invalid "publish with a malformed job id is invalid"
call $H publish job="$(printf 'j%.0s' {1..200})" secret=s3cret rank=2 address=198.18.1.1 port=5004
expect_fault invalid "publish with a 200-character job id is invalid"
call $H publish job=job1 secret=s3cret rank=-3 address=198.18.1.1 port=5004
expect_fault invalid "publish with a negative rank is invalid"
call $H registerNode name=nata1 address=198.18.1.1 portLow=5099 portHigh=5000
expect_fault invalid "registerNode with an inverted port range is invalid"
call $H registerNode name=nata1 address=not-an-address portLow=5000 portHigh=5099
expect_fault invalid "registerNode with a malformed address is invalid"

# --- lookup: forwarded, then from the cache
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=1
if [[ $rc -eq 0 && $(field plan.status) == ok && $(field plan.technique) == direct &&
	$(field plan.address) == 198.18.1.1 && $(field plan.port) == 5002 && $(field plan.cacheable) == 1 ]]; then
	pass "lookup job1 0 -> 1: direct plan to 198.18.1.1:5002"
else
	fail "lookup job1 0 -> 1: direct plan to 198.18.1.1:5002"
fi
b_lookups=$(counter "$broker_url" lookups)
f_cache=$(counter "$frontend_url" lookups_from_cache)
f_fwd=$(counter "$frontend_url" lookups_forwarded)
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=1
if [[ $rc -eq 0 && $(field plan.address) == 198.18.1.1 && $(field plan.port) == 5002 ]]; then
	pass "second lookup: same plan"
else
	fail "second lookup: same plan"
fi
if [[ $(counter "$frontend_url" lookups_from_cache) -eq $((f_cache + 1)) &&
	$(counter "$frontend_url" lookups_forwarded) -eq $f_fwd &&
	$(counter "$broker_url" lookups) -eq $b_lookups ]]; then
	pass "second lookup answered from the cache (broker lookups stay $b_lookups)"
else
	fail "second lookup answered from the cache"
fi
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=1 tried=reversed
if [[ $rc -eq 0 && $(field plan.technique) == direct &&
	$(counter "$frontend_url" lookups_from_cache) -eq $((f_cache + 1)) &&
	$(counter "$frontend_url" lookups_forwarded) -eq $((f_fwd + 1)) &&
	$(counter "$broker_url" lookups) -eq $((b_lookups + 1)) ]]; then
	pass "a lookup naming techniques tried skips the cache and reaches the broker"
else
	fail "a lookup naming techniques tried skips the cache and reaches the broker"
fi
b_lookups=$((b_lookups + 1))
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=1 tried="$(printf 'reversed,%.0s' {1..20})"
expect_fault invalid "a 180-character tried list is invalid" "tried"

# --- another job's secret: denied, and not from the cache
call $H lookup job=job1 secret=job2secret fromRank=0 toRank=1
expect_fault denied "lookup with another job's secret is denied" "secret"
if [[ $(counter "$frontend_url" lookups_from_cache) -eq $((f_cache + 1)) &&
	$(counter "$broker_url" lookups) -eq $b_lookups ]]; then
	pass "the wrong secret hit neither the cache nor the broker"
else
	fail "the wrong secret hit neither the cache nor the broker"
fi
call $H lookup job=job1 secret=s3cret fromRank=7 toRank=1
expect_fault denied "lookup from a rank not published here is denied" \
	"rank 7 of job job1 is not published from cluster nata"

# --- lookups in one call: each checked as a lookup is (membership, the
# cache), what the cache lacks goes to the broker in one call
f_cache=$(counter "$frontend_url" lookups_from_cache)
b_lookups=$(counter "$broker_url" lookups)
call $H lookups job=job1 secret=s3cret fromRank=0 toRank=1 job=job1 secret=job2secret fromRank=0 toRank=1 job=job1 secret=s3cret fromRank=7 toRank=1 job=job1 secret=s3cret fromRank=0 toRank=9
if [[ $rc -eq 0 ]] && out_has answer.count=4 answer.0.plan.status=ok answer.0.plan.technique=direct \
	answer.0.plan.address=198.18.1.1 answer.0.plan.port=5002 answer.0.plan.cacheable=1 \
	"answer.0.plan.reason=cached by frontend nata" answer.1.fault=denied answer.2.fault=denied \
	answer.3.plan.status=notfound &&
	[[ $(field answer.1.faultText) == *secret* ]] &&
	[[ $(field answer.2.faultText) == *"rank 7 of job job1"* ]]; then
	pass "lookups: the cached plan, two refusals apart, and the broker's notfound, in order"
else
	fail "lookups: $out"
fi
if [[ $(counter "$frontend_url" lookups_from_cache) -eq $((f_cache + 1)) &&
	$(counter "$broker_url" lookups) -eq $((b_lookups + 1)) ]]; then
	pass "lookups: one from the cache, one to the broker, the refused ones nowhere"
else
	fail "lookups: cache $f_cache -> $(counter "$frontend_url" lookups_from_cache)," \
		"broker $b_lookups -> $(counter "$broker_url" lookups)"
fi
# shellcheck disable=SC2046 # 257 asks of four words each
call $H lookups $(for i in $(seq 0 256); do printf 'job=job1 secret=s3cret fromRank=0 toRank=1 '; done)
expect_fault invalid "lookups: 257 in one call are refused"

# --- reports in one call: each checked as a report is; what passes goes on
# to the broker in the frontend's next batch
b_ok=$(counter "$broker_url" reports_ok)
call $H reports \
	job=job1 secret=s3cret fromRank=0 toRank=1 technique=direct ok=1 setupMs=4 \
	job=job1 secret=job2secret fromRank=0 toRank=1 technique=direct ok=1 setupMs=4 \
	job=job1 secret=s3cret fromRank=7 toRank=1 technique=direct ok=1 setupMs=4 \
	job=job1 secret=s3cret fromRank=0 toRank=1 technique=warp ok=1 setupMs=4
if [[ $rc -eq 0 && $(field accepted) == 1 ]]; then
	pass "reports: 1 of 4 accepted (the others: wrong secret, rank not here, no such technique)"
else
	fail "reports: 1 of 4 accepted: $out"
fi
for ((i = 0; i < 50; i++)); do
	[[ $(counter "$broker_url" reports_ok) -gt $b_ok ]] && break
	sleep 0.1
done
if [[ $(counter "$broker_url" reports_ok) -eq $((b_ok + 1)) ]]; then
	pass "the accepted report reached the broker"
else
	fail "the accepted report reached the broker (reports_ok $(counter "$broker_url" reports_ok), was $b_ok)"
fi

# --- who may call
call helper-natb-natb1 lookup job=job1 secret=s3cret fromRank=0 toRank=1
expect_fault denied "a helper of another cluster is denied (lookup)" "cluster natb"
call helper-natb-natb1 publish job=job1 secret=s3cret rank=5 address=198.18.1.1 port=5005
expect_fault denied "a helper of another cluster is denied (publish)"
call frontend-nata lookup job=job1 secret=s3cret fromRank=0 toRank=1
expect_fault denied "a frontend certificate calling the frontend is denied (lookup)"
call frontend-natb registerNode name=natb1 address=198.18.2.1 portLow=5000 portHigh=5099
expect_fault denied "a frontend certificate calling the frontend is denied (registerNode)"
call $H registerCluster name=nata kind=nat publicAddress=203.0.113.10
expect_fault denied "registerCluster is not served by a frontend"
# Its ?wsdl names the operations it performs: not the broker's own
# (registerCluster, grid, proxyAlive); registerNode keeps the message it
# shares with registerCluster.
if ops=$(curl -s --cacert "$ca" --cert "$certs/$H.pem" "$frontend_url?wsdl" | /usr/bin/python3 -c '
import sys, xml.etree.ElementTree as ET
W = "{http://schemas.xmlsoap.org/wsdl/}"
root = ET.parse(sys.stdin).getroot()
ops = {o.get("name") for o in root.iter(W + "operation")}
msgs = {m.get("name") for m in root.iter(W + "message")}
assert len(ops) == 13 and not ops & {"registerCluster", "grid", "proxyAlive"}, ops
assert {"registerNode", "lookups", "stats"} <= ops and "registerResponse" in msgs, (ops, msgs)
assert "registerCluster" not in msgs and "gridResponse" not in msgs, msgs
print(len(ops))'); then
	pass "?wsdl of a frontend: its $ops operations, not the broker's own"
else
	fail "?wsdl of a frontend: $ops"
fi
call frontend-natb stats
if [[ $rc -eq 0 && $(field role) == frontend && $(field name) == nata ]]; then
	pass "stats answers any grid certificate"
else
	fail "stats answers any grid certificate"
fi

# --- poll: a stale epoch gets the frontend's at once
call $H poll epoch=1 ackSeq=0 waitSeconds=20
if [[ $rc -eq 0 && $(field epoch) == "$epoch" && $(field command.count) == 0 ]]; then
	pass "poll with a stale epoch returns the frontend's epoch"
else
	fail "poll with a stale epoch returns the frontend's epoch"
fi

# --- withdraw: the next lookup goes to the broker again and finds nothing
call $H withdraw job=job1 secret=wrong rank=1
expect_fault denied "withdraw with a wrong secret is denied"
call helper-nata-nata2 withdraw job=job1 secret=s3cret rank=1
expect_fault denied "withdraw of another node's contact is denied" "node nata1"
call $H withdraw job=job1 secret=s3cret rank=1
expect_ok "withdraw job1 rank 1"
f_fwd=$(counter "$frontend_url" lookups_forwarded)
b_lookups=$(counter "$broker_url" lookups)
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=1
if [[ $rc -eq 0 && $(field plan.status) == notfound ]]; then
	pass "lookup after withdraw: notfound"
else
	fail "lookup after withdraw: notfound"
fi
if [[ $(counter "$frontend_url" lookups_forwarded) -eq $((f_fwd + 1)) &&
	$(counter "$broker_url" lookups) -eq $((b_lookups + 1)) ]]; then
	pass "lookup after withdraw was forwarded to the broker"
else
	fail "lookup after withdraw was forwarded to the broker"
fi
[[ $(counter "$frontend_url" contacts) -eq 2 ]] && pass "frontend holds 2 contacts" ||
	fail "frontend holds 2 contacts"

# --- --stats, as an admin would run it
f_cache=$(counter "$frontend_url" lookups_from_cache)
out=$("$QCG_FRONTEND" --stats --url "$frontend_url" --ca "$ca" --cert "$certs/$H.pem" 2>&1) || true
if grep -qE "^lookups_from_cache +$f_cache\$" <<<"$out" && grep -qE '^name +nata$' <<<"$out"; then
	pass "--stats prints aligned counters"
else
	fail "--stats prints aligned counters"
fi
out=$("$QCG_FRONTEND" --stats --json --url "$frontend_url" --ca "$ca" --cert "$certs/$H.pem" 2>&1) || true
if python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["role"]=="frontend" and d["lookups_from_cache"]==int(sys.argv[2]) and d["upstream_connected"]==1' "$out" "$f_cache" 2>/dev/null; then
	pass "--stats --json prints one JSON object"
else
	fail "--stats --json prints one JSON object"
fi

# --- a contact withdrawn in another cluster: the broker's invalidate command
#     reaches this frontend through its long-poll and the cached plan goes
nata_url=$frontend_url
nata_pid=$frontend_pid
start_frontend open1 17804 --kind open --addresses 203.0.113.16/28
open1_url=$frontend_url
call helper-open1-o1 registerNode name=o1 address=203.0.113.21 portLow=7000 portHigh=7099
expect_ok "registerNode o1 at the frontend of open1"
call helper-open1-o1 publish job=job1 secret=s3cret rank=9 address=203.0.113.21 port=7009
expect_ok "publish job1 rank 9 from open1"
# open1's rank 9 calls nata's rank 0: the broker orders nata1 to connect
# back, through nata's frontend, to nata1's helper queue.
frontend_url=$open1_url
call helper-open1-o1 lookup job=job1 secret=s3cret fromRank=9 toRank=0
token=$(field plan.token)
[[ $rc -eq 0 && $(field plan.status) == ok && $(field plan.technique) == reversed && ${#token} -eq 32 &&
	$(field plan.cacheable) == 0 ]] &&
	pass "open1 -> nata: a reversed plan with a token" ||
	fail "open1 -> nata: a reversed plan with a token"
frontend_url=$nata_url
call $H poll epoch="$epoch" ackSeq=0 waitSeconds=10
[[ $rc -eq 0 ]] && has_item command kind=connect-back job=job1 rank=0 node=nata1 \
	address=203.0.113.21 port=7009 peerRank=9 "token=$token" &&
	pass "the connect-back order reaches nata1's queue with the initiator and the token" ||
	fail "the connect-back order reaches nata1's queue with the initiator and the token"
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=9
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=9
[[ $rc -eq 0 && $(field plan.address) == 203.0.113.21 && $(field plan.port) == 7009 &&
	$(field plan.reason) == "cached by frontend nata" ]] &&
	pass "nata caches the direct plan to open1's rank 9" ||
	fail "nata caches the direct plan to open1's rank 9"
frontend_url=$open1_url
call helper-open1-o1 withdraw job=job1 secret=s3cret rank=9
expect_ok "withdraw job1 rank 9 at open1"
wait_log "$work/frontend-nata.log" "invalidate job job1 rank 9: 1 cached plans dropped" &&
	pass "nata dropped its plan on the broker's invalidate command" ||
	fail "nata dropped its plan on the broker's invalidate command"
frontend_url=$nata_url
frontend_pid=$nata_pid
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=9
[[ $rc -eq 0 && $(field plan.status) == notfound ]] &&
	pass "the next lookup of rank 9 asks the broker: notfound" ||
	fail "the next lookup of rank 9 asks the broker: notfound"

# --- bad command lines: one line, exit 2
check_bad() {
	local what=$1 re=$2
	shift 2
	rc=0
	out=$("$QCG_FRONTEND" --port 17803 "$@" 2>&1) || rc=$?
	if [[ $rc -eq 2 && $(wc -l <<<"$out") -eq 1 ]] && grep -qE -- "$re" <<<"$out"; then
		pass "misconfiguration: $what"
	else
		fail "misconfiguration: $what (wanted exit 2 and one line matching /$re/, got $rc)"
	fi
}
F=(--ca "$ca" --cert "$certs/frontend-nata.pem")
check_bad "no broker" "broker" "${F[@]}" --kind open
check_bad "no kind" "kind" "${F[@]}" --broker "$broker_url"
check_bad "unknown kind" "kind" "${F[@]}" --broker "$broker_url" --kind wide
check_bad "nat without public address" "public-address" "${F[@]}" --broker "$broker_url" --kind nat
check_bad "bad public address" "public-address" "${F[@]}" --broker "$broker_url" --kind nat \
	--public-address 203.0.113.300
check_bad "open-ports on a NAT" "open-ports" "${F[@]}" --broker "$broker_url" --kind nat \
	--public-address 203.0.113.10 --open-ports 6000-6100
check_bad "addresses not a range" "addresses: 'nodes' is not an IPv4 or IPv6 address range" "${F[@]}" \
	--broker "$broker_url" --kind open --addresses 198.51.100.0/26,nodes
check_bad "addresses with host bits" "addresses: '198.51.100.5/26' has host bits set" "${F[@]}" \
	--broker "$broker_url" --kind open --addresses 198.51.100.5/26
check_bad "addresses on loopback" "addresses: 127.0.0.0/8 is a loopback range" "${F[@]}" \
	--broker "$broker_url" --kind open --addresses 127.0.0.0/8
check_bad "cluster differs from the certificate" "nata" "${F[@]}" --broker "$broker_url" \
	--kind open --cluster natb
check_bad "helper certificate" "frontend" --ca "$ca" --cert "$certs/$H.pem" \
	--broker "$broker_url" --kind open
check_bad "missing certificate file" "nosuch" --ca "$ca" --cert "$work/nosuch.pem" \
	--broker "$broker_url" --kind open
check_bad "unknown option" "nosuch" "${F[@]}" --broker "$broker_url" --kind open --nosuch 1
printf 'ca = %s\ncert = %s\nbroker = %s\nkind = wide\n' "$ca" "$certs/frontend-nata.pem" \
	"$broker_url" >"$work/bad.conf"
check_bad "bad kind in a config file" "kind" --config "$work/bad.conf"
rc=0
out=$("$QCG_FRONTEND" --help 2>&1) || rc=$?
[[ $rc -eq 0 && $out == *"--cache-size"* ]] && pass "--help" || fail "--help"

# --- SIGTERM: a clean stop, promptly, even with a helper's poll pending
n=$(grep -c "connection from helper nata/nata1" "$work/frontend-nata.log" || true)
"$QCG_SOAP_CALL" --url "$frontend_url" --ca "$ca" --cert "$certs/$H.pem" \
	poll epoch="$epoch" ackSeq=0 waitSeconds=20 >"$work/poll.out" 2>&1 &
poll_pid=$!
wait_log "$work/frontend-nata.log" "connection from helper nata/nata1" "" $((n + 1)) ||
	fail "the helper's poll did not reach the frontend"
if stop_frontend "$frontend_pid" "$work/frontend-nata.log"; then
	pass "SIGTERM: clean stop in $stop_ms ms with a helper's poll pending"
else
	fail "SIGTERM: no clean stop within 15 s"
fi
wait_gone "$poll_pid" 150 || kill "$poll_pid" 2>/dev/null || true

finish
