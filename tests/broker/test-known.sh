#!/usr/bin/env bash
#
# A restarted broker knows its clusters' frontends before they log in
# (issue 32): the state file keeps the addresses each frontend connected and
# registered from, and after a restart a frontend's first connection is
# served while strangers fill the handshake stage (on main every address was
# a stranger until it logged in again: the frontend was refused).
#
#   test-known.sh BUILD_DIR SRC_DIR
#
# Port 27985 belongs to this test.  Exit status: 0 passed, 1 failed, 77 skipped.

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)
# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"
call=$build/tests/lib/soap-call
need_built "$broker" "$call"
need_commands python3 ss
grid_workdir test-known

port=27985
state=$work/state/broker.state
stage=16 # the smallest stage max-handshakes takes
grid_ca "frontend c1"
grid_ports_free "$port"
fe_call() { "$call" --url "$broker_url" --ca "$ca/ca.crt" --cert "$ca/frontend-c1.pem" "$@"; }

grid_broker "$port" --state-file "$state" --max-handshakes "$stage" || exit 1
if fe_call registerCluster name=c1 kind=nat publicAddress=203.0.113.77 >"$out" 2>&1; then
	pass "c1's frontend registers from 127.0.0.1, public address 203.0.113.77"
else
	fail "c1's frontend registers from 127.0.0.1, public address 203.0.113.77"
fi
kill "${pids[0]}"
wait_exit "${pids[0]}" 100 || true
grep -s '^frontend ' "$state" >"$out" || true
if grep -qx 'frontend c1 203.0.113.77 127.0.0.1' "$out"; then
	pass "the state file keeps c1's frontend addresses"
else
	fail "the state file keeps c1's frontend addresses"
fi

grid_broker "$port" --state-file "$state" --max-handshakes "$stage" --log-level debug || exit 1
if python3 "$src/tests/lib/stage-strangers.py" 127.0.0.1 "$port" 21 "$stage" -- \
	"$call" --url "$broker_url" --ca "$ca/ca.crt" --cert "$ca/frontend-c1.pem" stats \
	>"$out" 2>&1 && grep -qx full "$out"; then
	pass "restarted, strangers fill the stage and c1's frontend is served at once"
else
	fail "restarted, strangers fill the stage and c1's frontend is served at once"
fi
if logged "$work/broker.log" "takes its place"; then
	pass "a stranger's handshake gave way to the known frontend"
else
	echo "broker log lacks a cut" >"$out"
	fail "a stranger's handshake gave way to the known frontend"
fi

echo "$passed passed, $failed failed"
((failed == 0))
