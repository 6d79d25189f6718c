#!/bin/bash
# broker-metrics: qcg-broker's metrics endpoint as an admin's Prometheus
# reads it (ports 18900-18909): the counters of --stats under conventional
# names, the clusters, the setup outcomes per cluster pair with failures by
# reason, the setup-time histogram, the build info; no job, rank or address
# in any label; a non-loopback metrics-listen without metrics-allow, or a
# bad metrics-allow, refused at start with one line.
set -u
broker_bin=$1 call_bin=$2 certs_bin=$3
port=18900 mport=18901
url=https://127.0.0.1:$port/
work=$(mktemp -d /tmp/broker-metrics.XXXXXX)
broker_pid=

cleanup() {
  stop_children "$broker_pid"
  rm -rf "$work"
}
trap cleanup EXIT

. "$(dirname "$0")/lib.sh"

make_ca "$work/ca" nata open
fe=$ca/frontend-nata.pem fo=$ca/frontend-open.pem

# Misconfiguration: refused at start, one line, exit 2.
misconf() { # description expected-text args...
  local what=$1 text=$2
  shift 2
  "$broker_bin" --listen 127.0.0.1 --port $port --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" \
    "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q -- "$text" "$work/err"; then
    pass "$what"
  else fail "$what: rc=$rc: $(cat "$work/err")"; fi
}
misconf "a public metrics-listen without metrics-allow" \
  "qcg-broker: metrics-listen 203.0.113.1:$mport: not a loopback address, and no metrics-allow or metrics-tls" \
  --metrics-listen 203.0.113.1:$mport
misconf "a bad metrics-allow" "metrics-allow: 198.51.100.0/99" \
  --metrics-listen 127.0.0.1:$mport --metrics-allow 198.51.100.0/99
misconf "metrics-listen without a port" "not ADDR:PORT" --metrics-listen 127.0.0.1

log=$work/broker.log
start_broker "$log" broker_pid $port --metrics-listen 127.0.0.1:$mport
grep -q "metrics on http://127.0.0.1:$mport/metrics" "$log" && pass "the log says where metrics are" ||
  fail "no log line for the metrics endpoint"

expect_ok "register nata" "$fe" registerCluster name=nata kind=nat publicAddress=203.0.113.30 nodeRange=198.18.3.0/24
expect_ok "register open" "$fo" registerCluster name=open kind=open publicAddress=203.0.113.20 nodeRange=203.0.113.20/31
expect_ok "node nata1" "$fe" registerNode name=nata1 address=198.18.3.11 portLow=20000 portHigh=20999 canIntercept=1
expect_ok "node open1" "$fo" registerNode name=open1 address=203.0.113.21 portLow=20000 portHigh=20999 canIntercept=1
expect_ok "publish nata" "$fe" publish job=p secret=s rank=0 node=nata1 address=198.18.3.11 port=20001
expect_ok "publish open" "$fo" publish job=p secret=s rank=1 node=open1 address=203.0.113.21 port=20001
expect_ok "lookup nata -> open" "$fe" lookup job=p secret=s fromRank=0 toRank=1
out_has plan.technique=direct || fail "the plan nata -> open is not direct: $out"
expect_ok "report: direct worked in 3 ms" "$fe" report job=p secret=s fromRank=0 toRank=1 technique=direct ok=1 setupMs=3
expect_ok "lookup nata -> open again" "$fe" lookup job=p secret=s fromRank=0 toRank=1
expect_ok "report: direct failed, timed out" "$fe" report job=p secret=s fromRank=0 toRank=1 technique=direct ok=0 setupMs=900 \
  why="connect to 203.0.113.21 port 20001: Connection timed out"
expect_ok "lookup nata -> open a third time" "$fe" lookup job=p secret=s fromRank=0 toRank=1 tried=direct
expect_ok "report: direct refused" "$fe" report job=p secret=s fromRank=0 toRank=1 technique=direct ok=0 setupMs=2 \
  why="connect to 203.0.113.21 port 20001: Connection refused"

curl -fsS -D "$work/headers" "http://127.0.0.1:$mport/metrics" >"$work/metrics" 2>"$work/curl.err" ||
  fail "GET /metrics: $(cat "$work/curl.err")"
grep -qi "^content-type: text/plain; version=0.0.4" "$work/headers" && pass "the exposition format's type" ||
  fail "content type: $(cat "$work/headers")"
has() { # description line-regex
  if grep -qE -- "$2" "$work/metrics"; then pass "$1"; else fail "$1: no line matching $2"; fi
}
has "build info with the version" "^qcg_build_info\\{daemon=\"broker\",version=\"$("$broker_bin" --version | grep -o '[0-9][0-9.]*' | head -1)\"\\} 1$"
has "lookups counted" '^qcg_broker_lookups_total [3-9]$'
has "two clusters registered" '^qcg_broker_clusters 2$'
has "nata's nodes, with its kind" '^qcg_broker_cluster_nodes\{cluster="nata",kind="nat"\} 1$'
has "contacts" '^qcg_broker_contacts 2$'
has "reports by result" '^qcg_broker_reports_total\{result="failed"\} 2$'
has "attempts nata -> open by direct" '^qcg_broker_pair_attempts_total\{from="nata",to="open",technique="direct"\} 3$'
has "successes nata -> open" '^qcg_broker_pair_successes_total\{from="nata",to="open",technique="direct"\} 1$'
has "the timeout, by reason" '^qcg_broker_pair_failures_total\{from="nata",to="open",technique="direct",reason="timeout"\} 1$'
has "the refusal, by reason" '^qcg_broker_pair_failures_total\{from="nata",to="open",technique="direct",reason="refused"\} 1$'
has "setup time summed" '^qcg_broker_pair_setup_seconds_total\{from="nata",to="open",technique="direct"\} 0.003$'
has "setup histogram: not under 2.5 ms" '^qcg_connect_setup_seconds_bucket\{technique="direct",le="0.0025"\} 0$'
has "setup histogram: under 5 ms" '^qcg_connect_setup_seconds_bucket\{technique="direct",le="0.005"\} 1$'
has "histogram count" '^qcg_connect_setup_seconds_count\{technique="direct"\} 1$'
for why in descriptors memory thread other; do
  has "accept failures ($why), none yet" "^qcg_broker_accept_failed_total\\{reason=\"$why\"\\} 0\$"
done
has "a HELP and TYPE for each family" '^# TYPE qcg_broker_pair_failures_total counter$'
# Bounded labels: no job, rank, node or address anywhere.
if grep -v '^#' "$work/metrics" | grep -qE '203\.0\.113|198\.18|nata1|open1|job=|rank='; then
  fail "a label names a job, node or address: $(grep -E '203\.0\.113|198\.18|nata1|open1|job=|rank=' "$work/metrics" | head -3)"
else pass "no job, rank, node or address in a label"; fi
# Every sample line is NAME{LABELS} VALUE or NAME VALUE, and every family has its TYPE.
bad=$(grep -v '^#' "$work/metrics" | grep -vE '^[a-z_:][a-z0-9_:]*(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [-+0-9.eInfa]+$' | head -3)
[ -z "$bad" ] && pass "every sample line is well formed" || fail "malformed lines: $bad"
for f in $(grep -v '^#' "$work/metrics" | sed 's/[{ ].*//; s/_bucket$\|_sum$\|_count$//' | sort -u); do
  grep -q "^# TYPE $f " "$work/metrics" || fail "no TYPE for $f"
done

# Prometheus' own linter on the whole page (names, units, HELP/TYPE).
if command -v promtool >/dev/null; then
  if promtool check metrics <"$work/metrics" >"$work/lint" 2>&1; then pass "promtool check metrics"
  else fail "promtool check metrics: $(head -5 "$work/lint")"; fi
else fail "promtool not found (Debian package prometheus: scripts/install-deps)"; fi

# A bad request gets its status and a log line; the endpoint still answers.
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$mport/metrics")
[ "$code" = 405 ] && pass "POST: 405" || fail "POST: $code"
wait_log "$log" "refused 127.0.0.1:[0-9]*: metrics: 405, only GET and HEAD" "$broker_pid" &&
  pass "the bad request is logged" || fail "no log line for the bad request"
curl -fsS "http://127.0.0.1:$mport/metrics" | grep -q '^qcg_metrics_refused_total{reason="bad_request"} 1$' &&
  pass "the refusal is counted" || fail "qcg_metrics_refused_total"

kill -TERM "$broker_pid"
wait "$broker_pid"
rc=$?
broker_pid=
[ $rc -eq 0 ] && pass "SIGTERM: clean stop with the endpoint running" || fail "SIGTERM: exit $rc"
if grep -q "Sanitizer" "$log"; then fail "sanitizer report"; grep -A20 Sanitizer "$log" | head -30; fi

[ "$failed" -eq 0 ] && echo "broker-metrics: all passed" || echo "broker-metrics: $failed failed"
[ "$failed" -eq 0 ]
