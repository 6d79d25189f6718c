#!/usr/bin/env bash
#
# soap-stage-metrics: what a SOAP port's handshake stage turned away is in
# the daemon's metrics, as an admin's Prometheus reads them, with the
# numbers --stats gives (issue 32).  The real broker, frontend and proxy on
# 127.0.0.1, each with its metrics endpoint; 20 connections that send
# nothing, from one address, to each SOAP port (the proxy's control port):
# the stage holds 16 per address, so 4 are refused at once.  Then every
# handshakes_* counter of --stats appears as
# qcg_DAEMON_handshakes_dropped_total{reason} with the same value, the
# refused ones above all.
#
#   test-stage-metrics.sh BUILD_DIR SRC_DIR
#
# Ports 28100-28106 belong to this test.  Exit status: 0 passed, 1 failed,
# 77 skipped.

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)
# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"
proxy=$build/proxy/qcg-proxy
need_built "$broker" "$frontend" "$proxy"
need_commands curl openssl python3 ss
grid_workdir test-stage-metrics

grid_ca "frontend site" "proxy p1"
grid_ports_free 28100 28101 28102 28103 28104 28105 28106
grid_broker 28100 --metrics-listen 127.0.0.1:28101 || exit 1
grid_frontend site 28102 --kind open --metrics-listen 127.0.0.1:28103 || exit 1
(umask 077 && openssl rand -hex 32 >"$work/proxy.key")
"$proxy" --listen "$grid_ip" --port 28104 --control-port 28105 --ca "$ca/ca.crt" \
	--cert "$ca/proxy-p1.pem" --key-file "$work/proxy.key" \
	--metrics-listen 127.0.0.1:28106 >>"$work/proxy.log" 2>&1 &
pids+=("$!")
wait_for "the proxy's control port" 100 listening 28105 || exit 1

frontend_stats() {
	"$frontend" --stats --json --url "https://$grid_host:28102/" --ca "$ca/ca.crt" \
		--cert "$ca/frontend-site.pem"
}
proxy_stats() {
	"$proxy" --stats --json --control-port 28105 --ca "$ca/ca.crt" --cert "$ca/proxy-p1.pem"
}

# stage NAME SOAP-PORT STATS-COMMAND METRICS-PORT: the flood against one
# daemon, and what its --stats and metrics say after it.
stage() {
	local name=$1 port=$2 stats=$3 mport=$4 counter reason value metric
	python3 "$src/tests/broker/idle-conns.py" 127.0.0.1 "$port" 20 0.5 >/dev/null
	"$stats" >"$out" 2>&1 || { fail "$name: --stats"; return; }
	value=$(sed -n 's/.*"handshakes_refused_address":\([0-9]*\).*/\1/p' "$out")
	if [[ $value == 4 ]]; then
		pass "$name: --stats: the 4 past the address's 16 refused"
	else
		fail "$name: --stats: the 4 past the address's 16 refused (handshakes_refused_address ${value:-absent})"
	fi
	curl -fsS "http://127.0.0.1:$mport/metrics" >"$work/$name.metrics" 2>>"$out" ||
		{ fail "$name: GET /metrics"; return; }
	for counter in expired:expired cut:cut refused_address:per_address refused_full:full; do
		reason=${counter#*:} counter=handshakes_${counter%%:*}
		value=$(sed -n "s/.*\"$counter\":\\([0-9]*\\).*/\\1/p" "$out")
		metric=$(sed -n "s/^qcg_${name}_handshakes_dropped_total{reason=\"$reason\"} \\([0-9]*\\)\$/\\1/p" \
			"$work/$name.metrics")
		if [[ -n $value && $metric == "$value" ]]; then
			pass "$name: qcg_${name}_handshakes_dropped_total{reason=\"$reason\"} $metric, as --stats' $counter"
		else
			fail "$name: qcg_${name}_handshakes_dropped_total{reason=\"$reason\"} ${metric:-absent}, --stats' $counter ${value:-absent}"
		fi
	done
	if grep -q "^# HELP qcg_${name}_handshakes_dropped_total .*per_address" "$work/$name.metrics"; then
		pass "$name: the family's HELP says what its reasons mean"
	else
		fail "$name: the family's HELP says what its reasons mean"
	fi
}
stage broker 28100 broker_stats 28101
stage frontend 28102 frontend_stats 28103
stage proxy 28105 proxy_stats 28106
echo "$passed passed, $failed failed"
((failed == 0))
