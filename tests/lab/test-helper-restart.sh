#!/usr/bin/env bash
# lab-helper-restart: a running process survives its node's helper being
# killed (-9) and started again (issue 19).  libqcgconn connects to the new
# helper, says HELLO again and publishes the same listener again; the
# connection made before keeps carrying data (it never went through the
# helper), and a new connection to the rank succeeds.
#
#   nata1 rank 0 (qcg-lab-accept, 2 connections)  <-- open1 rank 1: 1 MiB,
#     ^ helper-nata1 killed -9, started again        [restart], 1 MiB more
#                                                 <-- open2 rank 2: new, after
# Whether the broker keeps the killed helper's contact for a while or drops
# the node's contacts when the new helper registers, the re-PUBLISH makes the
# rank reachable again.  nata1's helper runs again at the end, whatever happened.
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
[ -x "$LAB_ACCEPT" ] || die "qcg-lab-accept is not built: $LAB_ACCEPT"
scratch
trap 'scratch_cleanup; "$LAB" service start nata1-helper >/dev/null 2>&1 || true' EXIT
JOB=$(new_job helper-restart)
part=$((1 << 20))

BG_NAME=accept run_bg nata1 env QCG_JOB="$JOB" QCG_RANK=0 "$LAB_ACCEPT" 2 90
acceptor=$BG_PID
wait_published "$acceptor" "$WORK/accept.out" '^listening' "rank 0 on nata1"
port=$(sed -n 's/^listening //p' "$WORK/accept.out")

# Rank 1's input: 1 MiB, then (once the helper is back) 1 MiB more and EOF.
head -c "$part" /dev/urandom >"$WORK/in1"
head -c "$part" /dev/urandom >"$WORK/in2"
mkfifo "$WORK/feed"
{ cat "$WORK/in1"; while [ ! -e "$WORK/go" ]; do sleep 0.1; done; cat "$WORK/in2"; } >"$WORK/feed" &
BG_PIDS+=($!)
BG_IN=$WORK/feed BG_NAME=old run_bg open1 qcg-cat --job "$JOB" --rank 1 --timeout 20 connect 0
old=$BG_PID
connected() { grep -q 'connected to rank 0' "$WORK/old.err" 2>/dev/null; }
poll 20 "rank 1 on open1 connected to rank 0" connected || { cat "$WORK/old.err"; fail "no first connection"; }
note "old connection: $(cat "$WORK/old.err")"

"$LAB" service kill nata1-helper
# Down a second, as a crashed helper is until systemd starts it again (the
# unit's RestartSec is 2 s): a duration to live through, not a wait for
# something (kill waited for the process to be gone).
sleep 1
t0=$(ms)
"$LAB" service start nata1-helper >/dev/null || fail "nata1's helper did not start again"
note "nata1's helper started again in $(($(ms) - t0)) ms"

# The old connection carries the second MiB; rank 1 ends (EOF) and rank 0
# counts both.
touch "$WORK/go"
rc=0
wait_exit "$old" 30 || rc=$?
[ "$rc" -eq 0 ] || { cat "$WORK/old.err"; fail "rank 1 exited $rc after the restart"; }
poll 20 "rank 0 read the old connection to its end" grep -q '^accepted 1 ' "$WORK/accept.out" ||
	{ cat "$WORK/accept.out" "$WORK/accept.err"; fail "rank 0 did not finish the old connection"; }
grep -qx "accepted 1 [a-z]* $((2 * part))" "$WORK/accept.out" ||
	fail "the old connection did not carry both MiB: $(cat "$WORK/accept.out")"

# A new connection to rank 0, made after the restart.
echo "new after the restart" >"$WORK/in3"
t1=$(ms)
"$LAB" exec open2 -- qcg-cat --job "$JOB" --rank 2 --json --timeout 20 connect 0 \
	<"$WORK/in3" >/dev/null 2>"$WORK/new.err" ||
	{ cat "$WORK/new.err" "$WORK/accept.err"; fail "open2 rank 2 -> nata1 rank 0 failed after the restart"; }
note "new connection made and done in $(($(ms) - t1)) ms: $(json_event "$WORK/new.err" sent)"
wait_exit "$acceptor" 20 || { cat "$WORK/accept.err"; fail "rank 0 did not accept the new connection"; }
grep -qx "accepted 2 [a-z]* $(wc -c <"$WORK/in3")" "$WORK/accept.out" ||
	fail "rank 0 did not get rank 2's data: $(cat "$WORK/accept.out")"
note "rank 0 (listening on port $port) accepted: $(tr '\n' ';' <"$WORK/accept.out")"
