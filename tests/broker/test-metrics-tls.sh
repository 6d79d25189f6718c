#!/bin/bash
# broker-metrics-tls: metrics-tls, the metrics endpoint over TLS with the
# grid's certificates (ports 18910-18919), as an admin's Prometheus scrapes
# it: a real Prometheus with a tls_config of a monitor certificate
# (qcg-certs issue monitor) sees the broker up; curl with that certificate
# gets the page; without a client certificate, with a helper's, or in plain
# HTTP it gets nothing, and each refusal is counted by reason; a monitor
# certificate calls no SOAP operation; a non-loopback metrics-listen with
# metrics-tls and no metrics-allow passes the start-up check.
set -u
broker_bin=$1 call_bin=$2 certs_bin=$3
port=18910 mport=18911 pport=18912
url=https://127.0.0.1:$port/
work=$(mktemp -d /tmp/broker-metrics-tls.XXXXXX)
broker_pid="" prom_pid=""

cleanup() {
  stop_children "$broker_pid" "$prom_pid"
  rm -rf "$work"
}
trap cleanup EXIT

. "$(dirname "$0")/lib.sh"

make_ca "$work/ca"
"$certs_bin" --dir "$ca" issue monitor prom >/dev/null &&
  openssl x509 -in "$ca/monitor-prom.crt" -noout -text | grep -A1 "Extended Key Usage" | grep -qx " *TLS Web Client Authentication" &&
  pass "qcg-certs issue monitor: a client-only certificate" || fail "qcg-certs issue monitor"
"$certs_bin" --dir "$ca" issue helper nata/nata1 >/dev/null

# The start-up rule: TLS stands in for an allow-list on a public address (the
# bind then fails: 203.0.113.1 is not ours, but the rule let it try).
"$broker_bin" --listen 127.0.0.1 --port $port --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" \
  --metrics-listen 203.0.113.1:$mport --metrics-tls >"$work/out" 2>"$work/err"
rc=$?
[ $rc = 2 ] && grep -q "metrics-listen 203.0.113.1:$mport: cannot listen" "$work/err" &&
  pass "a public metrics-listen with metrics-tls passes the rule (and fails to bind here)" ||
  fail "public metrics-listen with metrics-tls: rc=$rc $(cat "$work/err")"

log=$work/broker.log
start_broker "$log" broker_pid $port --metrics-listen 127.0.0.1:$mport --metrics-tls
grep -q "metrics on https://127.0.0.1:$mport/metrics for certificates of role monitor" "$log" &&
  pass "the log says https, for monitor certificates" || fail "no log line for the TLS endpoint: $(grep metrics "$log")"

murl=https://127.0.0.1:$mport/metrics
get() { curl -sS -m 10 --cacert "$ca/ca.crt" "$@" "$murl"; }
get --cert "$ca/monitor-prom.crt" --key "$ca/monitor-prom.key" >"$work/metrics" 2>"$work/curl.err" &&
  grep -q '^qcg_build_info{daemon="broker"' "$work/metrics" &&
  pass "curl with the monitor certificate: the page" || fail "monitor GET: $(cat "$work/curl.err")"
# The helper first: refusals are logged at most once a second.
get --cert "$ca/helper-nata-nata1.crt" --key "$ca/helper-nata-nata1.key" >/dev/null 2>&1 &&
  fail "a helper's certificate: answered" || pass "a helper's certificate: no page"
get >/dev/null 2>&1 && fail "no client certificate: answered" || pass "no client certificate: no page"
curl -sS -m 10 "http://127.0.0.1:$mport/metrics" >/dev/null 2>&1 &&
  fail "plain HTTP: answered" || pass "plain HTTP: no page"
wait_log "$log" "refused 127.0.0.1.*metrics: the client certificate's role is not monitor" "$broker_pid" &&
  pass "the helper's refusal is logged with its reason" || fail "no log line for the helper's certificate"
get --cert "$ca/monitor-prom.crt" --key "$ca/monitor-prom.key" >"$work/metrics2" 2>/dev/null
grep -q '^qcg_metrics_refused_total{reason="not_monitor"} 1$' "$work/metrics2" &&
  grep -q '^qcg_metrics_refused_total{reason="tls"} [2-9]$' "$work/metrics2" &&
  pass "refusals counted: not_monitor 1, tls 2 (no certificate, plain HTTP)" ||
  fail "refusal counters: $(grep refused "$work/metrics2")"
# A monitor certificate reads metrics only: the SOAP service refuses it.
"$broker_bin" --stats --url "$url" --ca "$ca/ca.crt" --cert "$ca/monitor-prom.pem" >"$work/stats" 2>&1 &&
  fail "--stats with the monitor certificate: answered" || pass "the SOAP service refuses a monitor certificate"

# Prometheus, scraping over TLS with the monitor certificate.
if command -v prometheus >/dev/null; then
  cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: qcg-broker
    scheme: https
    tls_config:
      ca_file: $ca/ca.crt
      cert_file: $ca/monitor-prom.crt
      key_file: $ca/monitor-prom.key
    static_configs: [{targets: ['127.0.0.1:$mport']}]
EOF
  prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
    --web.listen-address=127.0.0.1:$pport >"$work/prom.log" 2>&1 &
  prom_pid=$!
  up=
  for _ in $(seq 60); do
    up=$(curl -fsS -m 2 "http://127.0.0.1:$pport/api/v1/query?query=up" 2>/dev/null |
      python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")' 2>/dev/null)
    [ "$up" = 1 ] && break
    sleep 0.5
  done
  [ "$up" = 1 ] && pass "Prometheus scrapes the broker over TLS with its monitor certificate: up 1" ||
    fail "Prometheus: up=${up:-none}: $(curl -fsS "http://127.0.0.1:$pport/api/v1/targets" 2>&1 | head -c 400)"
  n=$(curl -fsS -m 2 "http://127.0.0.1:$pport/api/v1/query?query=qcg_build_info" |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)["data"]["result"]))' 2>/dev/null)
  [ "${n:-0}" = 1 ] && pass "Prometheus has the broker's qcg_build_info" || fail "qcg_build_info in Prometheus: ${n:-none}"
  kill -TERM "$prom_pid"
  wait "$prom_pid" 2>/dev/null
  prom_pid=
else fail "prometheus not found (Debian package prometheus: scripts/install-deps)"; fi

kill -TERM "$broker_pid"
wait "$broker_pid"
rc=$?
broker_pid=
[ $rc -eq 0 ] && pass "SIGTERM: clean stop with the TLS endpoint running" || fail "SIGTERM: exit $rc"
if grep -q "Sanitizer" "$log"; then fail "sanitizer report"; grep -A20 Sanitizer "$log" | head -30; fi

[ "$failed" -eq 0 ] && echo "broker-metrics-tls: all passed" || echo "broker-metrics-tls: $failed failed"
[ "$failed" -eq 0 ]
