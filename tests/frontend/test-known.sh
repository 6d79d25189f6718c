#!/usr/bin/env bash
#
# A frontend knows the addresses of its grid before they log in (issue 32):
# its nodes' declared ranges and its broker's address count as known in its
# handshake stage from the start, so that after a restart under attack a
# connection from one takes a stranger's place (on main every address was a
# stranger until a client there logged in: it was turned away).  The nodes'
# ranges cannot be loopback, so the check uses the broker's 127.0.0.1: no
# client logs in to this frontend, so only the configuration makes it known.
#
#   test-known.sh BUILD_DIR SRC_DIR
#
# Ports 27986-27987 belong to this test.  Exit status: 0 passed, 1 failed,
# 77 skipped.

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)
# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"
need_built "$broker" "$frontend"
need_commands python3 ss
grid_workdir test-known

stage=16 # the smallest stage max-handshakes takes
grid_ca "frontend c1"
grid_ports_free 27986 27987
grid_broker 27986 || exit 1
grid_frontend c1 27987 --kind nat --public-address 203.0.113.77 --addresses 198.51.100.0/26 \
	--max-handshakes "$stage" --log-level debug || exit 1
if logged "$work/frontend-c1.log" "known before login: 1 node range, the broker at 127.0.0.1"; then
	pass "the frontend names its node range and its broker as known"
else
	fail "the frontend names its node range and its broker as known"
fi

# kept FROM PORT: a connection from FROM that sends nothing stays in the stage for 1 s.
kept='
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 0))
s.connect(("127.0.0.1", int(sys.argv[2])))
s.settimeout(1)
try:
    sys.exit(1 if s.recv(1) == b"" else 0)
except socket.timeout:
    sys.exit(0)
except OSError:
    sys.exit(1)
'
if python3 "$src/tests/lib/stage-strangers.py" 127.0.0.1 27987 21 "$stage" -- \
	python3 -c "$kept" 127.0.0.1 27987 >"$out" 2>&1 && grep -qx full "$out"; then
	pass "strangers fill the stage and a connection from the broker's address takes a place"
else
	fail "strangers fill the stage and a connection from the broker's address takes a place"
fi
if python3 "$src/tests/lib/stage-strangers.py" 127.0.0.1 27987 41 "$stage" -- \
	python3 -c "$kept" 127.0.0.60 27987 >"$out" 2>&1; then
	fail "a stranger beyond the full stage is turned away"
else
	pass "a stranger beyond the full stage is turned away"
fi

echo "$passed passed, $failed failed"
((failed == 0))
