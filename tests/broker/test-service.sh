#!/usr/bin/env bash
# broker-service: the real qcg-broker on 127.0.0.1 with a throw-away CA, called
# by broker-call (a C client over qcgcommon), curl and python3-zeep.
#
#   test-service.sh QCG-BROKER BROKER-CALL QCG-CERTS
#
#   broker-call / curl / zeep --(mutual TLS, 127.0.0.1:17700)--> qcg-broker
#   second broker on 17701 (--max-contacts 2); ports 17700-17799 are ours.
set -u
broker_bin=$1 call_bin=$2 certs_bin=$3
port=17700
url=https://127.0.0.1:$port/
work=$(mktemp -d /tmp/broker-service.XXXXXX)
fails=0 broker_pid= small_pid= proxied_pid=

cleanup() {
  for pid in $broker_pid $small_pid $proxied_pid; do kill -9 "$pid" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok: $*"; }

# Throw-away CA: the grid's, and a foreign one whose certificates must be refused.
ca=$work/ca
"$certs_bin" --dir "$ca" init >/dev/null
"$certs_bin" --dir "$ca" issue broker --san 127.0.0.1 >/dev/null
"$certs_bin" --dir "$ca" issue frontend nata --san 127.0.0.1 >/dev/null
"$certs_bin" --dir "$ca" issue frontend open --san 127.0.0.1 >/dev/null
"$certs_bin" --dir "$ca" issue helper nata/nata1 >/dev/null 2>&1
"$certs_bin" --dir "$work/foreign" init >/dev/null
"$certs_bin" --dir "$work/foreign" issue frontend nata --san 127.0.0.1 >/dev/null

# Waits (bounded) for a line matching $2 in log $1 while process $3 lives.
wait_log() {
  for _ in $(seq 200); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# Waits (bounded) until $2 matches at least $3 lines of log $1 while process $4 lives.
wait_count() {
  for _ in $(seq 200); do
    [ "$(grep -c -- "$2" "$1" 2>/dev/null)" -ge "$3" ] && return 0
    kill -0 "$4" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

start_broker() { # log pid-var port extra-args...
  local log=$1 var=$2 p=$3
  shift 3
  "$broker_bin" --listen 127.0.0.1 --port "$p" --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" \
    --log-level debug "$@" 2>"$log" &
  printf -v "$var" %s $!
  wait_log "$log" "listening" "${!var}" || { echo "broker did not start:"; cat "$log"; exit 1; }
}

# call CERT-NAME ARGS... : prints the reply; $rc is the exit status.
call() {
  local cert=$1
  shift
  out=$("$call_bin" --url "${URL:-$url}" --ca "$ca/ca.crt" --cert "$cert" "$@" 2>&1)
  rc=$?
}
fe=$ca/frontend-nata.pem fo=$ca/frontend-open.pem helper=$ca/helper-nata-nata1.pem

expect_ok() { # description cert args...
  local what=$1
  shift
  call "$@"
  if [ $rc -eq 0 ]; then pass "$what"; else fail "$what: $out"; fi
}
expect_fault() { # description subcode cert args...
  local what=$1 sub=$2
  shift 2
  call "$@"
  if [ $rc -eq 3 ] && [[ $out == "fault $sub:"* ]]; then pass "$what ($out)"
  else fail "$what: expected fault $sub, got rc=$rc: $out"; fi
}

log=$work/broker.log
start_broker "$log" broker_pid $port
broker_pid=$broker_pid

# --- misconfiguration: one line on stderr naming the problem, exit 2
misconf() { # description expected-text args...
  local what=$1 text=$2
  shift 2
  local err
  err=$("$broker_bin" "$@" 2>&1 >/dev/null)
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

# --- a frontend registers, publishes, looks up
expect_ok "frontend registers its cluster" "$fe" register-cluster nata nat 0 0 203.0.113.30
epoch=$(sed -n 's/.*epoch=\([0-9]*\).*/\1/p' <<<"$out")
grep -q "cluster nata registered" "$log" && pass "registration logged at info" ||
  fail "no info line for the registration"
expect_ok "frontend registers a node" "$fe" register-node nata1 198.18.3.11 20000 20999 1
expect_ok "publish rank 0 (cluster filled from the caller)" "$fe" \
  publish job1 s3cret 0 - nata1 198.18.3.11 20001
expect_ok "publish rank 1" "$fe" publish job1 s3cret 1 nata nata1 198.18.3.11 20002
expect_ok "re-publishing the same contact is idempotent" "$fe" \
  publish job1 s3cret 1 nata nata1 198.18.3.11 20002
expect_fault "the same rank elsewhere is busy" busy "$fe" \
  publish job1 s3cret 1 nata nata1 198.18.3.11 20003
expect_ok "lookup within the cluster" "$fe" lookup job1 s3cret 0 1
[[ $out == *"status=ok technique=direct cluster=nata node=nata1 address=198.18.3.11 port=20002 cacheable=1"* ]] &&
  pass "plan: direct to the private address, cacheable" || fail "plan: $out"
expect_ok "lookup of an unpublished rank" "$fe" lookup job1 s3cret 0 9
[[ $out == *"status=notfound"* ]] && pass "plan: notfound (not a fault)" || fail "plan: $out"

# Another site: open -> nata needs reversed (unavailable), nata -> open is direct.
expect_ok "second frontend registers" "$fo" register-cluster open open 0 0 203.0.113.20
expect_ok "second frontend's node" "$fo" register-node open1 203.0.113.21 20000 20999 0
expect_ok "publish rank 2 at open" "$fo" publish job1 s3cret 2 open open1 203.0.113.21 20005
expect_ok "lookup nata -> open" "$fe" lookup job1 s3cret 0 2
[[ $out == *"status=ok technique=direct"*"address=203.0.113.21 port=20005"* ]] &&
  pass "plan to an open site: direct" || fail "plan: $out"
expect_ok "lookup open -> nata" "$fo" lookup job1 s3cret 2 0
[[ $out =~ status=ok\ technique=reversed\ .*cacheable=0\ token=([0-9a-f]{32})\ reason=cluster\ open\ is\ open\ and\ cluster\ nata\ is\ not\ reachable.*:\ reversed$ ]] &&
  pass "plan to a NAT site: reversed, a 32-hex token, not cacheable, with a reason" ||
  fail "plan: $out"
rev_token=${BASH_REMATCH[1]:-none}
expect_ok "nata's queue after the reversed plan" "$fe" poll "$epoch" 0 0
[[ $out =~ ^ok\ epoch=$epoch\ commands=1\ [0-9]+:connect-back:job1:0:nata1:2:203.0.113.21:20005:$rev_token$ ]] &&
  pass "connect-back ordered to nata1: rank 0 calls rank 2 at 203.0.113.21:20005 with the token" ||
  fail "connect-back: $out (token $rev_token)"
cb_seq=$(sed -n 's/.* \([0-9]*\):connect-back.*/\1/p' <<<"$out")
expect_ok "acknowledging the connect-back" "$fe" poll "$epoch" "${cb_seq:-0}" 0
expect_ok "lookup open -> nata, reversed tried, no proxy configured" "$fo" lookup job1 s3cret 2 0 reversed
[[ $out == *"status=unavailable technique=proxy"*"cacheable=0 token= reason="*"reversed already tried"*"no proxy configured"* ]] &&
  pass "fallback without a proxy: unavailable, naming proxy" || fail "plan: $out"
expect_ok "lookup nata -> open, direct tried" "$fe" lookup job1 s3cret 0 2 direct
[[ $out == *"status=unavailable technique=proxy"*"direct already tried"* ]] &&
  pass "nothing after direct for a NATed initiator without a proxy" || fail "plan: $out"
expect_fault "lookup with an unknown technique tried" invalid "$fo" lookup job1 s3cret 2 0 reversed,warp

# --- who may do what
expect_fault "helper calling registerCluster" denied "$helper" register-cluster nata nat 0 0
expect_fault "helper calling publish" denied "$helper" publish job1 s3cret 3 nata nata1 198.18.3.11 20004
expect_fault "frontend nata registering cluster open" denied "$fe" register-cluster open open 0 0
expect_fault "frontend nata publishing for cluster open" denied "$fe" \
  publish job1 s3cret 3 open open1 203.0.113.21 20006
expect_fault "frontend open withdrawing nata's contact" denied "$fo" withdraw job1 s3cret 1
expect_fault "lookup from a rank of another cluster" denied "$fo" lookup job1 s3cret 0 1
grep -q "publish from helper nata/nata1 refused (qcg:denied)" "$log" &&
  pass "refusals logged at warn with the caller" || fail "no warn line naming the caller"

# --- secrets, versions, fields
expect_fault "publish with a wrong secret" denied "$fe" publish job1 wrong 3 nata nata1 198.18.3.11 20004
expect_fault "lookup with a wrong secret" denied "$fe" lookup job1 wrong 0 1
expect_fault "withdraw with a wrong secret" denied "$fe" withdraw job1 wrong 1
call "$fe" --version 917 stats
if [ $rc -eq 3 ] && [[ $out == "fault version:"* ]] && grep -qw 917 <<<"$out" && grep -qw 1 <<<"$out"; then
  pass "version mismatch names both versions ($out)"
else
  fail "version mismatch: $out"
fi
expect_fault "negative rank" invalid "$fe" publish job1 s3cret -1 nata nata1 198.18.3.11 20004
expect_fault "port 0" invalid "$fe" publish job1 s3cret 3 nata nata1 198.18.3.11 0
expect_fault "address that is not one" invalid "$fe" register-node nata2 198.18.3.300 20000 20999 0
expect_fault "unknown kind" invalid "$fe" register-cluster nata wormhole 0 0
expect_fault "nine public addresses" invalid "$fe" register-cluster nata nat 0 0 \
  203.0.113.1 203.0.113.2 203.0.113.3 203.0.113.4 203.0.113.5 203.0.113.6 203.0.113.7 203.0.113.8 203.0.113.9
expect_fault "bad job id" invalid "$fe" lookup "job/../x" s3cret 0 1
expect_fault "unregistered node" notfound "$fe" publish job1 s3cret 3 nata nata7 198.18.3.17 20004

# --- TLS: a foreign CA's certificate and no certificate are refused
call "$work/foreign/frontend-nata.pem" stats
[ $rc -eq 4 ] && pass "foreign-CA certificate refused at TLS ($out)" || fail "foreign CA: rc=$rc $out"
wait_count "$log" "TLS handshake failed" 1 "$broker_pid" && pass "the broker logs the refused handshake" ||
  fail "no log line for the refused handshake"
envelope() { # body-xml
  printf '<?xml version="1.0" encoding="UTF-8"?><SOAP-ENV:Envelope xmlns:SOAP-ENV="http://schemas.xmlsoap.org/soap/envelope/" xmlns:qcg="urn:qcg-connect:1"><SOAP-ENV:Body>%s</SOAP-ENV:Body></SOAP-ENV:Envelope>' "$1"
}
stats_xml=$(envelope '<qcg:stats><version>1</version></qcg:stats>')
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
wait_count "$log" "TLS handshake failed" 2 "$broker_pid" ||
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
{ printf '%s' '<?xml version="1.0"?><SOAP-ENV:Envelope xmlns:SOAP-ENV="http://schemas.xmlsoap.org/soap/envelope/" xmlns:qcg="urn:qcg-connect:1"><SOAP-ENV:Body><qcg:lookup><version>1</version><job>'
  cat "$work/big"
  printf '%s' '</job><secret>s</secret><fromRank>0</fromRank><toRank>1</toRank></qcg:lookup></SOAP-ENV:Body></SOAP-ENV:Envelope>'
} >"$work/big.xml"
curl_fe --data-binary @"$work/big.xml" "$url" >"$work/big.out" 2>&1
if grep -q lookupResponse "$work/big.out"; then fail "2 MB body answered"
else pass "2 MB body refused: $(head -c 160 "$work/big.out" | tr -d '\n')"; fi
expect_ok "the broker still serves after a 2 MB body" "$fe" lookup job1 s3cret 0 1

# --- WSDL, and python3-zeep calling stats over mutual TLS
curl_fe "$url?wsdl" >"$work/qcg.wsdl"
grep -q "<definitions" "$work/qcg.wsdl" && grep -q 'operation name="lookup"' "$work/qcg.wsdl" &&
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
r = service.stats(version=1)
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
expect_ok "poll with an old epoch" "$fe" poll 12345 0 5
[ "$out" = "ok epoch=$epoch commands=0" ] && pass "old epoch: the broker's epoch, no commands" ||
  fail "old epoch: $out (want epoch $epoch)"
"$call_bin" --url "$url" --ca "$ca/ca.crt" --cert "$fo" poll "$epoch" 0 10 >"$work/poll.out" 2>&1 &
poll_pid=$!
wait_count "$log" "poll from frontend open: ack 0, waiting up to 10 s" 1 "$broker_pid" ||
  fail "the poll did not reach the broker"
expect_ok "withdraw rank 1" "$fe" withdraw job1 s3cret 1 nata1
wait "$poll_pid"
grep -Eq "^ok epoch=$epoch commands=1 [0-9]+:invalidate:job1:1$" "$work/poll.out" &&
  pass "a pending poll of another cluster receives invalidate(job1, 1)" ||
  fail "poll: $(cat "$work/poll.out")"
seq1=$(sed -n 's/.* \([0-9]*\):invalidate.*/\1/p' "$work/poll.out")
expect_ok "poll acknowledging it" "$fo" poll "$epoch" "$seq1" 0
[ "$out" = "ok epoch=$epoch commands=0" ] && pass "acknowledged commands are gone" || fail "ack: $out"
expect_ok "lookup of the withdrawn rank" "$fe" lookup job1 s3cret 0 1
[[ $out == *"status=notfound"* ]] && pass "withdrawn rank: notfound" || fail "after withdraw: $out"

# --- max-contacts: a broker that holds 2 refuses the third
small_log=$work/small.log
printf '# a config file\nmax-contacts = 2\nlog-level = info\n' >"$work/small.conf"
start_broker "$small_log" small_pid 17701 --config "$work/small.conf"
URL=https://127.0.0.1:17701/
expect_ok "small broker: register" "$fe" register-cluster nata nat 0 0
expect_ok "small broker: node" "$fe" register-node nata1 198.18.3.11 20000 20999 0
expect_ok "small broker: contact 1" "$fe" publish j s 0 - nata1 198.18.3.11 20001
expect_ok "small broker: contact 2" "$fe" publish j s 1 - nata1 198.18.3.11 20002
expect_fault "small broker: contact 3 beyond max-contacts" unavailable "$fe" publish j s 2 - nata1 198.18.3.11 20003
unset URL

# --- proxies: a broker with two, configured in its file
proxied_log=$work/proxied.log
printf 'proxy = p1@127.0.0.1:17790, p2@127.0.0.1:17791\nproxy-key = %s\n' "$work/proxy.key" \
  >"$work/proxied.conf"
start_broker "$proxied_log" proxied_pid 17702 --config "$work/proxied.conf"
URL=https://127.0.0.1:17702/
expect_ok "proxied broker: register nata" "$fe" register-cluster nata nat 0 0
epoch2=$(sed -n 's/.*epoch=\([0-9]*\).*/\1/p' <<<"$out")
expect_ok "proxied broker: register open" "$fo" register-cluster open open 0 0
expect_ok "proxied broker: node nata1" "$fe" register-node nata1 198.18.3.11 20000 20999 0
expect_ok "proxied broker: node open1" "$fo" register-node open1 203.0.113.21 20000 20999 0
expect_ok "proxied broker: publish nata" "$fe" publish j s 0 - nata1 198.18.3.11 20001
expect_ok "proxied broker: publish open" "$fo" publish j s 1 - open1 203.0.113.21 20001
expect_ok "proxied broker: open -> nata, reversed tried" "$fo" lookup j s 1 0 reversed
[[ $out =~ status=ok\ technique=proxy\ cluster=nata\ node=nata1\ address=127.0.0.1\ port=1779[01]\ cacheable=0\ token=([0-9a-f]{84})\ reason=.*reversed\ already\ tried.*proxy$ ]] &&
  pass "fallback: a proxy plan with an 84-hex token, not cacheable" || fail "plan: $out"
px_token=${BASH_REMATCH[1]:-none}
px_port=$(sed -n 's/.* port=\([0-9]*\) .*/\1/p' <<<"$out")
expect_ok "nata's queue at the proxied broker" "$fe" poll "${epoch2:-0}" 0 0
[[ $out =~ [0-9]+:proxy-connect:j:0:nata1:1:127.0.0.1:$px_port:([0-9a-f]{84})$ ]] &&
  pass "proxy-connect ordered to nata1 with the same proxy" || fail "proxy-connect: $out"
tgt_token=${BASH_REMATCH[1]:-none}
# version | pair (16 bytes) | side | ...: the same pair, the other side.
if [ "${px_token:2:32}" = "${tgt_token:2:32}" ] && [ "${px_token:34:2}" = 00 ] &&
  [ "${tgt_token:34:2}" = 01 ]; then
  pass "the two tokens name one pair, initiator side 00 and target side 01"
else
  fail "tokens: $px_token / $tgt_token"
fi
expect_ok "proxied broker: the same lookup again" "$fo" lookup j s 1 0 reversed
[[ $out == *"technique=proxy"* ]] && [[ $out != *"$px_token"* ]] &&
  pass "each proxy plan has a new token" || fail "second plan: $out"
expect_ok "proxied broker: stats" "$fe" stats
[[ $out == *"plans_proxy=2"* ]] && pass "stats count the proxy plans" || fail "stats: $out"
grep -q "proxy p2 at 127.0.0.1 port 17791" "$proxied_log" && pass "the proxies are logged at start" ||
  fail "no log line for the proxies"
grep -q "$px_token" "$proxied_log" && fail "a token in the broker's log" ||
  pass "tokens are not logged"
kill -TERM "$proxied_pid"
wait "$proxied_pid" && pass "proxied broker: SIGTERM, exit 0" || fail "proxied broker: exit $?"
proxied_pid=
unset URL

# --- SIGTERM: clean stop within a few seconds, exit 0, even with a poll pending
"$call_bin" --url "$url" --ca "$ca/ca.crt" --cert "$fe" poll "$epoch" 0 20 >/dev/null 2>&1 &
poll_pid=$!
polls=$(grep -c "poll from frontend nata: ack 0, waiting up to 20 s" "$log")
wait_count "$log" "poll from frontend nata: ack 0, waiting up to 20 s" $((polls + 1)) "$broker_pid" ||
  fail "the poll did not reach the broker"
for pid in $broker_pid $small_pid; do kill -TERM "$pid"; done
stopped=no
for _ in $(seq 100); do
  if ! kill -0 "$broker_pid" 2>/dev/null && ! kill -0 "$small_pid" 2>/dev/null; then stopped=yes; break; fi
  sleep 0.1
done
wait "$broker_pid"; status=$?
wait "$small_pid"; small_status=$?
broker_pid= small_pid=
wait "$poll_pid" 2>/dev/null
if [ $stopped = yes ] && [ $status -eq 0 ] && [ $small_status -eq 0 ] && grep -q stopping "$log"; then
  pass "SIGTERM: stopped within 10 s, exit 0, \"stopping\" logged"
else
  fail "SIGTERM: stopped=$stopped exit=$status/$small_status"; tail -5 "$log"
fi
if grep -Eq "ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:" "$log" "$small_log"; then
  fail "sanitizer report in the broker log"; grep -A20 Sanitizer "$log" | head -40
fi

if [ $fails -ne 0 ]; then
  echo "broker-service: $fails failure(s); broker log:"
  tail -40 "$log"
  exit 1
fi
echo "broker-service: all checks passed"
