#!/usr/bin/env bash
# lab-direct-open: a node behind a NAT, one behind a firewall and one behind a
# symmetric NAT each connect to a node of the open site, directly (outbound through
# their own router); 64 MiB of random data arrive intact.  The first pair is the
# issue's done-when, run as a user would:
#
#   qcg-lab exec open1 -- qcg-cat --job J --rank 0 listen > out
#   qcg-lab exec nata1 -- qcg-cat --job J --rank 1 connect 0 < in
#
#   nata1 198.18.1.11 --NAT 203.0.113.66--+
#   fw1   198.51.100.75 --firewall--------+--> internet --> open1 198.51.100.11 (rank 0)
#   sym1  198.18.3.11 --sym NAT .98-------+              \-> open2 198.51.100.12 (ranks 2, 4)
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
scratch
JOB=$(new_job direct-open)
size=$((64 << 20))
head -c "$size" /dev/urandom >"$WORK/in"

# transfer FROM TO RANK_TO RANK_FROM
transfer() {
	local from=$1 to=$2 rto=$3 rfrom=$4 name="$1-$2" t0 listener sent acc
	if [ "$name" = nata1-open1 ]; then
		# Exactly the issue's commands (plus --json on the connect, for the technique).
		"$LAB" exec open1 -- qcg-cat --job "$JOB" --rank 0 listen >"$WORK/$name.out" \
			2>"$WORK/$name.lerr" &
		listener=$!
		BG_PIDS+=("$listener")
		wait_published "$listener" "$WORK/$name.lerr" "rank 0 listening" "rank 0 on open1"
	else
		cat_listen "$to" "$rto" "$name" --timeout 30
		listener=$BG_PID
		mv "$WORK/$name.err" "$WORK/$name.lerr"
	fi
	t0=$(ms)
	"$LAB" exec "$from" -- qcg-cat --job "$JOB" --rank "$rfrom" --json connect "$rto" \
		<"$WORK/in" >/dev/null 2>"$WORK/$name.cerr" ||
		{ cat "$WORK/$name.cerr"; fail "$from -> $to: connect failed"; }
	wait_exit "$listener" 20 || { cat "$WORK/$name.lerr"; fail "$from -> $to: the listener failed"; }
	cmp "$WORK/in" "$WORK/$name.out" || fail "$from -> $to: out differs from in"
	sent=$(json_event "$WORK/$name.cerr" sent)
	[ "$(echo "$sent" | json_field technique)" = direct ] ||
		fail "$from -> $to: technique is not direct: $sent"
	[ "$(echo "$sent" | json_field bytes)" = "$size" ] || fail "$from -> $to: sent $sent"
	note "$from -> $to: 64 MiB identical, technique direct, setup $(echo "$sent" | json_field setup_us) us, $(($(ms) - t0)) ms"
}

transfer nata1 open1 0 1
transfer fw1 open2 2 3
# Under --json the listener's own lines are JSON; the accepted peer is the sym1 rank.
transfer sym1 open2 4 5
acc=$(json_event "$WORK/sym1-open2.lerr" accepted)
[ "$(echo "$acc" | json_field peer)" = 5 ] || fail "open2 did not accept rank 5: $acc"
