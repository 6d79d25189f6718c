#!/usr/bin/env bash
# lab-technique-unavailable: pairs that no direct connection can join fail at once
# (well under their --timeout) with the technique the broker's plan table
# (docs/architecture.md, "Plans") says they would need:
#
#   open1 -> nata1   reversed    the initiator is reachable, the target is not
#   open1 -> fw1     reversed
#   nata1 -> fw1     traversing  firewalled target whose helper can intercept (root)
#   nata1 -> natb1   holepunch   two NATs, neither symmetric
#   sym1  -> nata1   proxy       a symmetric NAT and an unreachable target
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
scratch
JOB=$(new_job technique)

cat_listen nata1 0 nata1 --timeout 60
cat_listen natb1 1 natb1 --timeout 60
cat_listen fw1 2 fw1 --timeout 60

# needs FROM RANK_FROM RANK_TO TECHNIQUE
needs() {
	local from=$1 rfrom=$2 rto=$3 tech=$4 rc=0 t0 elapsed out
	t0=$(ms)
	out=$("$LAB" exec "$from" -- qcg-cat --job "$JOB" --rank "$rfrom" --timeout 10 connect "$rto" \
		</dev/null 2>&1) || rc=$?
	elapsed=$(($(ms) - t0))
	echo "$out"
	[ "$rc" -eq 1 ] || fail "$from -> rank $rto: exit $rc, expected 1"
	# The library's words, then the broker's reason (which names the clusters).
	echo "$out" | grep -q "technique that is not available: rank $rto needs technique $tech: cluster " ||
		fail "$from -> rank $rto: the error does not name $tech"
	[ "$elapsed" -lt 3000 ] || fail "$from -> rank $rto: failed after $elapsed ms, not at once (timeout 10 s)"
	note "$from -> rank $rto: needs $tech, refused in $elapsed ms"
}

needs open1 10 0 reversed
needs open1 11 2 reversed
needs nata1 12 2 traversing
needs nata1 13 1 holepunch
needs sym1 14 0 proxy
