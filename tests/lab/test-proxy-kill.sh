#!/usr/bin/env bash
# lab-proxy-kill: qcg-proxy stops in the middle of a proxied transfer (sym1 ->
# nata1); both qcg-cat ends fail within seconds (8 s at most here, their
# connect timeout being 20 s), never hang: the receiver is
# reset while it reads, the sender while it waits for more input (it watches
# its connection).  The proxy is started again at the end, whatever happened.
#
#   sym1 (rank 1: 8 MiB, then idle input) --> proxy 203.0.113.20 --> nata1 (rank 0)
#                                             ^ qcg-lab service stop proxy
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
[ -r "$LAB_STATE/etc/proxy.conf" ] || skip "the lab runs no qcg-proxy (no $LAB_STATE/etc/proxy.conf)"
scratch
trap 'scratch_cleanup; "$LAB" service start proxy >/dev/null' EXIT
JOB=$(new_job proxykill)
part=$((8 << 20))

cat_listen nata1 0 recv --timeout 60
listener=$BG_PID
# The sender's input: 8 MiB, then nothing until it is killed (an application
# between two messages).
mkfifo "$WORK/feed"
{ head -c "$part" /dev/urandom; exec sleep 120; } >"$WORK/feed" &
BG_PIDS+=($!)
BG_IN=$WORK/feed BG_NAME=send run_bg sym1 qcg-cat --job "$JOB" --rank 1 --json --timeout 20 connect 0
sender=$BG_PID

received() { [ "$(stat -c %s "$WORK/recv.out" 2>/dev/null || echo 0)" -ge "$part" ]; }
poll 20 "8 MiB through the proxy" received || { cat "$WORK/send.err" "$WORK/recv.err"; fail "the transfer did not get going"; }
grep -q '"technique":"proxy"' "$WORK/recv.err" || fail "not proxied: $(cat "$WORK/recv.err")"

t0=$(ms)
"$LAB" service stop proxy
rc=0
wait_exit "$listener" 10 || rc=$?
[ "$rc" -eq 1 ] || { cat "$WORK/recv.err"; fail "the receiver exited $rc, not 1"; }
rc=0
wait_exit "$sender" 10 || rc=$?
[ "$rc" -eq 1 ] || { cat "$WORK/send.err"; fail "the sender exited $rc, not 1"; }
elapsed=$(($(ms) - t0))
[ "$elapsed" -lt 8000 ] || fail "the ends took $elapsed ms to fail"
grep -q "listen: connection from rank 1: read:" "$WORK/recv.err" ||
	fail "receiver: $(cat "$WORK/recv.err")"
grep -q "connect to rank 0: the connection \(broke\|was closed\)" "$WORK/send.err" ||
	fail "sender: $(cat "$WORK/send.err")"
note "proxy stopped after 8 MiB: both ends failed in $elapsed ms"
note "receiver: $(tail -n 1 "$WORK/recv.err")"
note "sender: $(tail -n 1 "$WORK/send.err")"
