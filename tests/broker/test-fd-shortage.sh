#!/usr/bin/env bash
#
# A broker whose descriptors run out under a flood of connections (issue
# 32): its accept fails with EMFILE.  It must neither stop nor spin, log the
# shortage once (not once per failure: ten lines a second before), count
# every failure in --stats (accept_failed_descriptors), and serve again once
# the flood has gone.  The real broker on 127.0.0.1, its
# descriptors cut to 64 with prlimit while it runs (lowering needs no
# privilege), 200 idle connections from 200 addresses (its stage holds 16
# per address) for 3 s: well within their 5 s handshake deadline, so only
# the shortage turns them away.
#
#   test-fd-shortage.sh BUILD_DIR SRC_DIR
#
# Port 27992 belongs to this test.  Exit status: 0 passed, 1 failed, 77 skipped.

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)
# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"
need_built "$broker"
need_commands openssl ss prlimit python3
grid_workdir test-fd-shortage

grid_ca
grid_ports_free 27992
grid_broker 27992 || exit 1
pid=${pids[0]}
failed_are() { broker_stats | grep -q "\"accept_failed_descriptors\":$1[,}]"; }
within "before the flood, --stats counts no accept failure" 50 failed_are 0
if prlimit --pid "$pid" --nofile=64:64 && [[ $(prlimit --pid "$pid" --nofile --output SOFT --noheadings | tr -d " ") == 64 ]]; then
	pass "the broker's descriptors are cut to 64"
else
	fail "the broker's descriptors are cut to 64"
fi
python3 "$src/tests/broker/idle-from-many.py" 127.0.0.1 27992 200 3
shortage="accept: Too many open files"
if logged "$work/broker.log" "$shortage"; then
	pass "200 connections at once: its accept ran out of descriptors"
else
	fail "200 connections at once: its accept ran out of descriptors" "$work/broker.log"
fi
n=$(grep -c "$shortage" "$work/broker.log" || true)
if [[ $n -eq 1 ]]; then
	pass "... which it logged once in those 3 s, not once per failure"
else
	fail "... which it logged once in those 3 s, not once per failure ($n lines)" "$work/broker.log"
fi
if kill -0 "$pid" 2>/dev/null; then
	pass "... and it runs on"
else
	fail "... and it runs on" "$work/broker.log"
fi
within "the flood gone, it serves again (--stats)" 50 contacts_are 0
# Each failure is counted, not only the one line logged.
count=$(broker_stats | sed -n 's/.*"accept_failed_descriptors":\([0-9]*\).*/\1/p')
if [[ ${count:-0} -gt 1 ]]; then
	pass "--stats counts every failure: accept_failed_descriptors $count, 1 line logged"
else
	fail "--stats counts every failure: accept_failed_descriptors ${count:-none}, 1 line logged" "$work/broker.log"
fi
echo "$passed passed, $failed failed"
((failed == 0))
