#!/usr/bin/env bash
# Direct reach over the lab's sites (issue 33): one connection (qcg-cat, 1 byte)
# from the first compute node of every site to that of every other, with
# `up --rejecting --v6` (eight sites: open, fw, nata, natb, sym, the rejecting
# rst and unr, the IPv6-only v6).  Prints the matrix of techniques, with the
# family of each connection ("4" or "6"), and how many pairs went through the
# proxy (relayed) or failed.  A fresh lab: no technique failed before between
# two sites, so each pair gets the broker's first choice.
#   bench/site-reach.sh [DELAY_MS]     (root, under the lab lock; QCG_BUILD_DIR)
set -euo pipefail
DELAY=${1:-0}
REPO=$(cd "$(dirname "$0")/.." && pwd)
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$REPO/build}
LAB=$REPO/lab/qcg-lab
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"; "$LAB" down >/dev/null 2>&1 || true' EXIT
"$LAB" down >/dev/null 2>&1 || true
"$LAB" up --rejecting --v6 --delay "$DELAY" >/dev/null
JOB=reach-$$
. "$REPO/bench/listening.sh"
NODES="open1 fw1 nata1 natb1 sym1 rst1 unr1 v61"
rank=0 relayed=0 failed=0 pairs=0
printf "%-6s" "from"
for to in $NODES; do printf " %-13s" "$to"; done
echo
for from in $NODES; do
	printf "%-6s" "$from"
	for to in $NODES; do
		if [ "$from" = "$to" ]; then
			printf " %-13s" "-"
			continue
		fi
		line=$(cat_once "$from" "$to" $rank $((rank + 1)))
		rank=$((rank + 2)) pairs=$((pairs + 1))
		if [ -z "$line" ]; then
			cell=failed failed=$((failed + 1))
			echo "$from -> $to: $(tail -n 1 "$WORK/c")" >>"$WORK/errors"
		else
			tech=$(echo "$line" | sed 's/.*"technique":"\([a-z]*\)".*/\1/')
			fam=4
			[[ $line == *'"address":"['* ]] && fam=6
			cell="$tech/$fam"
			[ "$tech" != proxy ] || relayed=$((relayed + 1))
		fi
		printf " %-13s" "$cell"
	done
	echo
done
echo "$pairs pairs: $((pairs - relayed - failed)) without a relay, $relayed through the proxy, $failed failed (delay $DELAY ms per WAN link)"
[ ! -s "$WORK/errors" ] || { echo "failures:"; cat "$WORK/errors"; }
