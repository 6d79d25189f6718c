#!/bin/bash
# common_metrics_config: qcg-proxy, qcg-frontend and qcg-helper refuse a
# metrics-listen they must not serve (a public address without
# metrics-allow, no port, a bad metrics-allow range, metrics-tls with a
# helper's client-only certificate) with exit status 2 and a
# line naming the setting, before serving anything (qcg-broker's own checks
# are in broker-metrics).  Loopback only; ports 18950-18959.
set -u
build=$1 certs_bin=$2
work=$(mktemp -d /tmp/metrics-config.XXXXXX)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/lib/common.sh
. "$(dirname "$0")/../lib/common.sh"

ca=$work/ca
"$certs_bin" --dir "$ca" init >/dev/null
"$certs_bin" --dir "$ca" issue proxy lab --san 127.0.0.1 >/dev/null
"$certs_bin" --dir "$ca" issue frontend site --san 127.0.0.1 >/dev/null
"$certs_bin" --dir "$ca" issue helper site/n1 >/dev/null
(umask 077 && openssl rand -hex 32 >"$work/key")

refused() { # description expected-text command...
  local what=$1 text=$2 rc
  shift 2
  timeout 20 "$@" >"$work/out" 2>&1
  rc=$?
  if [ $rc -eq 2 ] && grep -q -- "$text" "$work/out"; then pass "$what"
  else fail "$what: exit $rc: $(tail -n 3 "$work/out")"; fi
}
refused "qcg-proxy: a public metrics-listen without metrics-allow" \
  "qcg-proxy: metrics-listen 203.0.113.5:9703: not a loopback address, and no metrics-allow or metrics-tls" \
  "$build/proxy/qcg-proxy" --listen 127.0.0.1 --port 18950 --control-port 18951 \
  --ca "$ca/ca.crt" --cert "$ca/proxy-lab.pem" --key-file "$work/key" --metrics-listen 203.0.113.5:9703
refused "qcg-frontend: metrics-listen without a port" \
  "qcg-frontend: metrics-listen 127.0.0.1: not ADDR:PORT" \
  "$build/frontend/qcg-frontend" --listen 127.0.0.1 --port 18952 --broker https://127.0.0.1:18953/ \
  --kind open --ca "$ca/ca.crt" --cert "$ca/frontend-site.pem" --metrics-listen 127.0.0.1
refused "qcg-helper: a bad metrics-allow" \
  "qcg-helper: metrics-listen 127.0.0.1:18954: metrics-allow: 198.51.100.0/99" \
  "$build/helper/qcg-helper" --frontend https://127.0.0.1:18952/ --ca "$ca/ca.crt" \
  --cert "$ca/helper-site-n1.pem" --address 127.0.0.1 --ports 18955-18959 --intercept=no \
  --socket "$work/h.sock" --metrics-listen 127.0.0.1:18954 --metrics-allow 198.51.100.0/99
refused "qcg-helper: metrics-tls with its client-only certificate" \
  "qcg-helper: metrics-listen 127.0.0.1:18954: metrics-tls: $ca/helper-site-n1.pem: its certificate is not for TLS servers (no serverAuth); use metrics-allow here" \
  "$build/helper/qcg-helper" --frontend https://127.0.0.1:18952/ --ca "$ca/ca.crt" \
  --cert "$ca/helper-site-n1.pem" --address 127.0.0.1 --ports 18955-18959 --intercept=no \
  --socket "$work/h.sock" --metrics-listen 127.0.0.1:18954 --metrics-tls
[ "$failed" -eq 0 ] && echo "common_metrics_config: all passed" || echo "common_metrics_config: $failed failed"
[ "$failed" -eq 0 ]
