#!/usr/bin/env bash
# proxy-relay: the real qcg-proxy on 127.0.0.1 with a throw-away CA and key,
# driven by proxy-client (which mints tokens with the same key).
#
#   test-relay.sh QCG-PROXY PROXY-CLIENT QCG-CERTS
#
#   proxy-client (initiator) --token--> qcg-proxy :18301 <--token-- proxy-client (target)
#   qcg-proxy --stats ------(mutual TLS)--> :18302 (control)
#   curl -------------------(plain HTTP)--> :18303 (metrics)
#   ports 18300-18399 are ours.
set -u
proxy_bin=$1 client_bin=$2 certs_bin=$3
port=18301 cport=18302 skew=60
PROXY_TEST=proxy-relay
# shellcheck source=tests/proxy/lib.sh
. "$(dirname "$0")/lib.sh"
"$certs_bin" --dir "$ca" issue helper nata/nata1 >/dev/null 2>&1

# logged DESCRIPTION LOG PATTERN: the proxy wrote a line matching PATTERN.
logged() {
  if grep -q -- "$3" "$2"; then pass "$1"; else fail "$1: no line matching '$3' in the log"; fi
}

start_proxy() { # log extra-args...
  local log=$1
  shift
  "$proxy_bin" --listen "${listen:-127.0.0.1}" --port $port --control-port $cport --ca "$ca/ca.crt" \
    --cert "$ca/proxy-p1.pem" --key-file "$key" --token-skew $skew --pair-timeout 1 \
    --log-level debug "$@" 2>"$log" &
  proxy_pid=$!
  wait_log "$log" "relaying on" $proxy_pid || { echo "proxy did not start:"; cat "$log"; exit 1; }
}

scenario() { # description scenario [arg]
  local what=$1
  shift
  if out=$(timeout 90 "$client_bin" $port "$key" "$@" 2>&1); then
    pass "$what: $(echo "$out" | tail -1)"
  else
    fail "$what: $out"
  fi
}

# ---- misconfiguration: one line, exit 2 ----
expect_exit2() { # description args...
  local what=$1
  shift
  out=$("$proxy_bin" --listen 127.0.0.1 --port $port --control-port $cport "$@" 2>&1)
  local rc=$?
  if [ $rc -eq 2 ] && [ "$(echo "$out" | wc -l)" -eq 1 ]; then
    pass "$what: $out"
  else
    fail "$what: exit $rc: $out"
  fi
}
base=(--ca "$ca/ca.crt" --cert "$ca/proxy-p1.pem")
expect_exit2 "no key file" "${base[@]}"
expect_exit2 "missing key file" "${base[@]}" --key-file "$work/nope"
cp "$key" "$work/open.key" && chmod 644 "$work/open.key"
expect_exit2 "world-readable key" "${base[@]}" --key-file "$work/open.key"
echo "not hex" >"$work/bad.key" && chmod 600 "$work/bad.key"
expect_exit2 "key not hex" "${base[@]}" --key-file "$work/bad.key"
expect_exit2 "a helper's certificate" --ca "$ca/ca.crt" --cert "$ca/helper-nata-nata1.pem" \
  --key-file "$key"
expect_exit2 "pair-timeout 0" "${base[@]}" --key-file "$key" --pair-timeout 0
expect_exit2 "unknown option" "${base[@]}" --key-file "$key" --no-such-thing 1
printf 'ca = %s\ncert = %s\nkey-file = %s\nmax-pairs = lots\n' "$ca/ca.crt" "$ca/proxy-p1.pem" \
  "$key" >"$work/bad.conf"
expect_exit2 "bad config file" --config "$work/bad.conf"
if "$proxy_bin" --help | grep -q -- "--pair-timeout"; then pass "--help"; else fail "--help"; fi

# ---- a running proxy ----
log=$work/proxy.log
start_proxy "$log" --metrics-listen 127.0.0.1:18303
logged "logs its descriptor limit" "$log" "file descriptors: [0-9]*.*room for"

scenario "32 MiB each way with half-close" relay 32
scenario "data sent right behind the token" early
scenario "replayed token" replay
logged "replay logged with the client's address" "$log" \
  "refused 127.0.0.1:[0-9]*: pair [0-9a-f]*: the initiator's token was already used"
scenario "forged tokens" forged
logged "bad MAC logged" "$log" "refused 127.0.0.1:[0-9]*: bad MAC token"
logged "bad magic logged" "$log" "refused 127.0.0.1:[0-9]*: not a proxy client (bad magic)"
scenario "expired token" expired $skew
logged "expiry logged" "$log" "refused 127.0.0.1:[0-9]*: token expired"
logged "far expiry logged" "$log" "refused 127.0.0.1:[0-9]*: token expires [0-9]* s from now"
scenario "unpaired client times out" unpaired 1
logged "unpaired timeout logged" "$log" "the other side did not come within 1 s"

# A client that never sends its token is cut off too.
exec 7<>/dev/tcp/127.0.0.1/$port
if wait_log "$log" "no token within 1 s" $proxy_pid; then pass "silent client closed"; else
  fail "silent client not closed"; fi
exec 7<&-

# ---- stats ----
stats=$("$proxy_bin" --stats --json --control-port $cport --ca "$ca/ca.crt" \
  --cert "$ca/helper-nata-nata1.pem" 2>&1)
echo "stats: $stats"
if python3 - "$stats" <<'PY'; then pass "--stats --json counters"; else fail "--stats --json: $stats"; fi
import json, sys
s = json.loads(sys.argv[1])
assert s["role"] == "proxy" and s["name"] == "p1", s
c = {k: v for k, v in s.items() if isinstance(v, int)}
want = {"pairs_active": 0, "refused_replay": 2, "refused_expired": 2, "refused_bad_token": 4,
        "accept_failed_descriptors": 0, "accept_failed_other": 0}
bad = [f"{k}={c.get(k)} (want {v})" for k, v in want.items() if c.get(k) != v]
if c.get("pairs_total", 0) < 5: bad.append(f"pairs_total={c.get('pairs_total')}")
if c.get("bytes_relayed", 0) < 2 * 32 * 1024 * 1024: bad.append(f"bytes_relayed={c.get('bytes_relayed')}")
if c.get("unpaired_timeouts", 0) < 2: bad.append(f"unpaired_timeouts={c.get('unpaired_timeouts')}")
if bad:
    print("unexpected:", ", ".join(bad)); sys.exit(1)
PY
out=$("$proxy_bin" --stats --control-port $cport --ca "$ca/ca.crt" --cert "$ca/proxy-p1.pem" 2>&1)
if echo "$out" | grep -q "pairs_active"; then pass "--stats text"; else fail "--stats text: $out"; fi
# The control port's accept failures, as the broker's and the frontends'.
metrics=$(curl -fsS http://127.0.0.1:18303/metrics 2>&1)
if grep -q '^qcg_proxy_accept_failed_total{reason="descriptors"} 0$' <<<"$metrics"; then
  pass "metrics: qcg_proxy_accept_failed_total by reason"
else fail "metrics: no qcg_proxy_accept_failed_total{reason=\"descriptors\"} 0: $(grep accept <<<"$metrics")"; fi

# Other operations are refused (qcg:denied) — ask with curl if present.
if command -v curl >/dev/null; then
  body='<?xml version="1.0"?><SOAP-ENV:Envelope xmlns:SOAP-ENV="http://schemas.xmlsoap.org/soap/envelope/" xmlns:qcg="urn:qcg-connect:1"><SOAP-ENV:Body><qcg:lookup><version>2</version><job>j</job><verifier>s</verifier><fromRank>0</fromRank><toRank>1</toRank></qcg:lookup></SOAP-ENV:Body></SOAP-ENV:Envelope>'
  out=$(curl -s --cacert "$ca/ca.crt" --cert "$ca/helper-nata-nata1.pem" -H 'Content-Type: text/xml' \
    --data "$body" "https://127.0.0.1:$cport/" 2>&1)
  if echo "$out" | grep -q "not served by a proxy"; then pass "lookup at a proxy: qcg:denied"
  else fail "lookup at a proxy: $out"; fi
  # Its service description names what it performs: stats, and no other
  # operation or message; a foreign SOAP client (python3-zeep) reads it and
  # calls stats.
  curl -s --cacert "$ca/ca.crt" --cert "$ca/helper-nata-nata1.pem" \
    "https://127.0.0.1:$cport/?wsdl" >"$work/proxy.wsdl" 2>&1
  if zeep_out=$(env -u REQUESTS_CA_BUNDLE -u CURL_CA_BUNDLE /usr/bin/python3 - "$work/proxy.wsdl" \
    "https://127.0.0.1:$cport/" "$ca/ca.crt" "$ca/helper-nata-nata1.crt" \
    "$ca/helper-nata-nata1.key" <<'PY' 2>&1
import sys, xml.etree.ElementTree as ET
import requests, zeep
from zeep.transports import Transport
wsdl, url, ca, crt, key = sys.argv[1:]
W = "{http://schemas.xmlsoap.org/wsdl/}"
root = ET.parse(wsdl).getroot()
ops = sorted({o.get("name") for o in root.iter(W + "operation")})
msgs = sorted(m.get("name") for m in root.iter(W + "message"))
assert ops == ["stats"] and msgs == ["stats", "statsResponse"], (ops, msgs)
session = requests.Session()
session.cert, session.verify = (crt, key), ca
client = zeep.Client(wsdl, transport=Transport(session=session, timeout=10))
r = client.create_service("{urn:qcg-connect:1}qcg", url).stats(version=2)
print(r.role, ops)
PY
  ) && [[ $zeep_out == "proxy ['stats']" ]]; then pass "?wsdl of a proxy: stats only, and zeep calls it"
  else fail "?wsdl of a proxy: $zeep_out"; fi
fi

# ---- SIGTERM: pairs closed, exit 0 within 2 s ----
fds0=$(find "/proc/$proxy_pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
"$client_bin" $port "$key" idle >"$work/idle.out" 2>&1 &
client_pid=$!
wait_log "$work/idle.out" "^paired" $client_pid || fail "idle pair did not pair: $(cat "$work/idle.out")"
# An idle pair holds its two sockets and no pipe: pipes count against the
# user's pipe allowance (fs.pipe-user-pages-soft) whether they hold data or not.
fds1=$(find "/proc/$proxy_pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
if [ $((fds1 - fds0)) -eq 2 ]; then pass "an idle pair holds 2 descriptors"; else
  fail "an idle pair holds $((fds1 - fds0)) descriptors, want 2 (its sockets, no pipes)"; fi
kill -TERM $proxy_pid
rc=
for _ in $(seq 40); do
  kill -0 $proxy_pid 2>/dev/null || { wait $proxy_pid; rc=$?; break; }
  sleep 0.05
done
if [ "$rc" = 0 ]; then pass "SIGTERM: exit 0 within 2 s"; else
  fail "SIGTERM: exit ${rc:-(still running after 2 s)}"; tail -5 "$log"; fi
if wait $client_pid; then pass "SIGTERM: both ends closed"; else fail "SIGTERM: $(cat "$work/idle.out")"; fi
client_pid=
logged "stop logged" "$log" "relay stopped: closed 1 pairs"
# Who stopped it: this shell (kill is a builtin), as the broker's line says.
logged "the stop line names the sender" "$log" "stopping (SIGTERM from pid $$ (bash), uid $(id -u))"

# ---- max-pairs, then SIGKILL mid-transfer: both ends notice within seconds ----
log2=$work/proxy2.log
start_proxy "$log2" --max-pairs 1
scenario "max-pairs 1" full
logged "max-pairs refusal logged" "$log2" "refused 127.0.0.1:[0-9]*: max-pairs reached"
"$client_bin" $port "$key" stream >"$work/stream.out" 2>&1 &
client_pid=$!
wait_log "$work/stream.out" "^streaming" $client_pid || fail "stream did not start: $(cat "$work/stream.out")"
kill -9 $proxy_pid
wait $proxy_pid 2>/dev/null
proxy_pid=
if wait $client_pid; then pass "killed proxy: $(tail -1 "$work/stream.out")"; else
  fail "killed proxy: $(cat "$work/stream.out")"; fi
client_pid=

# ---- clients that do not send their token cannot lock others out ----
# counter NAME: one counter of the running proxy (--stats --json).
counter() {
  "$proxy_bin" --stats --json --control-port $cport --ca "$ca/ca.crt" \
    --cert "$ca/helper-nata-nata1.pem" 2>/dev/null |
    python3 -c "import json, sys; print(json.load(sys.stdin).get('$1', -1))"
}
stop_proxy() {
  stop_pids "$proxy_pid"
  proxy_pid=
}
log3=$work/proxy3.log
start_proxy "$log3" --max-pairs 8 --pair-timeout 30
scenario "40 idle connections from 127.0.0.1 (16 slots): a pair from 127.0.0.2" crowd 40
n=$(counter hellos_cut)
if [ "$n" -ge 24 ]; then pass "hellos_cut $n"; else fail "hellos_cut $n, want >= 24"; fi
export PROXY_CLIENT_SOURCE=127.0.0.3
scenario "a token dripped one byte every 500 ms: cut at the 5 s hello timeout" slowloris 5
unset PROXY_CLIENT_SOURCE
logged "hello timeout logged" "$log3" "refused 127.0.0.3:[0-9]*: no token within 5 s"
n=$(counter hello_timeouts)
if [ "$n" -ge 1 ]; then pass "hello_timeouts $n"; else fail "hello_timeouts $n"; fi
stop_proxy

log4=$work/proxy4.log
start_proxy "$log4" --max-pairs 8 --pair-timeout 30 --hellos-per-address 4
scenario "10 idle connections from 127.0.0.1 (4 allowed): a pair from 127.0.0.2" crowd 10
n=$(counter refused_address_hellos)
if [ "$n" -eq 6 ]; then pass "refused_address_hellos $n"; else fail "refused_address_hellos $n, want 6"; fi
logged "per-address refusal logged" "$log4" "4 connections from 127.0.0.1 have not sent their token"
stop_proxy

# ---- a proxy stopped past its hello timeout (a frozen machine, a starved
# process) does not refuse a token that came meanwhile ----
logp=$work/proxy-paused.log
start_proxy "$logp" --pair-timeout 30 --hello-timeout 2
"$client_bin" $port "$key" paused 2 >"$work/paused.out" 2>&1 &
client_pid=$!
if wait_log "$work/paused.out" "^connected" $client_pid; then
  sleep 0.5
  kill -STOP $proxy_pid
  sleep 3.5 # the token goes out meanwhile; the 2 s deadline passes
  kill -CONT $proxy_pid
fi
if wait $client_pid; then pass "proxy stopped 3.5 s: $(tail -1 "$work/paused.out")"; else
  fail "proxy stopped 3.5 s: $(cat "$work/paused.out"; grep refused "$logp")"; fi
client_pid=
stop_proxy

# ---- one address's flood of valid tokens leaves others room ----
# tokens-per-address 256: 128 pairs (both tokens from 127.0.0.1).
log5=$work/proxy5.log
start_proxy "$log5" --max-pairs 32 --tokens-per-address 256
export PROXY_CLIENT_SOURCE=127.0.0.1
scenario "600 pairs from 127.0.0.1 in a row" tokenflood 600
export PROXY_CLIENT_SOURCE=127.0.0.2
scenario "then a pair from 127.0.0.2" relay 1
unset PROXY_CLIENT_SOURCE
n=$(counter refused_address_tokens)
# Both tokens of each of the 472 pairs beyond the share.
if [ "$n" -eq $((2 * (600 - 128))) ]; then pass "refused_address_tokens $n"; else
  fail "refused_address_tokens $n, want 944"; fi
logged "token share logged" "$log5" "256 tokens from 127.0.0.1 are remembered already"
stop_proxy

# ---- one job's flood leaves its own site's other jobs room ----
# The same share; one job holds at most half of it: 128 tokens, 64 pairs.
log6=$work/proxy6.log
start_proxy "$log6" --max-pairs 32 --tokens-per-address 256
export PROXY_CLIENT_JOB=flood
scenario "600 pairs of one job from 127.0.0.1" tokenflood 600
export PROXY_CLIENT_JOB=other
scenario "then a pair of another job from 127.0.0.1" relay 1
unset PROXY_CLIENT_JOB
n=$(counter refused_job_tokens)
if [ "$n" -eq $((2 * (600 - 64))) ]; then pass "refused_job_tokens $n"; else
  fail "refused_job_tokens $n, want 1072"; fi
logged "job share logged" "$log6" "128 tokens of job tag"
stop_proxy

# ---- a large job's relayed pairs from one NATed site, with the defaults ----
# 50,000 pairs of one job from 127.0.0.1 within a token lifetime (the
# relayed pairs of a 1000-rank job are ~250k; before, one job of an address
# held 20,000 tokens at most); then another job from the same address.
log7=$work/proxy7.log
start_proxy "$log7" --log-level info
rss0=$(awk '/^VmRSS/ {print $2}' "/proc/$proxy_pid/status")
# The listen backlog follows max-pairs (2 per pair; the kernel keeps at most
# net.core.somaxconn): a NATed site's burst of connects is not dropped.
pairs=$(sed -n 's/.*at most \([0-9]*\) pairs.*/\1/p' "$log7" | head -1)
want=$((2 * pairs)) somax=$(cat /proc/sys/net/core/somaxconn)
[ "$want" -gt 65535 ] && want=65535
[ "$want" -gt "$somax" ] && want=$somax
got=$(ss -Hltn "sport = :$port" | awk '{print $3}')
if [ "$got" = "$want" ]; then pass "listen backlog $got (max-pairs $pairs)"; else
  fail "listen backlog ${got:-?}, want $want (max-pairs $pairs, somaxconn $somax)"; fi
logged "listen backlog in the start line" "$log7" "listen backlog $((2 * pairs))"
export PROXY_CLIENT_JOB=big
scenario "50000 pairs of one job from 127.0.0.1, then their first tokens again" storm 50000
export PROXY_CLIENT_JOB=other
scenario "then a pair of another job from 127.0.0.1" relay 1
unset PROXY_CLIENT_JOB
rss1=$(awk '/^VmRSS/ {print $2}' "/proc/$proxy_pid/status")
for c in refused_address_tokens refused_job_tokens refused_full; do
  n=$(counter $c)
  if [ "$n" -eq 0 ]; then pass "$c 0"; else fail "$c $n, want 0"; fi
done
n=$(counter refused_replay)
if [ "$n" -eq 2 ]; then pass "refused_replay 2"; else fail "refused_replay $n, want 2"; fi
kept=$(counter tokens_remembered) bytes=$(counter token_bytes)
if [ "$kept" -eq 100002 ]; then pass "tokens_remembered $kept"; else
  fail "tokens_remembered $kept, want 100002"; fi
echo "memory: $bytes bytes for $kept tokens ($((bytes / kept)) each); proxy RSS $rss0 -> $rss1 KiB" \
  "($(((rss1 - rss0) * 1024 / kept)) bytes per token)"
stop_proxy

# ---- one leg over IPv6, the other over IPv4: the proxy bridges them ----
# (an IPv6-only node and an IPv4-only one meet at a dual-stack proxy)
log8=$work/proxy8.log
if ip -6 addr show dev lo 2>/dev/null | grep -q "inet6 ::1/128"; then
  listen=:: start_proxy "$log8"
  PROXY_CLIENT_SOURCE=::1 PROXY_CLIENT_TARGET_SOURCE=127.0.0.1 \
    scenario "an IPv6 initiator and an IPv4 target, 8 MiB each way" relay 8
  logged "the pair's initiator over IPv6, its target over IPv4" "$log8" \
    "pair [0-9a-f]*: \[::1\]:[0-9]* (initiator) <-> 127\.0\.0\.1:[0-9]* (target)"
  PROXY_CLIENT_SOURCE=127.0.0.1 PROXY_CLIENT_TARGET_SOURCE=::1 \
    scenario "an IPv4 initiator and an IPv6 target, 8 MiB each way" relay 8
  logged "the pair's initiator over IPv4, its target over IPv6" "$log8" \
    "pair [0-9a-f]*: 127\.0\.0\.1:[0-9]* (initiator) <-> \[::1\]:[0-9]* (target)"
  stop_proxy
else
  echo "no ::1 on lo: the bridging checks are left out"
  : >"$log8"
fi

# Sanitizer builds: any report fails the test.
if grep -E "ERROR: (Address|Leak)Sanitizer|runtime error:" "$log" "$log2" "$log3" "$log4" "$log5" "$log6" "$log7" "$log8"; then
  fail "sanitizer report in the proxy's log"
fi
echo "$failed failure(s)"
[ $failed -eq 0 ]
