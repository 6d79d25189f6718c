#!/usr/bin/env bash
# lab-fallback: when the planned technique does not complete, the connect asks
# for the next one; the application sees one connect.
#
# 1. open1 drops inbound SYNs to its listening ports (an iptables rule in its
#    namespace, removed at the end): nata1's helper cannot connect back, so
#    open1 -> nata1 gives up on reversed after 5 s and punches a hole (a
#    simultaneous open needs no inbound SYN to be accepted; over IPv6, as
#    both nodes have IPv6 addresses); 64 MiB intact,
#    --json says holepunch on both ends.  The broker then forgets (restart).
# 2. nata1's helper crashes (qcg-lab service kill: its processes' contacts stay
#    published upstream): open1 -> nata1 fails with one error naming reversed,
#    holepunch and proxy and why each failed, once the proxy's pairing had no
#    progress for its 16 s timeout (a bound of silence, libqcgconn/README.md):
#    reversed 5 s, each punch 5 s (its reflector never pairs it; over IPv6,
#    then IPv4), traversing over IPv6 5 s where both helpers intercept (no
#    SYN comes through), proxy 16 s: 5 s for each attempt the error names
#    before the proxy, then 16 s.
# 3. nata1's helper is stopped cleanly (qcg-lab service stop: it withdraws its
#    processes' contacts): the rank is no longer published; the connect says so
#    when its timeout ends.  The helper is started again at the end.
#
#   open1 198.51.100.11 ---X--- nata1's helper connect-back (SYN dropped)
#        \--> proxy 203.0.113.20 <--/ nata1 198.18.1.11
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
[ -r "$LAB_STATE/etc/proxy.conf" ] || skip "the lab runs no qcg-proxy (no $LAB_STATE/etc/proxy.conf)"
command -v iptables >/dev/null || skip "iptables is not installed"
scratch
JOB=$(new_job fallback)
size=$((64 << 20))
head -c "$size" /dev/urandom >"$WORK/in"
ports=$(sed -n 's/^ports = \([0-9]*\)-\([0-9]*\)$/\1:\2/p' "$LAB_STATE/etc/helper-open1.conf")
[ -n "$ports" ] || fail "no port range in $LAB_STATE/etc/helper-open1.conf"
rule=(INPUT -p tcp --syn --dport "$ports" -j DROP)
restore() {
	"$LAB" exec open1 -- iptables -D "${rule[@]}" 2>/dev/null || true
	"$LAB" service start nata1-helper >/dev/null || true
	forget_outcomes || true
}
trap 'scratch_cleanup; restore' EXIT
forget_outcomes # a clean slate: nothing remembered between open and nata

# --- 1: connect-back blocked -> holepunch -----------------------------------
"$LAB" exec open1 -- iptables -I "${rule[@]}"
cat_listen nata1 0 fb --timeout 60
listener=$BG_PID
t0=$(ms)
"$LAB" exec open1 -- qcg-cat --job "$JOB" --rank 1 --json --timeout 20 connect 0 \
	<"$WORK/in" >/dev/null 2>"$WORK/fb.cerr" || { cat "$WORK/fb.cerr"; fail "open1 -> nata1: connect failed"; }
wait_exit "$listener" 30 || { cat "$WORK/fb.err"; fail "open1 -> nata1: the listener failed"; }
cmp "$WORK/in" "$WORK/fb.out" || fail "open1 -> nata1: out differs from in"
sent=$(json_event "$WORK/fb.cerr" sent)
acc=$(json_event "$WORK/fb.err" accepted)
[ "$(echo "$sent" | json_field technique)" = holepunch ] || fail "the connecting side says: $sent"
[ "$(echo "$acc" | json_field technique)" = holepunch ] || fail "the accepting side says: $acc"
setup=$(echo "$sent" | json_field setup_us)
[ "$setup" -ge 5000000 ] || fail "set up in $setup us: the reversed attempt did not run its 5 s"
# Over IPv6 where the lab gives open1 and nata1 IPv6 addresses (nata1's in
# nata's closed range: a punch there too), else over IPv4.
grep -Eq "job $JOB rank 1 \(open\) -> rank 0 \(nata/nata1\): holepunch( over IPv6)?; punch ordered to nata \(seq [0-9]*\), tried before: reversed" \
	"$LAB_STATE/log/broker.log" || fail "the broker did not plan hole punching after reversed"
note "open1 -> nata1 with open1's SYNs dropped: reversed gave up, a punched hole made it: 64 MiB identical, setup $setup us, $(($(ms) - t0)) ms"
"$LAB" exec open1 -- iptables -D "${rule[@]}"
forget_outcomes

# --- 2: the target's helper crashed -----------------------------------------
cat_listen nata1 2 crash --timeout 60
listener=$BG_PID
"$LAB" service kill nata1-helper
# Its process waits for the helper to come back (libqcgconn reconnects); its
# contact stays published upstream until the node's lease runs out.
t0=$(ms)
rc=0
"$LAB" exec open1 -- qcg-cat --job "$JOB" --rank 3 --timeout 16 connect 2 \
	</dev/null >/dev/null 2>"$WORK/crash.cerr" || rc=$?
elapsed=$(($(ms) - t0))
cat "$WORK/crash.cerr"
[ "$rc" -eq 1 ] || fail "exit $rc, not 1"
[ "$(wc -l <"$WORK/crash.cerr")" -eq 1 ] || fail "more than one line"
grep -Eq "^qcg-cat: connect to rank 2: timed out: reversed: rank 2 did not connect back within 5000 ms.*; holepunch( over IPv6: .*; holepunch over IPv4)?: .*; proxy: .*rank 2 did not come to the proxy" \
	"$WORK/crash.cerr" || fail "the error does not name reversed, holepunch and proxy and why"
before=$(grep -oE "(reversed|holepunch( over IPv[46])?|traversing( over IPv6)?): " "$WORK/crash.cerr" | wc -l)
want=$((before * 5000 + 16000))
[ "$elapsed" -ge $((want - 1000)) ] && [ "$elapsed" -lt $((want + 5000)) ] ||
	fail "failed after $elapsed ms: not 16 s after the proxy's preamble ($before attempts of 5 s before it: about $want ms)"
note "nata1's helper killed: one error naming reversed, holepunch and proxy after $elapsed ms"
kill -0 "$listener" 2>/dev/null || fail "rank 2's process ended with its helper: it should wait for it"
"$LAB" service start nata1-helper
kill "$listener" 2>/dev/null
wait "$listener" 2>/dev/null || true

# --- 3: the target's helper stopped cleanly ---------------------------------
cat_listen nata1 4 stop --timeout 60
listener=$BG_PID
"$LAB" service stop nata1-helper
# The helper withdrew its contacts; the process waits for the helper to come back.
t0=$(ms)
rc=0
"$LAB" exec open1 -- qcg-cat --job "$JOB" --rank 5 --timeout 4 connect 4 \
	</dev/null >/dev/null 2>"$WORK/stop.cerr" || rc=$?
elapsed=$(($(ms) - t0))
cat "$WORK/stop.cerr"
[ "$rc" -eq 1 ] && grep -q "connect to rank 4: no such rank in this job: rank 4 not published within 4000 ms" "$WORK/stop.cerr" ||
	fail "a withdrawn rank: exit $rc"
note "nata1's helper stopped: its processes withdrawn, 'not published' after $elapsed ms"
"$LAB" service start nata1-helper
kill "$listener" 2>/dev/null
wait "$listener" 2>/dev/null || true
