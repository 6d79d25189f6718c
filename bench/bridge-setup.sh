#!/usr/bin/env bash
# How long an IPv6-only node and an IPv4-only one (v61 and fw1 of `qcg-lab up
# --v6`) take to connect, each way, with two trees in the same run: ROUNDS
# rounds alternating BASE and this tree (a fresh lab from each tree's own
# lab/qcg-lab and build/ per round), COUNT qcg-cat connects of 1 byte each way
# per round.  Per tree and direction: how many connected and with what
# technique, the median wall time from starting `qcg-cat connect` to its exit
# (a failure's time too), the range of the rounds' medians, and the median of
# qcg-cat's setup_us where it connected.
#   bench/bridge-setup.sh ROUNDS COUNT BASE_TREE     (root; under the lab lock)
#   e.g. BASE_TREE a worktree of main with build/ built: before and after.
set -euo pipefail
ROUNDS=${1:?ROUNDS}
COUNT=${2:?COUNT}
BASE=$(cd "${3:?BASE_TREE (a checkout with build/)}" && pwd)
NEW=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
LAB=$NEW/lab/qcg-lab
trap 'rm -rf "$WORK"; QCG_BUILD_DIR=$NEW/build "$LAB" down >/dev/null 2>&1 || true' EXIT
. "$NEW/bench/stats.sh" # median, spread
. "$NEW/bench/listening.sh"
ms() { date +%s%3N; }
rank=0

# one FROM TO: "wall_ms technique setup_us" of one connect (technique "failed"
# and setup_us 0 when it did not connect).
one() {
	local from=$1 to=$2 rto=$rank rfrom=$((rank + 1)) lpid t0 t1 line
	rank=$((rank + 2))
	"$LAB" exec "$to" -- qcg-cat --job "$JOB" --rank "$rto" --json --timeout 90 listen \
		>/dev/null 2>"$WORK/l" &
	lpid=$!
	listening "$WORK/l" || true # the connect's failure is the round's result
	t0=$(ms)
	line=$(echo x | "$LAB" exec "$from" -- qcg-cat --job "$JOB" --rank "$rfrom" --json --timeout 60 \
		connect "$rto" 2>&1 >/dev/null | grep '"sent"' || true)
	t1=$(ms)
	kill "$lpid" 2>/dev/null || true
	wait "$lpid" 2>/dev/null || true
	if [ -n "$line" ]; then
		echo "$((t1 - t0)) $(sed 's/.*"technique":"\([a-z]*\)","setup_us":\([0-9]*\).*/\1 \2/' <<<"$line")"
	else
		echo "$((t1 - t0)) failed 0"
	fi
}

for ((r = 1; r <= ROUNDS; r++)); do
	for tree in base new; do
		dir=$BASE
		[ "$tree" = new ] && dir=$NEW
		LAB=$dir/lab/qcg-lab
		export QCG_BUILD_DIR=$dir/build
		"$LAB" down >/dev/null 2>&1 || true
		"$LAB" up --v6 >"$WORK/up.log" 2>&1 || { cat "$WORK/up.log"; exit 1; }
		JOB=bench-bridge-$$-$r-$tree
		rank=0
		for pair in v61:fw1 fw1:v61; do
			for _ in $(seq 1 "$COUNT"); do
				echo "$r $(one "${pair%:*}" "${pair#*:}")" >>"$WORK/$tree-$pair"
			done
		done
		"$LAB" down >/dev/null 2>&1 || true
		echo "round $r/$ROUNDS: $tree done ($(date +%T))" >&2
	done
done

# "median [min-max of the rounds' medians]" of the wall times in FILE.
stat() {
	local all rounds
	all=$(awk '{ print $2 }' "$1" | median)
	rounds=$(for ((r = 1; r <= ROUNDS; r++)); do awk -v r=$r '$1 == r { print $2 }' "$1" | median; done | sort -n)
	echo "$all [$(head -n 1 <<<"$rounds")-$(tail -n 1 <<<"$rounds")]"
}
printf "%-10s %-6s %-12s %-28s %s\n" pair tree connected "wall ms: median [rounds]" "setup_us median"
for pair in v61:fw1 fw1:v61; do
	for tree in base new; do
		f=$WORK/$tree-$pair
		ok=$(awk '$3 != "failed"' "$f" | wc -l)
		tech=$(awk '{ print $3 }' "$f" | sort | uniq -c | sort -rn | awk 'NR == 1 { print $2 }')
		printf "%-10s %-6s %-12s %-28s %s\n" "${pair/:/->}" "$tree" "$ok/$((ROUNDS * COUNT)) $tech" \
			"$(stat "$f")" "$(awk '$3 != "failed" { print $4 }' "$f" | median)"
	done
done
