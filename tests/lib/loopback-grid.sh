# shellcheck shell=bash disable=SC2154,SC2034 # build, src: from the sourcing script; rc: for it.
# tests/lib/loopback-grid.sh: what the loopback tests share (sourced by
# tests/libqcgconn/test-cat.sh, tests/libqcgconn/test-reversed.sh,
# tests/mpi/test-loopback.sh, tests/launch/test-launch-loopback.sh and
# tests/helper/helper-test.sh): the real broker, frontends and helpers on
# 127.0.0.1 with a throw-away CA, a scratch directory removed with everything
# started in it, and checks on what a user would observe; the "ok"/"FAIL"
# lines, the bounded waits and the bounded stop come from tests/lib/common.sh.
#
# The sourcing script sets first:
#   build, src   the build and source directories (absolute paths)
#   grid_ip      optional: the loopback address every service listens and is
#                reached on, 127.0.0.1 (default) or ::1 (an IPv6-only grid)
# and may set, before its first failed check or its exit:
#   fail_lines   how many of the last lines of $out a failed check shows (all by default)
#   log_lines    how many of the last lines of each log the cleanup shows (40)
#   logs_var     the variable that, set, shows the logs even when all passed (QCG_TEST_LOGS)
#
# It provides helper, frontend, broker and certs (the programs);
# grid_workdir then sets work, out ($work/out, what a failed check
# shows) and pids (what the cleanup kills); grid_ca sets ca; grid_broker sets
# broker_url; grid_helper sets helper_pid.  TEST_SECRET and TEST_SECRET_2 are
# two jobs' secrets strong enough for the helper (64 hex, as tests/fixtures.h).
# Checks: within (a bounded wait that passes or fails), logged, and the
# broker's counters and grid picture (contacts_are, clusters_are, grid_has,
# grid_lacks).

helper=$build/helper/qcg-helper
frontend=$build/frontend/qcg-frontend
broker=$build/broker/qcg-broker
certs=$src/certs/qcg-certs
TEST_SECRET=5ec2e70123456789abcdef0123456789abcdef0123456789abcdef0123456789
TEST_SECRET_2=07e425fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
grid_ip=${grid_ip:-127.0.0.1}
# How a URL or an ADDR:PORT writes it: IPv6 in brackets.
if [[ $grid_ip == *:* ]]; then grid_host="[$grid_ip]"; else grid_host=$grid_ip; fi

# What a failed check shows besides its line: the last lines of $out.
fail_details() {
	if [[ -s ${out:-/dev/null} ]]; then tail -n "${fail_lines:-+1}" "$out" | sed 's/^/     | /'; fi
}

# within DESC TENTHS CMD...: pass when CMD succeeds within TENTHS tenths of a second.
within() {
	local desc=$1 tries=$2
	shift 2
	if wait_for "$desc" "$tries" "$@" 2>>"$out"; then pass "$desc"; else fail "$desc"; fi
}

# logged FILE TEXT: FILE holds TEXT.
logged() { grep -qF -- "$2" "$1"; }

# The broker's counters and grid picture (JSON), asked with its own certificate.
broker_stats() {
	"$broker" --stats --json --url "$broker_url" --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem"
}
broker_grid() {
	"$broker" --grid --json --url "$broker_url" --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem"
}
contacts_are() { broker_stats | grep -q "\"contacts\":$1[,}]"; }
clusters_are() { broker_stats | grep -q "\"clusters\":$1[,}]"; }
grid_has() { local g; g=$(broker_grid) && grep -q "\"$1\"" <<<"$g"; }
grid_lacks() { local g; g=$(broker_grid) && ! grep -q "\"$1\"" <<<"$g"; }

# wait_exit PID TRIES: waits for a background process to end (bounded); its status in $rc.
wait_exit() {
	local pid=$1 tries=$2 i
	for ((i = 0; i < tries; i++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			rc=0
			wait "$pid" || rc=$?
			return 0
		fi
		sleep 0.1
	done
	kill "$pid" 2>/dev/null || true
	rc=124
	return 1
}

listening() { ss -Htln "sport = :$1" | grep -q .; }
# connected SOCK: the helper behind SOCK is registered with its frontend.
connected() { "$helper" --status --json --socket "$1" | grep -q '"upstream_connected":true'; }
ms() { date +%s%3N; }

# grid_workdir NAME: a new scratch directory $work, removed when the script exits.
grid_workdir() {
	work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
	out=$work/out
	pids=()
	trap grid_cleanup EXIT
}

# Stops what the test started (stop_children: bounded), shows the logs when
# a check failed, and removes $work.
grid_cleanup() {
	local log n=${log_lines:-40} show=${logs_var:-QCG_TEST_LOGS}
	# Every child of the test's shell counts, not only $pids: a test may have
	# started a daemon of its own (helper-test.sh's frontend).
	stop_children "${pids[@]}"
	if ((failed > 0)) || [[ -n ${!show:-} ]]; then
		for log in "$work"/*.log "$work"/*.err; do
			[[ -f $log ]] || continue
			echo "--- $log (last $n lines)"
			tail -n "$n" "$log"
		done
	fi
	rm -rf -- "$work"
}

# grid_ports_free PORT...: exit 1 when one of them is taken.
grid_ports_free() {
	local p
	for p in "$@"; do
		if listening "$p"; then echo "port $p is taken: another test running?"; exit 1; fi
	done
}

# grid_ca WHO...: a throw-away CA in $ca ($work/ca), the broker's certificate
# and grid_certs WHO...
grid_ca() {
	ca=$work/ca
	"$certs" --dir "$ca" init >>"$work/certs.log" 2>&1 || { cat "$work/certs.log"; exit 1; }
	grid_certs broker "$@"
}

# grid_certs WHO...: a certificate from the CA for each WHO: "broker",
# "frontend CLUSTER", "proxy NAME" (these three for $grid_ip) or
# "helper CLUSTER/NODE".  On an error: exit 1, showing what qcg-certs said.
grid_certs() {
	local who args
	for who in "$@"; do
		read -ra args <<<"$who"
		[[ ${args[0]} == helper ]] || args+=(--san "$grid_ip")
		"$certs" --dir "$ca" issue "${args[@]}" >>"$work/certs.log" 2>&1 ||
			{ cat "$work/certs.log"; exit 1; }
	done
}

# grid_broker PORT [OPTION...]: qcg-broker on $grid_ip PORT, log broker.log;
# returns once it listens.
grid_broker() {
	local port=$1
	shift
	"$broker" --listen "$grid_ip" --port "$port" --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" \
		"$@" >>"$work/broker.log" 2>&1 &
	pids+=("$!")
	broker_url=https://$grid_host:$port/
	wait_for "the broker on port $port" 100 listening "$port"
}

# grid_frontend CLUSTER PORT [OPTION...]: CLUSTER's qcg-frontend on
# $grid_ip PORT, with the broker above, OPTIONs (--kind ...) added, log
# frontend-CLUSTER.log; returns once it listens.
grid_frontend() {
	local cluster=$1 port=$2
	shift 2
	"$frontend" --listen "$grid_ip" --port "$port" --broker "$broker_url" --cluster "$cluster" \
		"$@" --ca "$ca/ca.crt" --cert "$ca/frontend-$cluster.pem" \
		>>"$work/frontend-$cluster.log" 2>&1 &
	pids+=("$!")
	wait_for "the frontend of $cluster on port $port" 100 listening "$port"
}

# grid_helper NAME CLUSTER/NODE FRONTEND_PORT LOW-HIGH [OPTION...]: the node's
# qcg-helper with the frontend on FRONTEND_PORT, listening ports LOW-HIGH,
# socket $work/NAME.sock, log NAME.log, pid in $helper_pid; returns once it has
# registered with the frontend.
grid_helper() {
	local name=$1 cn=$2 port=$3 range=$4
	shift 4
	"$helper" --socket "$work/$name.sock" --frontend "https://$grid_host:$port/" \
		--cluster "${cn%/*}" --node "${cn#*/}" --address "$grid_ip" --ports "$range" \
		--ca "$ca/ca.crt" --cert "$ca/helper-${cn%/*}-${cn#*/}.pem" "$@" \
		>>"$work/$name.log" 2>&1 &
	helper_pid=$!
	pids+=("$helper_pid")
	wait_for "the socket of helper $cn" 100 test -S "$work/$name.sock" &&
		wait_for "helper $cn to register upstream" 100 connected "$work/$name.sock"
}

# grid_one_node BROKER_PORT FRONTEND_PORT LOW-HIGH: the smallest grid, in a new
# CA: the broker, an open cluster c1 with its frontend and one node n1 whose
# helper listens on ports LOW-HIGH (socket $work/helper.sock, log helper.log).
# Exit 1 when a port is taken or a daemon does not come up.
grid_one_node() {
	grid_ca "frontend c1" "helper c1/n1"
	grid_ports_free "$1" "$2"
	grid_broker "$1" || exit 1
	grid_frontend c1 "$2" --kind open --public-address "$grid_ip" || exit 1
	grid_helper helper c1/n1 "$2" "$3" || exit 1
}
