#!/usr/bin/env bash
# broker-service: the real qcg-broker on 127.0.0.1 with a throw-away CA, called
# by soap-call (tests/lib, a C client over qcgcommon), curl and python3-zeep.
#
#   test-service.sh QCG-BROKER SOAP-CALL QCG-CERTS
#
#   soap-call / curl / zeep --(mutual TLS, 127.0.0.1:17700)--> qcg-broker
#   second broker on 17701 (--max-contacts 2); ports 17700-17799 are ours.
set -u
broker_bin=$1 call_bin=$2 certs_bin=$3
port=17700
url=https://127.0.0.1:$port/
work=$(mktemp -d /tmp/broker-service.XXXXXX)
broker_pid="" small_pid="" proxied_pid="" probed_pid="" unit_pid=""

cleanup() {
  stop_children "$broker_pid" "$small_pid" "$proxied_pid" "$probed_pid" "$unit_pid"
  rm -rf "$work"
}
trap cleanup EXIT

# shellcheck source=tests/broker/lib.sh
. "$(dirname "$0")/lib.sh"
# last_seq: the seq of a poll's last command, which the next poll acknowledges.
last_seq() { field "command.$(($(field command.count) - 1)).seq"; }

# Throw-away CA: the grid's, and a foreign one whose certificates must be refused.
make_ca "$work/ca" nata open fw sym natb
"$certs_bin" --dir "$ca" issue helper nata/nata1 >/dev/null 2>&1
"$certs_bin" --dir "$work/foreign" init >/dev/null
"$certs_bin" --dir "$work/foreign" issue frontend nata --san 127.0.0.1 >/dev/null

fe=$ca/frontend-nata.pem fo=$ca/frontend-open.pem helper=$ca/helper-nata-nata1.pem

log=$work/broker.log
start_broker "$log" broker_pid $port
broker_pid=$broker_pid

# --- misconfiguration: one line on stderr naming the problem, exit 2
misconf() { # description expected-text args...
  local what=$1 text=$2
  shift 2
  local err
  err=$(timeout 20 "$broker_bin" "$@" 2>&1 >/dev/null)
  local status=$?
  if [ $status -eq 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [[ $err == *"$text"* ]]; then
    pass "misconfiguration: $what"
  else
    fail "misconfiguration: $what: exit $status: $err"
  fi
}
misconf "missing ca" "ca" --cert "$ca/broker-broker.pem"
misconf "missing cert" "cert" --ca "$ca/ca.crt"
misconf "unreadable ca" "$work/nope.crt" --ca "$work/nope.crt" --cert "$ca/broker-broker.pem"
misconf "bad port" "port" --port 70000 --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem"
misconf "bad log level" "log-level" --log-level loud --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem"
misconf "certificate file is no PEM" "cert" --ca "$ca/ca.crt" --cert "$ca/ca.key" --port 17709
printf 'port = 17708\nmax-contacts = many\n' >"$work/bad.conf"
misconf "bad value in a config file" "max-contacts" --config "$work/bad.conf" --ca "$ca/ca.crt" \
  --cert "$ca/broker-broker.pem"
misconf "unreadable config file" "$work/none.conf" --config "$work/none.conf"
# The reflector never runs as the broker's own uid unless asked: it could
# read the broker's TLS key and proxy key.
misconf "reflector-user is the broker's own uid" "is the broker's own uid $(id -u)" \
  --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" --port 17709 --reflector 127.0.0.1:17795 \
  --reflector-user "$(id -un)"
misconf "an unknown reflector-user" "reflector-user qcg-nosuchuser: no such user" \
  --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" --port 17709 --reflector 127.0.0.1:17795 \
  --reflector-user qcg-nosuchuser
# An IPv6 reflector address comes after the IPv4 one (qcg-probe's), on its port.
misconf "an IPv6 reflector alone" "'::1' is not an IPv4 address" --ca "$ca/ca.crt" \
  --cert "$ca/broker-broker.pem" --port 17709 --reflector "[::1]:17795"
misconf "an IPv6 reflector on another port" "port 17796 is not the IPv4 one's (17795)" \
  --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" --port 17709 \
  --reflector "127.0.0.1:17795, [::1]:17796"
misconf "two IPv4 reflector addresses" "'127.0.0.2' is not an IPv6 address" --ca "$ca/ca.crt" \
  --cert "$ca/broker-broker.pem" --port 17709 --reflector "127.0.0.1:17795, 127.0.0.2:17795"
misconf "proxy without proxy-key" "proxy-key is required" --ca "$ca/ca.crt" \
  --cert "$ca/broker-broker.pem" --proxy p1@127.0.0.1:17790
misconf "proxy not NAME@HOST:PORT" "NAME@HOST:PORT" --ca "$ca/ca.crt" \
  --cert "$ca/broker-broker.pem" --proxy 127.0.0.1:17790
misconf "proxy host not an address" "not an IP address" --ca "$ca/ca.crt" \
  --cert "$ca/broker-broker.pem" --proxy p1@proxy.example:17790
openssl rand -hex 32 >"$work/proxy.key"
chmod 0644 "$work/proxy.key"
misconf "a proxy key others may read" "proxy-key" --ca "$ca/ca.crt" \
  --cert "$ca/broker-broker.pem" --proxy p1@127.0.0.1:17790 --proxy-key "$work/proxy.key"
chmod 0600 "$work/proxy.key"
"$broker_bin" --help | grep -q -- "--max-contacts" && pass "--help lists the options" ||
  fail "--help"
"$broker_bin" --help | grep -q -- "--grid" && pass "--help lists --grid" || fail "--help: no --grid"

# --- a frontend registers, publishes, looks up
expect_ok "frontend registers its cluster" "$fe" registerCluster name=nata kind=nat publicAddress=203.0.113.30 nodeRange=198.18.3.0/24
epoch=$(field epoch)
grep -q "cluster nata registered" "$log" && pass "registration logged at info" ||
  fail "no info line for the registration"
expect_ok "frontend registers a node" "$fe" registerNode name=nata1 address=198.18.3.11 portLow=20000 portHigh=20999 canIntercept=1
expect_ok "publish rank 0 (cluster filled from the caller)" "$fe" \
  publish job=job1 secret=s3cret rank=0 node=nata1 address=198.18.3.11 port=20001
expect_ok "publish rank 1" "$fe" publish job=job1 secret=s3cret rank=1 cluster=nata node=nata1 address=198.18.3.11 port=20002
expect_ok "re-publishing the same contact is idempotent" "$fe" \
  publish job=job1 secret=s3cret rank=1 cluster=nata node=nata1 address=198.18.3.11 port=20002
expect_fault "the same rank elsewhere is busy" busy "$fe" \
  publish job=job1 secret=s3cret rank=1 cluster=nata node=nata1 address=198.18.3.11 port=20003
expect_ok "lookup within the cluster" "$fe" lookup job=job1 secret=s3cret fromRank=0 toRank=1
out_has plan.status=ok plan.technique=direct plan.cluster=nata plan.node=nata1 \
  plan.address=198.18.3.11 plan.port=20002 plan.cacheable=1 &&
  pass "plan: direct to the private address, cacheable" || fail "plan: $out"
expect_ok "lookup of an unpublished rank" "$fe" lookup job=job1 secret=s3cret fromRank=0 toRank=9
out_has plan.status=notfound && pass "plan: notfound (not a fault)" || fail "plan: $out"

# Another site: open -> nata needs reversed (unavailable), nata -> open is direct.
expect_ok "second frontend registers" "$fo" registerCluster name=open kind=open publicAddress=203.0.113.20 nodeRange=203.0.113.20/31
expect_ok "second frontend's node" "$fo" registerNode name=open1 address=203.0.113.21 portLow=20000 portHigh=20999 canIntercept=0
expect_ok "publish rank 2 at open" "$fo" publish job=job1 secret=s3cret rank=2 cluster=open node=open1 address=203.0.113.21 port=20005
expect_ok "lookup nata -> open" "$fe" lookup job=job1 secret=s3cret fromRank=0 toRank=2
out_has plan.status=ok plan.technique=direct plan.address=203.0.113.21 plan.port=20005 &&
  pass "plan to an open site: direct" || fail "plan: $out"
expect_ok "lookup open -> nata" "$fo" lookup job=job1 secret=s3cret fromRank=2 toRank=0
rev_token=$(field plan.token)
out_has plan.status=ok plan.technique=reversed plan.cacheable=0 && [[ $rev_token =~ ^[0-9a-f]{32}$ ]] &&
  [[ $(field plan.reason) =~ ^cluster\ open\ is\ open\ and\ cluster\ nata\ is\ not\ reachable.*:\ reversed$ ]] &&
  pass "plan to a NAT site: reversed, a 32-hex token, not cacheable, with a reason" ||
  fail "plan: $out"
rev_token=${rev_token:-none}
expect_ok "nata's queue after the reversed plan" "$fe" poll epoch="$epoch" ackSeq=0 waitSeconds=0
out_has "epoch=$epoch" command.count=1 &&
  has_item command kind=connect-back job=job1 rank=0 node=nata1 peerRank=2 address=203.0.113.21 \
    port=20005 "token=$rev_token" seconds=0 &&
  pass "connect-back ordered to nata1: rank 0 calls rank 2 at 203.0.113.21:20005 with the token" ||
  fail "connect-back: $out (token $rev_token)"
cb_seq=$(last_seq)
expect_ok "acknowledging the connect-back" "$fe" poll epoch="$epoch" ackSeq="${cb_seq:-0}" waitSeconds=0
expect_ok "lookup open -> nata, reversed tried, no proxy configured" "$fo" lookup job=job1 secret=s3cret fromRank=2 toRank=0 tried=reversed
out_has plan.status=unavailable plan.technique=proxy plan.cacheable=0 && [[ -z $(field plan.token) ]] &&
  [[ $(field plan.reason) == *"reversed already tried"*"no proxy configured"* ]] &&
  pass "fallback without a proxy: unavailable, naming proxy" || fail "plan: $out"
expect_ok "lookup nata -> open, direct tried" "$fe" lookup job=job1 secret=s3cret fromRank=0 toRank=2 tried=direct
out_has plan.status=unavailable plan.technique=proxy &&
  [[ $(field plan.reason) == *"direct already tried"* ]] &&
  pass "nothing after direct for a NATed initiator without a proxy" || fail "plan: $out"
expect_fault "lookup with an unknown technique tried" invalid "$fo" lookup job=job1 secret=s3cret fromRank=2 toRank=0 tried=reversed,warp

# Many lookups in one call: each answered as a lookup alone, in order; a
# refused one leaves the others planned.
expect_ok "stats before lookups" "$fe" stats
lk0=$(field counter.lookups) lc0=$(field counter.lookup_calls)
expect_ok "lookups: direct, notfound, another cluster's rank, reversed" "$fe" lookups \
  job=job1 secret=s3cret fromRank=0 toRank=1 job=job1 secret=s3cret fromRank=0 toRank=9 \
  job=job1 secret=s3cret fromRank=2 toRank=0 job=job1 secret=wrong fromRank=0 toRank=2
if out_has answer.count=4 answer.0.plan.status=ok answer.0.plan.technique=direct \
  answer.0.plan.address=198.18.3.11 answer.0.plan.port=20002 answer.0.plan.cacheable=1 \
  answer.1.plan.status=notfound answer.2.fault=denied answer.3.fault=denied; then
  pass "lookups: 4 answers in order, two refused apart"
else fail "lookups: $out"; fi
expect_ok "stats after lookups" "$fe" stats
[[ $(field counter.lookup_calls) == $((lc0 + 1)) && $(field counter.lookups) == $((lk0 + 4)) ]] &&
  pass "lookups: one call, four lookups counted (lookup_calls $lc0 -> $((lc0 + 1)))" ||
  fail "lookups counters: lookups $lk0, lookup_calls $lc0 -> $out"
expect_ok "lookups open -> nata: a reversed plan with its own token" "$fo" lookups job=job1 secret=s3cret fromRank=2 toRank=0
lk_token=$(field answer.0.plan.token)
out_has answer.0.plan.status=ok answer.0.plan.technique=reversed && [[ $lk_token =~ ^[0-9a-f]{32}$ ]] &&
  pass "lookups: reversed plan, 32-hex token" || fail "lookups reversed: $out"
lk_token=${lk_token:-none}
expect_ok "nata's queue after it" "$fe" poll epoch="$epoch" ackSeq="${cb_seq:-0}" waitSeconds=0
has_item command kind=connect-back job=job1 rank=0 node=nata1 peerRank=2 "token=$lk_token" &&
  pass "lookups: its connect-back ordered with the plan's token" || fail "lookups order: $out"
cb_seq=$(last_seq)
expect_ok "acknowledging it" "$fe" poll epoch="$epoch" ackSeq="${cb_seq:-0}" waitSeconds=0
many=()
for i in $(seq 0 256); do many+=(job=job1 secret=s3cret fromRank=0 toRank=1); done
expect_fault "lookups: 257 in one call" invalid "$fe" lookups "${many[@]}"
expect_fault "helper calling lookups" denied "$helper" lookups job=job1 secret=s3cret fromRank=0 toRank=1

# --- who may do what
expect_fault "helper calling registerCluster" denied "$helper" registerCluster name=nata kind=nat
expect_fault "helper calling publish" denied "$helper" publish job=job1 secret=s3cret rank=3 cluster=nata node=nata1 address=198.18.3.11 port=20004
expect_fault "frontend nata registering cluster open" denied "$fe" registerCluster name=open kind=open
expect_fault "frontend nata publishing for cluster open" denied "$fe" \
  publish job=job1 secret=s3cret rank=3 cluster=open node=open1 address=203.0.113.21 port=20006
expect_fault "frontend open withdrawing nata's contact" denied "$fo" withdraw job=job1 secret=s3cret rank=1
expect_fault "lookup from a rank of another cluster" denied "$fo" lookup job=job1 secret=s3cret fromRank=0 toRank=1
grep -q "publish from helper nata/nata1 refused (qcg:denied)" "$log" &&
  pass "refusals logged at warn with the caller" || fail "no warn line naming the caller"

# --- secrets, versions, fields
expect_fault "publish with a wrong secret" denied "$fe" publish job=job1 secret=wrong rank=3 cluster=nata node=nata1 address=198.18.3.11 port=20004
expect_fault "lookup with a wrong secret" denied "$fe" lookup job=job1 secret=wrong fromRank=0 toRank=1
expect_fault "withdraw with a wrong secret" denied "$fe" withdraw job=job1 secret=wrong rank=1
call "$fe" --protocol 917 stats
if [ $rc -eq 1 ] && [[ $out == "fault version:"* ]] && grep -qw 917 <<<"$out" && grep -qw 2 <<<"$out"; then
  pass "version mismatch names both versions ($out)"
else
  fail "version mismatch: $out"
fi
# A version-1 caller sent the job secret itself: refused by version, not misread.
expect_fault "a version-1 publish (the secret, not its verifier)" version "$fe" --protocol 1 \
  publish job=job1 verifier=s3cret rank=3 cluster=nata node=nata1 address=198.18.3.11 port=20004
# A secret where the verifier belongs (not 64 lowercase hex) is malformed.
expect_fault "a secret in the verifier field" invalid "$fe" publish job=job1 verifier=s3cret rank=3 cluster=nata node=nata1 \
  address=198.18.3.11 port=20004
expect_fault "negative rank" invalid "$fe" publish job=job1 secret=s3cret rank=-1 cluster=nata node=nata1 address=198.18.3.11 port=20004
expect_fault "port 0" invalid "$fe" publish job=job1 secret=s3cret rank=3 cluster=nata node=nata1 address=198.18.3.11 port=0
expect_fault "address that is not one" invalid "$fe" registerNode name=nata2 address=198.18.3.300 portLow=20000 portHigh=20999 canIntercept=0
expect_fault "unknown kind" invalid "$fe" registerCluster name=nata kind=wormhole
expect_fault "nine public addresses" invalid "$fe" registerCluster name=nata kind=nat publicAddress=203.0.113.1 publicAddress=203.0.113.2 \
  publicAddress=203.0.113.3 publicAddress=203.0.113.4 publicAddress=203.0.113.5 publicAddress=203.0.113.6 publicAddress=203.0.113.7 publicAddress=203.0.113.8 publicAddress=203.0.113.9
expect_fault "bad job id" invalid "$fe" lookup job="job/../x" secret=s3cret fromRank=0 toRank=1
expect_fault "unregistered node" notfound "$fe" publish job=job1 secret=s3cret rank=3 cluster=nata node=nata7 address=198.18.3.17 port=20004

# --- TLS: a foreign CA's certificate and no certificate are refused
call "$work/foreign/frontend-nata.pem" stats
[ $rc -eq 3 ] && pass "foreign-CA certificate refused at TLS ($out)" || fail "foreign CA: rc=$rc $out"
wait_log "$log" "TLS handshake failed" "$broker_pid" && pass "the broker logs the refused handshake" ||
  fail "no log line for the refused handshake"
envelope() { # body-xml
  printf '<?xml version="1.0" encoding="UTF-8"?><SOAP-ENV:Envelope xmlns:SOAP-ENV="http://schemas.xmlsoap.org/soap/envelope/" xmlns:qcg="urn:qcg-connect:1"><SOAP-ENV:Body>%s</SOAP-ENV:Body></SOAP-ENV:Envelope>' "$1"
}
stats_xml=$(envelope '<qcg:stats><version>2</version></qcg:stats>')
curl_fe() {
  curl -sS --max-time 10 --cacert "$ca/ca.crt" --cert "$ca/frontend-nata.crt" \
    --key "$ca/frontend-nata.key" -H 'Content-Type: text/xml; charset=utf-8' "$@"
}
if curl -sS --max-time 10 --cacert "$ca/ca.crt" -H 'Content-Type: text/xml' \
  --data-binary "$stats_xml" "$url" >"$work/nocert.out" 2>&1; then
  fail "a client without a certificate got an answer: $(cat "$work/nocert.out")"
else
  grep -q statsResponse "$work/nocert.out" && fail "no certificate: got stats" ||
    pass "no client certificate: refused at TLS"
fi
wait_log "$log" "TLS handshake failed" "$broker_pid" 2 ||
  fail "no log line for the handshake without a certificate"
curl_fe --data-binary "$stats_xml" "$url" | grep -q "<role>broker</role>" &&
  pass "curl with a hand-written envelope" || fail "curl stats"

# --- malformed and oversized requests get a fault or a closed connection
curl_fe --data-binary '<?xml version="1.0"?><SOAP-ENV:Envelope xmlns:SOAP-ENV="http://schemas.xmlsoap.org/soap/envelope/" xmlns:qcg="urn:qcg-connect:1"><SOAP-ENV:Body><qcg:stats><version>1</vers></qcg:stats>' \
  "$url" >"$work/malformed.out" 2>&1
if grep -q statsResponse "$work/malformed.out"; then fail "malformed XML answered"
else pass "malformed XML: $(grep -o '<faultstring>[^<]*' "$work/malformed.out" | head -1 || true)"; fi
expect_ok "the broker still serves after malformed XML" "$fe" stats
head -c 2097152 /dev/zero | tr '\0' 'A' >"$work/big"
{ printf '%s' '<?xml version="1.0"?><SOAP-ENV:Envelope xmlns:SOAP-ENV="http://schemas.xmlsoap.org/soap/envelope/" xmlns:qcg="urn:qcg-connect:1"><SOAP-ENV:Body><qcg:lookup><version>2</version><job>'
  cat "$work/big"
  printf '%s' '</job><verifier>s</verifier><fromRank>0</fromRank><toRank>1</toRank></qcg:lookup></SOAP-ENV:Body></SOAP-ENV:Envelope>'
} >"$work/big.xml"
curl_fe --data-binary @"$work/big.xml" "$url" >"$work/big.out" 2>&1
if grep -q lookupResponse "$work/big.out"; then fail "2 MB body answered"
else pass "2 MB body refused: $(head -c 160 "$work/big.out" | tr -d '\n')"; fi
expect_ok "the broker still serves after a 2 MB body" "$fe" lookup job=job1 secret=s3cret fromRank=0 toRank=1

# --- WSDL, and python3-zeep calling stats over mutual TLS
curl_fe "$url?wsdl" >"$work/qcg.wsdl"
grep -q "<definitions" "$work/qcg.wsdl" && [ "$(grep -c '<operation name="' "$work/qcg.wsdl")" = 32 ] &&
  pass "GET /?wsdl returns the WSDL" || fail "wsdl: $(head -c 200 "$work/qcg.wsdl")"
if /usr/bin/python3 -c 'import zeep' 2>/dev/null; then
  zeep_out=$(env -u REQUESTS_CA_BUNDLE -u CURL_CA_BUNDLE /usr/bin/python3 - "$work/qcg.wsdl" "$url" \
    "$ca/ca.crt" "$ca/helper-nata-nata1.crt" "$ca/helper-nata-nata1.key" <<'EOF' 2>&1
import sys
import requests
import zeep
from zeep.transports import Transport
wsdl, url, ca, crt, key = sys.argv[1:]
session = requests.Session()
session.cert = (crt, key)
session.verify = ca
client = zeep.Client(wsdl, transport=Transport(session=session, timeout=10))
service = client.create_service("{urn:qcg-connect:1}qcg", url)
r = service.stats(version=2)
counters = {c.name: c.value for c in r.counter}
print(r.role, counters["contacts"], counters["clusters"])
EOF
)
  [ "$zeep_out" = "broker 3 2" ] && pass "python3-zeep: stats over mutual TLS ($zeep_out)" ||
    fail "zeep: $zeep_out"
else
  fail "python3-zeep is not installed (Debian package python3-zeep)"
fi

# --- qcg-broker --stats, text and JSON
"$broker_bin" --stats --port $port --ca "$ca/ca.crt" --cert "$helper" >"$work/stats.txt" 2>&1 &&
  grep -Eq '^contacts +3$' "$work/stats.txt" && grep -Eq '^role +broker$' "$work/stats.txt" &&
  pass "--stats prints aligned counters" || fail "--stats: $(cat "$work/stats.txt")"
"$broker_bin" --stats --json --url "$url" --ca "$ca/ca.crt" --cert "$helper" >"$work/stats.json" 2>&1
/usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
want = ["clusters", "nodes", "jobs", "contacts", "lookups", "publishes", "faults", "connections"]
assert d["role"] == "broker" and all(k in d for k in want), d
assert d["clusters"] == 2 and d["contacts"] == 3 and d["faults"] > 10 and d["connections"] > 10, d
' "$work/stats.json" && pass "--stats --json: one JSON object with the counters" ||
  fail "--stats --json: $(cat "$work/stats.json")"
"$broker_bin" --stats --port 17799 --ca "$ca/ca.crt" --cert "$helper" >/dev/null 2>&1
[ $? -eq 1 ] && pass "--stats against no broker fails with exit 1" || fail "--stats to nothing"

# --- long-poll: a withdraw reaches every cluster's queue
expect_ok "poll with an old epoch" "$fe" poll epoch=12345 ackSeq=0 waitSeconds=5
out_has "epoch=$epoch" command.count=0 && pass "old epoch: the broker's epoch, no commands" ||
  fail "old epoch: $out (want epoch $epoch)"
"$call_bin" --url "$url" --ca "$ca/ca.crt" --cert "$fo" poll epoch="$epoch" ackSeq=0 waitSeconds=10 >"$work/poll.out" 2>&1 &
poll_pid=$!
wait_log "$log" "poll from frontend open: ack 0, waiting up to 10 s" "$broker_pid" ||
  fail "the poll did not reach the broker"
expect_ok "withdraw rank 1" "$fe" withdraw job=job1 secret=s3cret rank=1 node=nata1
wait "$poll_pid"
out=$(cat "$work/poll.out")
out_has ok "epoch=$epoch" command.count=1 &&
  has_item command kind=invalidate job=job1 rank=1 node= peerRank=0 address= port=0 token= seconds=0 &&
  pass "a pending poll of another cluster receives invalidate(job1, 1)" ||
  fail "poll: $out"
seq1=$(field command.0.seq)
expect_ok "poll acknowledging it" "$fo" poll epoch="$epoch" ackSeq="$seq1" waitSeconds=0
out_has "epoch=$epoch" command.count=0 && pass "acknowledged commands are gone" || fail "ack: $out"
expect_ok "lookup of the withdrawn rank" "$fe" lookup job=job1 secret=s3cret fromRank=0 toRank=1
out_has plan.status=notfound && pass "withdrawn rank: notfound" || fail "after withdraw: $out"

# --- max-contacts: a broker that holds 2 refuses the third
small_log=$work/small.log
printf '# a config file\nmax-contacts = 2\nmax-contacts-per-cluster = 2\ncluster-probes = 2\nlog-level = info\n' \
  >"$work/small.conf"
start_broker "$small_log" small_pid 17701 --config "$work/small.conf"
URL=https://127.0.0.1:17701/
expect_ok "small broker: register" "$fe" registerCluster name=nata kind=nat nodeRange=198.18.3.0/24
expect_ok "small broker: node" "$fe" registerNode name=nata1 address=198.18.3.11 portLow=20000 portHigh=20999 canIntercept=0
expect_ok "small broker: contact 1" "$fe" publish job=j secret=s rank=0 node=nata1 address=198.18.3.11 port=20001
expect_ok "small broker: contact 2" "$fe" publish job=j secret=s rank=1 node=nata1 address=198.18.3.11 port=20002
expect_fault "small broker: contact 3 beyond max-contacts" unavailable "$fe" publish job=j secret=s rank=2 node=nata1 address=198.18.3.11 port=20003
# cluster-probes = 2 a minute: a third probe within it is refused, naming the option.
expect_ok "small broker: probe 1" "$fe" probe cluster=nata seconds=5
expect_ok "small broker: probe 2" "$fe" probe cluster=nata seconds=5
expect_fault "small broker: probe 3 beyond cluster-probes" retry "$fe" probe cluster=nata seconds=5
[[ $out == *"cluster-probes"* ]] && pass "the refusal names cluster-probes" || fail "refusal: $out"
unset URL

# --- proxies: a broker with two, configured in its file
proxied_log=$work/proxied.log
printf 'proxy = p1@127.0.0.1:17790, p2@127.0.0.1:17791\nproxy-key = %s\n' "$work/proxy.key" \
  >"$work/proxied.conf"
start_broker "$proxied_log" proxied_pid 17702 --config "$work/proxied.conf"
URL=https://127.0.0.1:17702/
expect_ok "proxied broker: register nata" "$fe" registerCluster name=nata kind=nat nodeRange=198.18.3.0/24
epoch2=$(field epoch)
expect_ok "proxied broker: register open" "$fo" registerCluster name=open kind=open nodeRange=203.0.113.20/31
expect_ok "proxied broker: node nata1" "$fe" registerNode name=nata1 address=198.18.3.11 portLow=20000 portHigh=20999 canIntercept=0
expect_ok "proxied broker: node open1" "$fo" registerNode name=open1 address=203.0.113.21 portLow=20000 portHigh=20999 canIntercept=0
expect_ok "proxied broker: publish nata" "$fe" publish job=j secret=s rank=0 node=nata1 address=198.18.3.11 port=20001
expect_ok "proxied broker: publish open" "$fo" publish job=j secret=s rank=1 node=open1 address=203.0.113.21 port=20001
expect_ok "proxied broker: open -> nata, reversed tried" "$fo" lookup job=j secret=s fromRank=1 toRank=0 tried=reversed
px_token=$(field plan.token) px_port=$(field plan.port)
out_has plan.status=ok plan.technique=proxy plan.cluster=nata plan.node=nata1 plan.address=127.0.0.1 \
  plan.cacheable=0 && [[ $px_port =~ ^1779[01]$ && $px_token =~ ^[0-9a-f]{84}$ ]] &&
  [[ $(field plan.reason) =~ reversed\ already\ tried.*proxy$ ]] &&
  pass "fallback: a proxy plan with an 84-hex token, not cacheable" || fail "plan: $out"
px_token=${px_token:-none}
expect_ok "nata's queue at the proxied broker" "$fe" poll epoch="${epoch2:-0}" ackSeq=0 waitSeconds=0
i=$(item command kind proxy-connect)
tgt_token=$(field "command.$i.token")
[[ -n $i && $tgt_token =~ ^[0-9a-f]{84}$ ]] &&
  has_item command kind=proxy-connect job=j rank=0 node=nata1 peerRank=1 address=127.0.0.1 \
    "port=$px_port" "token=$tgt_token" seconds=0 &&
  pass "proxy-connect ordered to nata1 with the same proxy" || fail "proxy-connect: $out"
tgt_token=${tgt_token:-none}
# version | pair (16 bytes) | side | ...: the same pair, the other side.
if [ "${px_token:2:32}" = "${tgt_token:2:32}" ] && [ "${px_token:34:2}" = 00 ] &&
  [ "${tgt_token:34:2}" = 01 ]; then
  pass "the two tokens name one pair, initiator side 00 and target side 01"
else
  fail "tokens: $px_token / $tgt_token"
fi
expect_ok "proxied broker: the same lookup again" "$fo" lookup job=j secret=s fromRank=1 toRank=0 tried=reversed
out_has plan.technique=proxy && [[ $out != *"$px_token"* ]] &&
  pass "each proxy plan has a new token" || fail "second plan: $out"
expect_ok "proxied broker: stats" "$fe" stats
out_has counter.plans_proxy=2 && pass "stats count the proxy plans" || fail "stats: $out"
grep -q "proxy p2 at 127.0.0.1 port 17791" "$proxied_log" && pass "the proxies are logged at start" ||
  fail "no log line for the proxies"
grep -q "$px_token" "$proxied_log" && fail "a token in the broker's log" ||
  pass "tokens are not logged"
kill -TERM "$proxied_pid"
wait "$proxied_pid" && pass "proxied broker: SIGTERM, exit 0" || fail "proxied broker: exit $?"
proxied_pid=
unset URL

# --- qcg-probe's operations: a broker with a proxy and a reflector, five clusters
#     nata (nat), open, fw (firewalled, fw1 cannot intercept), sym (symnat), natb (no node)
probed_log=$work/probed.log
printf 'proxy = p1@127.0.0.1:17790\nproxy-key = %s\nreflector = 127.0.0.1:17794, [::1]:17794\nstate-file = %s\n' \
  "$work/proxy.key" "$work/broker.state" >"$work/probed.conf"
# As root the reflector's process becomes its own user by default
# (qcg-reflector: the package creates it, so does scripts/install-deps);
# another uid cannot, and says that it keeps its uid.
root=no refl_uid=
if [ "$(id -u)" = 0 ]; then
  root=yes
  refl_uid=$(id -u qcg-reflector 2>/dev/null) ||
    fail "no user qcg-reflector on this machine (scripts/install-deps creates it)"
else
  echo "reflector-same-user = yes" >>"$work/probed.conf"
fi
start_broker "$probed_log" probed_pid 17703 --config "$work/probed.conf"
URL=https://127.0.0.1:17703/
ffw=$ca/frontend-fw.pem fsym=$ca/frontend-sym.pem fnatb=$ca/frontend-natb.pem
expect_ok "probed broker: register nata" "$fe" registerCluster name=nata kind=nat publicAddress=203.0.113.30 nodeRange=198.18.3.0/24
epoch3=$(field epoch)
expect_ok "probed broker: register open" "$fo" registerCluster name=open kind=open publicAddress=203.0.113.20 nodeRange=203.0.113.20/31
expect_ok "probed broker: register fw" "$ffw" registerCluster name=fw kind=firewalled publicAddress=198.51.100.75 nodeRange=198.51.100.64/26
expect_ok "probed broker: register sym" "$fsym" registerCluster name=sym kind=symnat publicAddress=203.0.113.98 nodeRange=198.18.5.0/24
expect_ok "probed broker: register natb (no node)" "$fnatb" registerCluster name=natb kind=nat publicAddress=203.0.113.82 nodeRange=198.18.4.0/24
expect_ok "probed broker: node nata1" "$fe" registerNode name=nata1 address=198.18.3.11 portLow=20000 portHigh=20999 canIntercept=1
expect_ok "probed broker: node open1" "$fo" registerNode name=open1 address=203.0.113.21 portLow=20000 portHigh=20999 canIntercept=1
expect_ok "probed broker: node fw1 (cannot intercept)" "$ffw" registerNode name=fw1 address=198.51.100.75 portLow=20000 portHigh=20999 canIntercept=0
expect_ok "probed broker: node sym1" "$fsym" registerNode name=sym1 address=198.18.5.11 portLow=20000 portHigh=20999 canIntercept=1
expect_ok "probed broker: publish nata" "$fe" publish job=p secret=s rank=0 node=nata1 address=198.18.3.11 port=20001
expect_ok "probed broker: publish nata again" "$fe" publish job=p secret=s rank=4 node=nata1 address=198.18.3.11 port=20004
expect_ok "probed broker: publish open" "$fo" publish job=p secret=s rank=1 node=open1 address=203.0.113.21 port=20001
expect_ok "probed broker: publish fw" "$ffw" publish job=p secret=s rank=2 node=fw1 address=198.51.100.75 port=20001
expect_ok "probed broker: publish sym" "$fsym" publish job=p secret=s rank=3 node=sym1 address=198.18.5.11 port=20001

# lookup only: each technique, and why it cannot work
only_is() { # description "status technique=T" cert from to technique line-glob...
  local what=$1 want=$2 cert=$3 from=$4 to=$5 t=$6
  shift 6
  call "$cert" lookup job=p secret=s fromRank="$from" toRank="$to" only="$t"
  if [ $rc -eq 0 ] && out_has "plan.status=${want%% *}" "plan.${want#* }" plan.cacheable=0 &&
    out_like "$@"; then pass "only $t: $what"
  else fail "only $t: $what: $out"; fi
}
only_is "nata -> fw direct: fw accepts nothing from outside" "unavailable technique=direct" "$fe" 0 2 direct \
  "plan.reason=cluster fw is firewalled with no open port range: it accepts no connection from outside → direct cannot work*"
only_is "nata -> open direct works, not cacheable" "ok technique=direct" "$fe" 0 1 direct \
  plan.address=203.0.113.21 plan.port=20001
only_is "nata -> open reversed: nata is behind a NAT" "unavailable technique=reversed" "$fe" 0 1 reversed \
  "plan.reason=cluster nata (the initiator) is behind a NAT: the target's helper cannot connect back to it → reversed cannot work*"
only_is "nata -> fw traversing: fw1 cannot intercept" "unavailable technique=traversing" "$fe" 0 2 traversing \
  "plan.reason=the helper of node fw1 cannot intercept (no CAP_NET_ADMIN/CAP_NET_RAW) → traversing cannot work*"
only_is "sym -> open traversing: open is no firewall" "unavailable technique=traversing" "$fsym" 3 1 traversing \
  "plan.reason=cluster open is open*"
only_is "nata -> sym holepunch: symmetric NAT" "unavailable technique=holepunch" "$fe" 0 3 holepunch \
  "plan.reason=site sym: mapping varies by destination (symmetric NAT) → hole punching cannot work*"
only_is "nata -> open holepunch through the reflector" "ok technique=holepunch" "$fe" 0 1 holepunch \
  plan.address=127.0.0.1 plan.port=17794
hp_token=$(field plan.token)
only_is "sym -> nata proxy" "ok technique=proxy" "$fsym" 3 0 proxy plan.address=127.0.0.1 \
  plan.port=17790
only_is "nata -> nata reversed: inside a cluster only direct" "unavailable technique=reversed" "$fe" 0 4 reversed \
  "plan.reason=*only direct is used inside a cluster*"
only_is "open -> nata reversed" "ok technique=reversed" "$fo" 1 0 reversed "plan.token=?*"
expect_ok "nata's queue: the orders of the only plans" "$fe" poll epoch="$epoch3" ackSeq=0 waitSeconds=0
has_item command kind=connect-back job=p rank=0 node=nata1 peerRank=1 address=203.0.113.21 port=20001 &&
  has_item command kind=proxy-connect job=p rank=0 node=nata1 peerRank=3 address=127.0.0.1 port=17790 &&
  pass "only plans queue their orders (connect-back, proxy-connect)" || fail "orders: $out"
expect_fault "only with an unknown technique" invalid "$fe" lookup job=p secret=s fromRank=0 toRank=1 only=warp
# The outcome memory is ignored: holepunch failed between nata and open.
expect_ok "report: holepunch failed nata -> open" "$fe" report job=p secret=s fromRank=0 toRank=1 technique=holepunch ok=0 setupMs=900
expect_ok "lookup nata -> open, direct tried, after the failure" "$fe" lookup job=p secret=s fromRank=0 toRank=1 tried=direct
out_has plan.technique=proxy && [[ $(field plan.reason) == *"holepunch failed recently"* ]] &&
  pass "a normal lookup skips the remembered failure" || fail "memory: $out"
only_is "nata -> open holepunch although it failed recently" "ok technique=holepunch" "$fe" 0 1 holepunch \
  "plan.reason=*holepunch asked for alone*"
expect_ok "report: direct worked nata -> open" "$fe" report job=p secret=s fromRank=0 toRank=1 technique=direct ok=1 setupMs=3


# A PUNCH at the reflector from a local port kept as is: counted for nata.
/usr/bin/python3 - "$hp_token" >"$work/punch.out" 2>&1 <<'PY'
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.settimeout(10)
s.connect(("127.0.0.1", 17794))
s.sendall(("PUNCH %s 127.0.0.1 %d\n" % (sys.argv[1], port)).encode())
print(s.recv(300).decode().strip())
PY
grep -q "^FAIL" "$work/punch.out" && pass "a lone PUNCH is answered FAIL after the pair wait" ||
  fail "punch: $(cat "$work/punch.out")"

# --- the reflector in its own process, holding neither the TLS key nor the proxy key
refl_pid=$(pgrep -P "$probed_pid" -x qcg-reflector)
if [ -n "$refl_pid" ] && [ "$(wc -w <<<"$refl_pid")" -eq 1 ]; then
  pass "the reflector runs in a child process named qcg-reflector ($refl_pid)"
else
  fail "no single qcg-reflector child of the broker: '$refl_pid'"
fi
refl_files=$(for f in /proc/"$refl_pid"/fd/*; do readlink "$f"; done | grep '^/' |
  grep -v -x -e /dev/null -e "$probed_log")
[ -n "$refl_pid" ] && [ -z "$refl_files" ] &&
  pass "its descriptors: no file but its log and /dev/null" || fail "the reflector holds: $refl_files"
status_of() { sed -n "s/^$2:[[:space:]]*//p" "/proc/$1/status" | tr -s ' \t' ' '; }
[ "$(status_of "$refl_pid" CapEff)" = 0000000000000000 ] &&
  [ "$(status_of "$refl_pid" CapBnd)" = 0000000000000000 ] &&
  [ "$(status_of "$refl_pid" NoNewPrivs)" = 1 ] &&
  pass "no capability, not even in its bounding set; no new privileges" ||
  fail "the reflector's capabilities: $(grep -E '^(Cap|NoNew)' "/proc/$refl_pid/status" | tr '\n' ' ')"
if [ $root = yes ]; then
  [ -n "$refl_uid" ] && [ "$(status_of "$refl_pid" Uid)" = "$refl_uid $refl_uid $refl_uid $refl_uid" ] &&
    [ "$(status_of "$refl_pid" Gid | cut -d' ' -f1)" = "$(id -g qcg-reflector)" ] &&
    pass "by default it runs as the user qcg-reflector (uid $refl_uid), not the broker's" ||
    fail "the reflector's uids: $(status_of "$refl_pid" Uid) (qcg-reflector: '$refl_uid')"
  # The keys' bytes in memory: found in the broker (the search works), never in the child.
  tls_key=$(openssl pkey -in "$ca/broker-broker.pem" -noout -text 2>/dev/null |
    awk '/priv:/ { f = 1; next } /pub:/ { f = 0 } f' | tr -d ' :\n')
  tls_rev=$(fold -w2 <<<"$tls_key" | tac | tr -d '\n')
  proxy_key=$(head -c 64 "$work/proxy.key")
  memscan() { # PID HEX... : the indexes of the byte strings found in its memory
    /usr/bin/python3 - "$@" <<'PY'
import re, sys
pid, needles = sys.argv[1], [bytes.fromhex(h) for h in sys.argv[2:]]
found, chunk, tail = set(), 1 << 24, 64
with open("/proc/%s/maps" % pid) as maps, open("/proc/%s/mem" % pid, "rb", 0) as mem:
    for line in maps:
        lo, hi, perm = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+)", line).groups()
        lo, hi = int(lo, 16), int(hi, 16)
        # Sanitizer shadow and reserved ranges are huge and mostly unbacked: skip them.
        if perm[0] != "r" or hi - lo > (1 << 30) or "[vvar" in line or "[vsyscall" in line:
            continue
        for at in range(lo, hi, chunk):
            try:
                mem.seek(max(lo, at - tail))
                data = mem.read(min(hi, at + chunk) - max(lo, at - tail))
            except (OSError, ValueError, OverflowError):
                break
            found.update(i for i, n in enumerate(needles) if n in data)
print(" ".join(str(i) for i in sorted(found)))
PY
  }
  in_broker=$(memscan "$probed_pid" "$tls_key" "$tls_rev" "$proxy_key")
  in_child=$(memscan "$refl_pid" "$tls_key" "$tls_rev" "$proxy_key")
  [[ $in_broker == *2* && ( $in_broker == *0* || $in_broker == *1* ) && -z $in_child ]] &&
    pass "the TLS private key and the proxy key are in the broker's memory ($in_broker), not in the reflector's" ||
    fail "keys in memory: broker '$in_broker', reflector '$in_child' (0/1 TLS key, 2 proxy key)"
  # As the shipped unit runs it: another uid (here daemon), CAP_SETUID and
  # CAP_SETGID as ambient capabilities, no_new_privs.  Its reflector becomes
  # qcg-reflector; without the two capabilities the broker refuses to start.
  unit=$work/unit
  mkdir -p "$unit" && cp "$ca/ca.crt" "$ca/broker-broker.pem" "$unit/" &&
    chmod 755 "$work" "$unit" && chmod 644 "$unit"/*
  unit_args=(--listen 127.0.0.1 --port 17720 --ca "$unit/ca.crt" --cert "$unit/broker-broker.pem"
    --reflector 127.0.0.1:17796)
  setpriv --reuid=daemon --regid=daemon --clear-groups --inh-caps=+setuid,+setgid \
    --ambient-caps=+setuid,+setgid --bounding-set=-all,+setuid,+setgid --no-new-privs \
    "$broker_bin" "${unit_args[@]}" 2>"$work/unit.log" &
  unit_pid=$!
  if wait_log "$work/unit.log" "hole punching available" "$unit_pid"; then
    unit_refl=$(pgrep -P "$unit_pid" -x qcg-reflector)
    [ -n "$unit_refl" ] && [ "$(status_of "$unit_refl" Uid)" = "$refl_uid $refl_uid $refl_uid $refl_uid" ] &&
      [ "$(status_of "$unit_refl" CapEff)" = 0000000000000000 ] &&
      pass "a broker of uid $(id -u daemon) with CAP_SETUID+CAP_SETGID runs its reflector as qcg-reflector" ||
      fail "the unit-like broker's reflector: '$unit_refl', $(status_of "$unit_refl" Uid)"
  else
    fail "the unit-like broker did not start: $(tail -2 "$work/unit.log")"
  fi
  kill "$unit_pid" 2>/dev/null
  wait "$unit_pid" 2>/dev/null
  err=$(timeout 20 setpriv --reuid=daemon --regid=daemon --clear-groups --no-new-privs \
    "$broker_bin" "${unit_args[@]}" 2>&1 >/dev/null)
  [ $? -eq 2 ] && [ "$(wc -l <<<"$err")" -eq 1 ] && [[ $err == *"without CAP_SETUID and CAP_SETGID"* ]] &&
    pass "without them it refuses to start: $err" || fail "a broker of uid daemon without capabilities: $err"
fi
# Killed: the broker says so, serves lookups on, and a new child serves the port.
kill -KILL "$refl_pid"
wait_log "$probed_log" "reflector process $refl_pid was killed by signal 9 \(Killed\): hole punching is not planned" \
  "$probed_pid" && pass "the reflector's death is logged" ||
  fail "no log line for the reflector's death: $(grep "reflector process" "$probed_log" | tail -3)"
expect_ok "the broker serves lookups with its reflector dead" "$fe" lookup job=p secret=s fromRank=0 toRank=1 tried=direct
wait_log "$probed_log" "serves port 17794: hole punching is planned again" "$probed_pid" &&
  pass "a new reflector process serves port 17794" || fail "no new reflector process"
new_refl=$(pgrep -P "$probed_pid" -x qcg-reflector)
[ -n "$new_refl" ] && [ "$new_refl" != "$refl_pid" ] && pass "the new one is process $new_refl" ||
  fail "reflector processes after the restart: '$new_refl'"
only_is "nata -> open holepunch again with the new reflector" "ok technique=holepunch" "$fe" 0 1 \
  holepunch plan.address=127.0.0.1 plan.port=17794
refl_pid=$new_refl

# siteInfo
expect_ok "siteInfo for frontend nata" "$fe" siteInfo
sites_ok=yes
for c in nata/nat open/open fw/firewalled sym/symnat natb/nat; do
  has_item peer "name=${c%/*}" "kind=${c#*/}" || sites_ok=no
done
[[ $sites_ok == yes && -z $(field broker) ]] &&
  out_has cluster.name=nata cluster.kind=nat frontendSeenFrom=127.0.0.1 reflector.address=127.0.0.1 \
    reflector.port=17794 reflector6.address=::1 reflector6.port=17794 proxy.count=1 \
    proxy.0.address=127.0.0.1 proxy.0.port=17790 &&
  pass "siteInfo: the cluster, seen from 127.0.0.1, the reflector in both families, the proxy, every cluster" ||
  fail "siteInfo: $out"
expect_fault "siteInfo from a helper" denied "$helper" siteInfo
URL=https://127.0.0.1:17701/ expect_fault "siteInfo where the caller's cluster is unknown" notfound "$fo" siteInfo

# probe
expect_ok "probe: nata asks for a test endpoint in fw" "$fe" probe cluster=fw seconds=30
pjob=$(field job) psecret=$(field secret)
[[ $pjob =~ ^probe-[0-9a-f]{32}$ && $psecret =~ ^[0-9a-f]{32}$ ]] &&
  out_has rank=1 cluster=fw node=fw1 address=198.51.100.75 seconds=30 &&
  pass "probe: a fresh job, a 32-hex secret, rank 1 on fw1 for 30 s" || fail "probe: $out"
pjob=${pjob:-none} psecret=${psecret:-none}
expect_ok "fw's queue" "$ffw" poll epoch="$epoch3" ackSeq=0 waitSeconds=0
has_item command kind=probe-listen "job=$pjob" rank=1 node=fw1 peerRank=0 address= port=0 \
  "token=$psecret" seconds=30 &&
  pass "probe-listen ordered to fw1 with the job, rank 1, the secret and 30 s" || fail "probe-listen: $out"
grep -q "info .*probe: cluster nata asked for a test endpoint in fw (node fw1, job $pjob, 30 s)" "$probed_log" &&
  pass "the probe is logged at info" || fail "no info line for the probe"
expect_fault "probe for 0 s" invalid "$fe" probe cluster=fw seconds=0
expect_fault "probe for 121 s" invalid "$fe" probe cluster=fw seconds=121
expect_fault "probe of an unknown cluster" notfound "$fe" probe cluster=nosuch seconds=10
expect_fault "probe of a cluster without nodes" notfound "$fe" probe cluster=natb seconds=10
expect_fault "probe with a bad cluster name" invalid "$fe" probe cluster="a/b" seconds=10
expect_fault "probe from a helper" denied "$helper" probe cluster=fw seconds=10
for i in 2 3 4 5 6 7 8; do call "$fe" probe cluster=open seconds=10; done
[[ $(field job) == probe-* ]] && out_has cluster=open node=open1 && pass "eight live probes for nata" || fail "probes: $out"
expect_fault "the ninth live probe of nata" retry "$fe" probe cluster=open seconds=10
expect_ok "another cluster may still probe" "$fo" probe cluster=nata seconds=10

# observed
expect_ok "nata observed as declared" "$fe" observed cluster=nata node=nata1 kind=nat publicAddress=203.0.113.30 portPreserving=1 mapping=endpoint-independent inbound=dropped
expect_fault "nata reporting for open" denied "$fe" observed cluster=open node=open1 kind=open publicAddress=203.0.113.21 portPreserving=1 mapping=none inbound=open
expect_fault "a bad mapping" invalid "$fe" observed cluster=nata node=nata1 kind=nat publicAddress=203.0.113.30 portPreserving=1 mapping=sideways inbound=dropped
expect_fault "a bad kind" invalid "$fe" observed cluster=nata node=nata1 kind=wormhole portPreserving=1 mapping=none inbound=dropped
expect_fault "a public address that is not one" invalid "$fe" observed cluster=nata node=nata1 kind=nat publicAddress=203.0.113.300 portPreserving=1 mapping=none inbound=dropped
expect_fault "portPreserving 2" invalid "$fe" observed cluster=nata node=nata1 kind=nat publicAddress=203.0.113.30 portPreserving=2 mapping=none inbound=dropped
expect_ok "sym re-declares itself nat" "$fsym" registerCluster name=sym kind=nat publicAddress=203.0.113.98 nodeRange=198.18.5.0/24
expect_ok "sym1 observes symnat" "$fsym" observed cluster=sym node=sym1 kind=symnat publicAddress=203.0.113.98 portPreserving=0 mapping=endpoint-dependent inbound=dropped
grep -q "warn .*misconfiguration: cluster sym declares nat but node sym1 observed symnat (mapping varies by destination)" "$probed_log" &&
  pass "the mismatch is logged as a warning" || fail "no warning: $(grep misconfiguration "$probed_log")"
grep -q "misconfiguration: cluster nata" "$probed_log" && fail "nata warned about" || pass "no warning for nata"

# grid
expect_ok "grid for a frontend" "$fe" grid
out_has cluster.count=5 outcome.count=2 &&
  has_item cluster declared.name=sym nodes=1 observed.kind=symnat &&
  has_item cluster declared.name=nata nodes=1 observed.kind=nat &&
  has_item cluster declared.name=open nodes=1 observed.kind= &&
  pass "grid: five clusters, nodes, observations, two outcomes" || fail "grid: $out"
expect_fault "grid for a helper" denied "$helper" grid
"$broker_bin" --config "$work/probed.conf" --grid --url "$URL" --ca "$ca/ca.crt" \
  --cert "$ca/broker-broker.pem" >"$work/grid.txt" 2>&1
if grep -Eq '^sym +nat .*symnat .*MISMATCH$' "$work/grid.txt" &&
  grep -Eq '^open +open .*not probed$' "$work/grid.txt" && ! grep -Eq '^nata .*MISMATCH' "$work/grid.txt" &&
  grep -Eq '^nata .*direct 3ms, x holepunch' "$work/grid.txt" &&
  grep -q "reflector: nata punched 1 time, port kept 1, changed 0" "$work/grid.txt"; then
  pass "--grid: clusters with MISMATCH and 'not probed', the technique matrix, the punches"
  sed "s/^/    /" "$work/grid.txt"
else
  fail "--grid:"; cat "$work/grid.txt"
fi
"$broker_bin" --config "$work/probed.conf" --grid --json --url "$URL" --ca "$ca/ca.crt" \
  --cert "$ca/broker-broker.pem" >"$work/grid.json" 2>&1
if /usr/bin/python3 - "$work/grid.json" <<'PY'; then
import json, sys
g = json.load(open(sys.argv[1]))
c = {x["name"]: x for x in g["clusters"]}
assert set(c) == {"nata", "open", "fw", "sym", "natb"}, c
assert c["sym"]["declared"]["kind"] == "nat" and c["sym"]["observed"]["kind"] == "symnat", c["sym"]
assert c["sym"]["mismatch"] is True and c["nata"]["mismatch"] is False, c
assert c["nata"]["observed"]["port_preserving"] is True and c["nata"]["observed"]["node"] == "nata1"
assert c["open"]["observed"] is None and c["natb"]["nodes"] == 0 and c["fw"]["nodes"] == 1
assert c["fw"]["declared"]["public_addresses"] == ["198.51.100.75"], c["fw"]
assert c["fw"]["declared"]["open_ports"] is None, c["fw"]
assert c["nata"]["punches"] == {"port_kept": 1, "port_changed": 0}, c["nata"]["punches"]
o = {(x["from"], x["to"], x["technique"]): x for x in g["outcomes"]}
hp = o[("nata", "open", "holepunch")]
assert hp["ok"] == 0 and hp["failed"] == 1 and hp["last_ok"] is False and hp["age_s"] >= 0, hp
d = o[("nata", "open", "direct")]
assert d["ok"] == 1 and d["last_ok"] is True and d["last_setup_ms"] == 3, d
PY
  pass "--grid --json parses and says the same"
else
  fail "--grid --json: $(cat "$work/grid.json")"
fi
# --grid --html: the same picture as a page, rendered by headless Chromium as
# an admin's browser renders it.
"$broker_bin" --config "$work/probed.conf" --html "$work/grid.html" >"$work/html.err" 2>&1
[ $? = 2 ] && grep -qx "qcg-broker: --html goes with --grid, without --json" "$work/html.err" &&
  pass "--html without --grid: exit 2, one line" || fail "--html alone: $(cat "$work/html.err")"
"$broker_bin" --config "$work/probed.conf" --grid --html "$work/grid.html" --url "$URL" \
  --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" >"$work/html.out" 2>&1 &&
  grep -qx "qcg-broker: the grid's picture (5 clusters) is in $work/grid.html" "$work/html.out" &&
  pass "--grid --html writes the page and says so" || fail "--grid --html: $(cat "$work/html.out")"
if /usr/bin/python3 "$(dirname "$0")/../lib/chromium_page.py" "$work/grid.html" >"$work/page.json" \
  2>"$work/page.err" && /usr/bin/python3 - "$work/page.json" <<'PY'; then
import json, sys
p = json.load(open(sys.argv[1]))
assert p["errors"] == [], p["errors"]
c = {x["name"]: x for x in p["clusters"]}
assert set(c) == {"nata", "open", "fw", "sym", "natb"}, c
for x in c.values():
    assert x["width"] > 20 and x["height"] > 20 and x["x"] >= 0 and x["y"] >= 0, x
    assert x["x"] + x["width"] <= p["width"] and x["y"] + x["height"] <= p["height"], x
assert c["fw"]["kind"] == "firewalled" and c["sym"]["kind"] == "nat", c
assert "(seen symnat)" in c["sym"]["text"] and "seen" not in c["nata"]["text"], c
pairs = {(x["from"], x["to"]): x for x in p["pairs"]}
assert pairs[("nata", "open")]["technique"] == "direct", pairs
assert pairs[("nata", "open")]["label"] == "direct 3 ms 50%", pairs
cells = {(x["from"], x["to"]): x["text"] for x in p["cells"]}
assert set(cells) == set(pairs), (cells, pairs)
t = cells[("nata", "open")]
assert "direct 3 ms" in t and "1/2 ok (50%)" in t and "\u2717 holepunch (1 failed)" in t, t
assert sorted(r[0] for r in p["rows"]) == sorted(c), p["rows"]
PY
  pass "--grid --html in Chromium: no console error, the 5 clusters on the page, nata -> open direct 3 ms 50%"
else
  fail "--grid --html in Chromium: $(cat "$work/page.err" "$work/page.json")"
fi

# Poisoned memory: a report counts only for a plan this broker issued, and one
# other job's failures do not steer job p's plans.
expect_fault "report for a plan never issued" denied "$fe" report job=p secret=s fromRank=0 toRank=1 technique=traversing ok=0 setupMs=900
grep -q "report from frontend .* refused (qcg:denied): this broker has no open traversing plan for job p towards rank 1 from cluster nata" "$probed_log" &&
  pass "the refused report is logged with its reason" || fail "no log line for the refused report"
expect_ok "evil job: rank 0 in nata" "$fe" publish job=evil secret=e rank=0 node=nata1 address=198.18.3.11 port=20010
expect_ok "evil job: rank 1 in open" "$fo" publish job=evil secret=e rank=1 node=open1 address=203.0.113.21 port=20010
expect_ok "evil job: a plan nata -> open" "$fe" lookup job=evil secret=e fromRank=0 toRank=1
out_has plan.technique=direct || fail "evil job's first plan: $out"
expect_ok "evil job reports direct failed" "$fe" report job=evil secret=e fromRank=0 toRank=1 technique=direct ok=0 setupMs=900
expect_ok "evil job: its next plan" "$fe" lookup job=evil secret=e fromRank=0 toRank=1
! out_has plan.technique=direct && [[ $(field plan.reason) == *"direct failed recently"* ]] &&
  pass "the failing job skips direct itself" || fail "evil job's second plan: $out"
expect_ok "job p: a plan nata -> open after evil's report" "$fe" lookup job=p secret=s fromRank=0 toRank=1
out_has plan.technique=direct && pass "one other job's failure does not steer job p" ||
  fail "job p was steered by another job's report: $out"
# Reports in one call, as a frontend sends them on: each checked as a
# report is, the refused ones logged, not faulted.
expect_ok "reports: a planned one, one never planned, one malformed" "$fe" reports \
  job=p secret=s fromRank=0 toRank=1 technique=direct ok=1 setupMs=4 \
  job=p secret=s fromRank=0 toRank=1 technique=traversing ok=0 setupMs=900 \
  job=p secret=s fromRank=0 toRank=1 technique=warp ok=0 setupMs=1
out_has accepted=1 && pass "reports: 1 of 3 recorded (accepted=1)" || fail "reports: $out"
grep -q "a report of frontend .* refused (qcg:denied): this broker has no open traversing plan" "$probed_log" &&
  pass "a refused report of a batch is logged with its reason" ||
  fail "no log line for the batch's refused report"
many=()
for ((i = 0; i < 257; i++)); do
  many+=(job=p secret=s fromRank=0 toRank=1 technique=direct ok=1 setupMs=4)
done
expect_fault "reports: 257 in one call" invalid "$fe" reports "${many[@]}"
# A report that comes after its target left (reports are batched at the
# helper and at the frontend; a withdraw from another node can overtake one)
# still counts for the cluster pair.
expect_ok "job p: rank 9 in open" "$fo" publish job=p secret=s rank=9 node=open1 address=203.0.113.21 port=20009
expect_ok "job p: a plan nata -> rank 9" "$fe" lookup job=p secret=s fromRank=0 toRank=9
expect_ok "job p: rank 9 leaves" "$fo" withdraw job=p secret=s rank=9 node=open1
call "$fe" stats
ok_before=$(field counter.reports_ok)
expect_ok "report for rank 9, after it left" "$fe" report job=p secret=s fromRank=0 toRank=9 technique=direct ok=1 setupMs=3
call "$fe" stats
ok_after=$(field counter.reports_ok)
[[ -n $ok_before && $ok_after -eq $((ok_before + 1)) ]] &&
  pass "a report after its target left is recorded (reports_ok $ok_before -> $ok_after)" ||
  fail "a report after its target left: reports_ok $ok_before -> $ok_after"
"$broker_bin" --grid --port 17798 --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" >/dev/null 2>"$work/grid.err"
[ $? -eq 1 ] && [ "$(wc -l <"$work/grid.err")" -eq 1 ] &&
  pass "--grid without a broker: exit 1, one line ($(cat "$work/grid.err"))" ||
  fail "--grid to nothing: $(cat "$work/grid.err")"
expect_ok "probed broker: stats" "$fe" stats
out_has counter.probes_started=9 counter.observations=2 &&
  pass "stats count probes and observations" || fail "stats: $out"
"$broker_bin" --config "$work/probed.conf" --grid --json --url "$URL" --ca "$ca/ca.crt" \
  --cert "$ca/broker-broker.pem" >"$work/grid1.json" 2>&1
kill -TERM "$probed_pid"
wait "$probed_pid" && pass "probed broker: SIGTERM, exit 0" || fail "probed broker: exit $?"
probed_pid=
if [ -n "$refl_pid" ] && ! kill -0 "$refl_pid" 2>/dev/null &&
  grep -q "reflector process $refl_pid exited with status 0" "$probed_log"; then
  pass "its reflector process ended with it (status 0)"
else
  fail "reflector process $refl_pid after the broker's stop: $(grep "reflector process $refl_pid" "$probed_log" | tail -1)"
fi

# What it learned survives a restart (state-file): the same matrix for nata.
if [ "$(stat -c %a "$work/broker.state")" = 600 ] && grep -q '^pair nata open holepunch 0 1 0 ' "$work/broker.state"; then
  pass "state file written at the stop, mode 0600, with nata -> open"
else
  fail "state file: $(ls -l "$work/broker.state") $(cat "$work/broker.state")"
fi
start_broker "$probed_log.2" probed_pid 17703 --config "$work/probed.conf"
grep -q "state file $work/broker.state: 1 cluster pairs' outcomes and 2 clusters' observations restored" "$probed_log.2" &&
  pass "restarted broker: restored from its state file" || fail "restart: $(grep 'state file' "$probed_log.2")"
expect_ok "restarted broker: register nata" "$fe" registerCluster name=nata kind=nat publicAddress=203.0.113.30 nodeRange=198.18.3.0/24
expect_ok "restarted broker: register open" "$fo" registerCluster name=open kind=open publicAddress=203.0.113.20 nodeRange=203.0.113.20/31
"$broker_bin" --config "$work/probed.conf" --grid --json --url "$URL" --ca "$ca/ca.crt" \
  --cert "$ca/broker-broker.pem" >"$work/grid2.json" 2>&1
# The outcomes as --grid --json gives them, but for their age.
outcomes() { /usr/bin/python3 -c 'import json,sys
for o in sorted(json.load(open(sys.argv[1]))["outcomes"], key=lambda o: (o["from"], o["to"], o["technique"])):
    o.pop("age_s", None); print(json.dumps(o, sort_keys=True))' "$1"; }
before=$(outcomes "$work/grid1.json") after=$(outcomes "$work/grid2.json")
[[ -n $before && $before == "$after" && $before == *holepunch* ]] &&
  pass "restarted broker: --grid --json has the outcomes the first one learned" ||
  fail "--grid after restart: before '$before', after '$after'"
# ... and what the probes observed (issue 36: "not probed" after a restart).
observed() { /usr/bin/python3 -c 'import json,sys
for c in json.load(open(sys.argv[1]))["clusters"]:
    o = c["observed"] if c["name"] == "nata" else None
    if o: print(json.dumps({k: v for k, v in o.items() if not k.startswith("age")}, sort_keys=True))' "$1"; }
before=$(observed "$work/grid1.json") after=$(observed "$work/grid2.json")
[[ $before == *nata1* && $before == "$after" ]] &&
  pass "restarted broker: --grid --json shows nata observed as before, not 'not probed'" ||
  fail "--grid after restart: nata observed before '$before', after '$after'"
"$broker_bin" --config "$work/probed.conf" --grid --url "$URL" --ca "$ca/ca.crt" \
  --cert "$ca/broker-broker.pem" >"$work/grid2.txt" 2>&1
grep -Eq '^nata +nat .*nat from 203\.0\.113\.30, mapping endpoint-independent, inbound dropped, by nata1 ' \
  "$work/grid2.txt" && grep -Eq '^open +open .*not probed$' "$work/grid2.txt" &&
  pass "restarted broker: --grid shows nata's observation, open still 'not probed'" ||
  fail "--grid after restart: $(cat "$work/grid2.txt")"
expect_ok "restarted broker: node nata1" "$fe" registerNode name=nata1 address=198.18.3.11 portLow=20000 portHigh=20999 canIntercept=1
expect_ok "restarted broker: node open1" "$fo" registerNode name=open1 address=203.0.113.21 portLow=20000 portHigh=20999 canIntercept=1
expect_ok "restarted broker: publish nata" "$fe" publish job=p secret=s rank=0 node=nata1 address=198.18.3.11 port=20001
expect_ok "restarted broker: publish open" "$fo" publish job=p secret=s rank=1 node=open1 address=203.0.113.21 port=20001
expect_ok "restarted broker: lookup nata -> open, direct tried" "$fe" lookup job=p secret=s fromRank=0 toRank=1 tried=direct
out_has plan.technique=proxy && [[ $(field plan.reason) == *"holepunch failed recently"* ]] &&
  pass "restarted broker: job p still skips the holepunch it saw fail" ||
  fail "restarted broker forgot job p's failure: $out"
kill -TERM "$probed_pid"
wait "$probed_pid" || fail "restarted broker: exit $?"
probed_pid=
# A damaged line is skipped and said; a file that is not a state file stops the start.
{ cat "$work/broker.state"; printf 'pair nata open direct x 1 0 5 0\nwitness sym open proxy j n 9\n'; } >"$work/damaged.state"
start_broker "$probed_log.3" probed_pid 17703 --config "$work/probed.conf" --state-file "$work/damaged.state"
grep -q "2 lines skipped (first: line [0-9]*): not understood" "$probed_log.3" &&
  grep -q "1 cluster pairs' outcomes and 2 clusters' observations restored" "$probed_log.3" &&
  pass "damaged state file: 2 lines skipped and said, the rest restored" ||
  fail "damaged state file: $(grep 'state file' "$probed_log.3")"
kill -TERM "$probed_pid"
wait "$probed_pid"
probed_pid=
printf 'not a state file\n' >"$work/wrong.state"
misconf "a state file that is not one" "is not \"qcg-broker-state 1\"" --log-level error --port 17703 \
  --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" --state-file "$work/wrong.state"
misconf "a state file in no directory" "cannot create" --log-level error --port 17703 \
  --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" --state-file /nonexistent/dir/broker.state
unset URL

# --- SIGTERM: clean stop within a few seconds, exit 0, even with a poll pending
# Counted before the poll starts: a poll quicker than this grep was counted
# in its own baseline, and the wait below then timed out.
polls=$(grep -c "poll from frontend nata: ack 0, waiting up to 20 s" "$log")
"$call_bin" --url "$url" --ca "$ca/ca.crt" --cert "$fe" poll epoch="$epoch" ackSeq=0 waitSeconds=20 >/dev/null 2>&1 &
poll_pid=$!
wait_log "$log" "poll from frontend nata: ack 0, waiting up to 20 s" "$broker_pid" $((polls + 1)) ||
  fail "the poll did not reach the broker"
for pid in $broker_pid $small_pid; do kill -TERM "$pid"; done
stopped=no
for _ in $(seq 100); do
  if ! kill -0 "$broker_pid" 2>/dev/null && ! kill -0 "$small_pid" 2>/dev/null; then stopped=yes; break; fi
  sleep 0.1
done
wait "$broker_pid"; status=$?
wait "$small_pid"; small_status=$?
broker_pid="" small_pid=""
wait "$poll_pid" 2>/dev/null
if [ $stopped = yes ] && [ $status -eq 0 ] && [ $small_status -eq 0 ] && grep -q stopping "$log"; then
  pass "SIGTERM: stopped within 10 s, exit 0, \"stopping\" logged"
else
  fail "SIGTERM: stopped=$stopped exit=$status/$small_status"; tail -5 "$log"
fi
if grep -Eq "ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:" "$log" "$small_log"; then
  fail "sanitizer report in the broker log"; grep -A20 Sanitizer "$log" | head -40
fi

if [ $failed -ne 0 ]; then
  echo "broker-service: $failed failure(s); broker log:"
  tail -40 "$log"
  exit 1
fi
echo "broker-service: all checks passed"
