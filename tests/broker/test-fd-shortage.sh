#!/usr/bin/env bash
#
# A broker or a frontend whose descriptors run out under a flood of
# connections (issue 32): its accept fails with EMFILE.  It must neither stop
# nor spin, log the shortage once (not once per failure: ten lines a second
# before), count every failure in --stats (accept_failed_descriptors) and
# its metrics endpoint (qcg_DAEMON_accept_failed_total{reason="descriptors"},
# the same number), and serve again once the flood has gone.  The real
# daemons on 127.0.0.1, each in turn with its descriptors cut to 64 with
# prlimit while it runs (lowering needs no privilege), 200 idle connections
# from 200 addresses (its stage holds 16 per address) for 3 s: well within
# their 5 s handshake deadline, so only the shortage turns them away.
#
#   test-fd-shortage.sh BUILD_DIR SRC_DIR
#
# Ports 27992-27995 belong to this test.  Exit status: 0 passed, 1 failed,
# 77 skipped.

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)
# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"
need_built "$broker" "$frontend"
need_commands curl openssl ss prlimit python3
grid_workdir test-fd-shortage

grid_ca "frontend site"
grid_ports_free 27992 27993 27994 27995
grid_broker 27992 --metrics-listen 127.0.0.1:27993 || exit 1
grid_frontend site 27994 --kind open --metrics-listen 127.0.0.1:27995 || exit 1
frontend_stats() {
	"$frontend" --stats --json --url "https://$grid_host:27994/" --ca "$ca/ca.crt" \
		--cert "$ca/frontend-site.pem"
}

# shortage NAME PID PORT STATS-COMMAND METRICS-PORT LOG: the flood against
# one daemon, and what it must do.
shortage() {
	local name=$1 pid=$2 port=$3 stats=$4 mport=$5 log=$6 n count metric
	failed_are() { "$stats" | grep -q "\"accept_failed_descriptors\":$1[,}]"; }
	serving() { "$stats" | grep -q '"accept_failed_descriptors"'; }
	within "$name: before the flood, --stats counts no accept failure" 50 failed_are 0
	if prlimit --pid "$pid" --nofile=64:64 &&
		[[ $(prlimit --pid "$pid" --nofile --output SOFT --noheadings | tr -d " ") == 64 ]]; then
		pass "$name: its descriptors are cut to 64"
	else
		fail "$name: its descriptors are cut to 64"
	fi
	python3 "$src/tests/broker/idle-from-many.py" 127.0.0.1 "$port" 200 3
	local text="accept: Too many open files"
	if logged "$log" "$text"; then
		pass "$name: 200 connections at once: its accept ran out of descriptors"
	else
		fail "$name: 200 connections at once: its accept ran out of descriptors" "$log"
	fi
	n=$(grep -c "$text" "$log" || true)
	if [[ $n -eq 1 ]]; then
		pass "$name: ... which it logged once in those 3 s, not once per failure"
	else
		fail "$name: ... which it logged once in those 3 s, not once per failure ($n lines)" "$log"
	fi
	if kill -0 "$pid" 2>/dev/null; then
		pass "$name: ... and it runs on"
	else
		fail "$name: ... and it runs on" "$log"
	fi
	within "$name: the flood gone, it serves again (--stats)" 50 serving
	# Each failure is counted, not only the one line logged.
	count=$("$stats" | sed -n 's/.*"accept_failed_descriptors":\([0-9]*\).*/\1/p')
	if [[ ${count:-0} -gt 1 ]]; then
		pass "$name: --stats counts every failure: accept_failed_descriptors $count, 1 line logged"
	else
		fail "$name: --stats counts every failure: accept_failed_descriptors ${count:-none}, 1 line logged" "$log"
	fi
	metric=$(curl -fsS "http://127.0.0.1:$mport/metrics" |
		sed -n "s/^qcg_${name}_accept_failed_total{reason=\"descriptors\"} \\([0-9]*\\)\$/\\1/p")
	if [[ -n $metric && $metric == "${count:-}" ]]; then
		pass "$name: its metrics say the same: qcg_${name}_accept_failed_total{reason=\"descriptors\"} $metric"
	else
		fail "$name: its metrics say the same: qcg_${name}_accept_failed_total{reason=\"descriptors\"} ${metric:-absent}, --stats ${count:-none}"
	fi
}
shortage broker "${pids[0]}" 27992 broker_stats 27993 "$work/broker.log"
shortage frontend "${pids[1]}" 27994 frontend_stats 27995 "$work/frontend-site.log"
echo "$passed passed, $failed failed"
((failed == 0))
