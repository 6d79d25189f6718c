#!/usr/bin/env bash
# lab-technique-unavailable: pairs that no direct connection can join get the
# technique the broker's plan table (docs/architecture.md, "Plans";
# docs/design.md's preference order) gives them, never a direct one:
#
#   open1 -> nata1   reversed    the initiator is reachable, the target is not
#   open1 -> fw1     reversed
#   nata1 -> fw1     traversing  firewalled target whose helper can intercept (root)
#   nata1 -> natb1   holepunch   two NATs, neither symmetric
#   sym1  -> nata1   proxy       a symmetric NAT and an unreachable target
#
# Techniques are being added: where this version cannot make the connection, the
# connect fails at once (well under its --timeout) with "not available" naming the
# technique; where it can, the connection is made with that technique or a later
# one of the preference order (e.g. proxy when holepunch is missing) and carries the
# data intact.  Each pair has a listening rank of its own.
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
scratch
JOB=$(new_job technique)
ORDER=(direct reversed traversing holepunch proxy)

# rank_of TECHNIQUE: its place in the preference order.
rank_of() {
	local i
	for i in "${!ORDER[@]}"; do [ "${ORDER[$i]}" = "$1" ] && { echo "$i"; return; }; done
	echo 99
}

# pair FROM TO TECHNIQUE RANK_TO RANK_FROM
pair() {
	local from=$1 to=$2 tech=$3 rto=$4 rfrom=$5 rc=0 t0 elapsed name="$1-$2" listener used
	cat_listen "$to" "$rto" "$name" --timeout 60
	listener=$BG_PID
	echo "$name $RANDOM" >"$WORK/$name.in"
	t0=$(ms)
	"$LAB" exec "$from" -- qcg-cat --job "$JOB" --rank "$rfrom" --json --timeout 10 connect "$rto" \
		<"$WORK/$name.in" >/dev/null 2>"$WORK/$name.connect" || rc=$?
	elapsed=$(($(ms) - t0))
	cat "$WORK/$name.connect"
	if [ "$rc" -eq 0 ]; then
		used=$(json_event "$WORK/$name.connect" sent | json_field technique)
		[ "$(rank_of "$used")" -ge "$(rank_of "$tech")" ] && [ "$(rank_of "$used")" -lt 99 ] ||
			fail "$from -> $to: connected with '$used', the plan table gives $tech"
		wait_exit "$listener" 10 || fail "$from -> $to: the listener failed"
		cmp "$WORK/$name.in" "$WORK/$name.out" || fail "$from -> $to: the data differ"
		note "$from -> $to: made with $used ($tech first in the plan table) in $elapsed ms"
		return
	fi
	[ "$rc" -eq 1 ] || fail "$from -> $to: exit $rc, expected 1"
	grep -q "technique that is not available" "$WORK/$name.connect" &&
		grep -qw "$tech" "$WORK/$name.connect" ||
		fail "$from -> $to: the error does not say $tech is not available"
	[ "$elapsed" -lt 3000 ] || fail "$from -> $to: failed after $elapsed ms, not at once (timeout 10 s)"
	note "$from -> $to: needs $tech, refused in $elapsed ms"
}

pair open1 nata1 reversed 0 10
pair open1 fw1 reversed 1 11
pair nata1 fw1 traversing 2 12
pair nata1 natb1 holepunch 3 13
pair sym1 nata1 proxy 4 14
