#!/usr/bin/env bash
# lab-reversed: the open site's node connects to nodes no connection can reach,
# behind a NAT and behind a symmetric NAT.  The broker plans `reversed`: the
# target's helper connects out, through its own router, to open1's listener
# and hands the socket to the target process; 64 MiB arrive intact and both
# qcg-cat ends report reversed.
#
#   open1 198.51.100.11 (ranks 1, 3: connect)
#        ^                               ^
#        |  connect-back through NAT     |  connect-back through symmetric NAT
#   nata1 198.18.1.11 (rank 0: listen)   sym1 198.18.3.11 (rank 2: listen)
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
scratch
JOB=$(new_job reversed)
size=$((64 << 20))
head -c "$size" /dev/urandom >"$WORK/in"

# transfer FROM TO RANK_TO RANK_FROM TECHNIQUE: 64 MiB FROM -> TO, with TECHNIQUE.
transfer() {
	local from=$1 to=$2 rto=$3 rfrom=$4 tech=$5 name="$1-$2" t0 listener sent acc
	cat_listen "$to" "$rto" "$name" --timeout 60
	listener=$BG_PID
	t0=$(ms)
	"$LAB" exec "$from" -- qcg-cat --job "$JOB" --rank "$rfrom" --json --timeout 20 \
		connect "$rto" <"$WORK/in" >/dev/null 2>"$WORK/$name.cerr" ||
		{ cat "$WORK/$name.cerr"; fail "$from -> $to: connect failed"; }
	wait_exit "$listener" 30 || { cat "$WORK/$name.err"; fail "$from -> $to: the listener failed"; }
	cmp "$WORK/in" "$WORK/$name.out" || fail "$from -> $to: out differs from in"
	sent=$(json_event "$WORK/$name.cerr" sent)
	acc=$(json_event "$WORK/$name.err" accepted)
	[ "$(echo "$sent" | json_field technique)" = "$tech" ] ||
		fail "$from -> $to: the connecting side used $(echo "$sent" | json_field technique), not $tech"
	[ "$(echo "$acc" | json_field technique)" = "$tech" ] ||
		fail "$from -> $to: the accepting side says $(echo "$acc" | json_field technique), not $tech"
	[ "$(echo "$acc" | json_field peer)" = "$rfrom" ] || fail "$from -> $to: accepted $acc"
	[ "$(echo "$sent" | json_field bytes)" = "$size" ] || fail "$from -> $to: sent $sent"
	note "$from -> $to: 64 MiB identical, $tech on both ends, setup $(echo "$sent" | json_field setup_us) us, $(($(ms) - t0)) ms"
}

transfer open1 nata1 0 1 reversed
transfer open1 sym1 2 3 reversed
