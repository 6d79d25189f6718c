#!/usr/bin/env bash
# lab-direct-site: two nodes of one NATed site connect directly on their LAN.
#
#   nata1 (198.18.1.11) --- LAN 198.18.1.0/24 ---> nata2 (198.18.1.12)
#   qcg-cat rank 1 connect 0                       qcg-cat rank 0 listen
#
# 1 MiB arrives intact; both sides say technique direct, to nata2's private address.
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
scratch
JOB=$(new_job direct-site)

head -c $((1 << 20)) /dev/urandom >"$WORK/in"
cat_listen nata2 0 listen --timeout 20
listener=$BG_PID
addr=$(json_event "$WORK/listen.err" listening | json_field address)
[ "$addr" = 198.18.1.12 ] || fail "nata2 published $addr, not its private address 198.18.1.12"

"$LAB" exec nata1 -- qcg-cat --job "$JOB" --rank 1 --json --timeout 20 connect 0 \
	<"$WORK/in" >/dev/null 2>"$WORK/connect.err" || { cat "$WORK/connect.err"; fail "connect failed"; }
wait_exit "$listener" 10 || { cat "$WORK/listen.err"; fail "the listener failed"; }

cmp "$WORK/in" "$WORK/listen.out" || fail "the data differ"
sent=$(json_event "$WORK/connect.err" sent)
[ "$(echo "$sent" | json_field technique)" = direct ] || fail "connect: not direct: $sent"
[ "$(echo "$sent" | json_field bytes)" = $((1 << 20)) ] || fail "connect: not 1 MiB: $sent"
acc=$(json_event "$WORK/listen.err" accepted)
[ "$(echo "$acc" | json_field technique)" = direct ] && [ "$(echo "$acc" | json_field peer)" = 1 ] ||
	fail "listen: not rank 1 direct: $acc"
note "nata1 -> nata2 (198.18.1.12): 1 MiB intact, direct, setup $(echo "$sent" | json_field setup_us) us"
