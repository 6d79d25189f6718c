#!/usr/bin/env bash
# lab-proxy: nodes that cannot reach each other either way, a symmetric NAT and
# a NAT, connect through qcg-proxy: both connect out to it, each presenting its
# one-time token, and the proxy splices them; 64 MiB each way arrive intact and
# both ends report proxy.  Inside the symmetric-NAT site the connection is
# direct.
#
#   sym1 198.18.3.11 --sym NAT--+                        +--NAT-- nata1 198.18.1.11
#                               +--> proxy 203.0.113.20 <-+
#   sym1 <----- direct, inside the site -----> sym2 198.18.3.12
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
[ -r "$LAB_STATE/etc/proxy.conf" ] || skip "the lab runs no qcg-proxy (no $LAB_STATE/etc/proxy.conf)"
scratch
JOB=$(new_job proxy)
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

transfer sym1 nata1 0 1 proxy
transfer nata1 sym1 2 3 proxy
transfer sym1 sym2 4 5 direct
