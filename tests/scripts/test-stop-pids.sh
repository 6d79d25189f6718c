#!/usr/bin/env bash
# scripts-stop-pids: tests/lib/common.sh's stop_pids signals only what the
# test still owns.  A kept pid whose process ended may name another process
# by now, or a thread of one (a signal to a thread id stops its whole
# process): those must be left alone, while the test's own children and a
# daemon that forked itself away from the test are stopped.
#
#   tests/scripts/test-stop-pids.sh SRC
set -euo pipefail
src=${1:?usage: test-stop-pids.sh SRC}
# shellcheck source=tests/lib/common.sh
. "$src/tests/lib/common.sh"
stop_secs=5

# A bystander: not started by this test (no QCG_TEST_OWNER, not below this
# shell), with a second thread; python3 stands in for another test's daemon.
bystander=$(mktemp)
trap 'kill "$(head -n1 "$bystander")" 2>/dev/null || true; rm -f "$bystander"' EXIT
env -u QCG_TEST_OWNER setsid -f python3 -c '
import os, sys, threading, time
t = threading.Thread(target=time.sleep, args=(60,), daemon=True)
t.start()
time.sleep(0.2)
with open(sys.argv[1], "w") as f:
    f.write("%d\n%d\n" % (os.getpid(), t.native_id))
time.sleep(60)' "$bystander"
wait_for "the bystander's pids" 50 test -s "$bystander"
two_lines() { [ "$(wc -l <"$bystander")" -ge 2 ]; }
wait_for "both of the bystander's pids" 50 two_lines
pid=$(sed -n 1p "$bystander")
tid=$(sed -n 2p "$bystander")

# The test's own: a child, and a daemon that left the process tree.
sleep 60 &
child=$!
setsid -f sleep 61
wait_for "the forked-away sleep" 50 pgrep -f -x 'sleep 61'
daemon=$(pgrep -f -x 'sleep 61' | head -n1)

# expect yes|no WHAT CMD...: CMD succeeds (yes) or fails (no).
expect() {
	local want=$1 what=$2 got=no
	shift 2
	"$@" && got=yes
	if [ "$got" = "$want" ]; then pass "$what"; else fail "$what"; fi
}
expect yes "a child is owned" owned_pid "$child"
expect yes "a forked-away daemon with the test's mark is owned" owned_pid "$daemon"
expect no "another process is not owned" owned_pid "$pid"
expect no "another process's thread id is not owned" owned_pid "$tid"
expect no "pid 1 is not owned" owned_pid 1

# The stale pids first, as a test's kept list would hold them.
stop_pids "$tid" "$pid" "$child" "$daemon"
expect yes "the bystander runs on" kill -0 "$pid"
expect no "the child is stopped" kill -0 "$child"
expect yes "the forked-away daemon is stopped" wait_gone "$daemon" 50
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
