#!/usr/bin/env bash
# Connection setup between two nodes behind stateful IPv6 firewalls (issue 33;
# hole punching over IPv6 on a build without traversing over IPv6, traversing
# over IPv6 on one with it, where both helpers intercept):
# v61 (the IPv6-only site, `up --v6`) and nata1 (dual-stack, NAT44), both
# directions, COUNT connections each (qcg-cat, 1 byte), the directions
# alternating.  Per direction: the techniques used, the median [min-max] of the
# connecting side's setup time, and of the wall time of the whole qcg-cat
# connect (which is all a failed connect has: how long until it gave up).
#   bench/ipv6-punch.sh [COUNT] [DELAY_MS]     (root, under the lab lock; QCG_BUILD_DIR)
# To compare two builds, run it with each build's QCG_BUILD_DIR, alternating.
set -euo pipefail
COUNT=${1:-5}
DELAY=${2:-5}
REPO=$(cd "$(dirname "$0")/.." && pwd)
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$REPO/build}
LAB=$REPO/lab/qcg-lab
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"; "$LAB" down >/dev/null 2>&1 || true' EXIT
"$LAB" up --v6 --delay "$DELAY" >/dev/null
JOB=bench-$$
rank=0
. "$REPO/bench/listening.sh"
# stat: "median [min-max]" of the numbers on stdin.
stat() {
	sort -n | awk '{ v[NR] = $1 } END {
		if (NR == 0) { print "-"; exit }
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "%g [%g-%g]", m, v[1], v[NR] }'
}

# one FROM TO: "technique setup_ms wall_ms" of one connection ("failed - wall_ms").
one() {
	local from=$1 to=$2 line
	line=$(cat_once "$from" "$to" $rank $((rank + 1)))
	rank=$((rank + 2))
	if [ -n "$line" ]; then
		echo "$line" | sed 's/.*"technique":"\([a-z]*\)","setup_us":\([0-9]*\).*/\1 \2/' |
			awk -v w="$(cat "$WORK/wall")" '{ printf "%s %.1f %d\n", $1, $2 / 1000, w }'
	else
		echo "failed - $(cat "$WORK/wall")"
		echo "$from -> $to: $(tail -n 1 "$WORK/c")" >>"$WORK/errors"
	fi
}

PAIRS="v61:nata1 nata1:v61"
for ((i = 1; i <= COUNT; i++)); do
	for pair in $PAIRS; do
		one "${pair%:*}" "${pair#*:}" >>"$WORK/$pair"
	done
done
printf "delay %d ms per WAN link; %d connections per direction, alternating\n" "$DELAY" "$COUNT"
for pair in $PAIRS; do
	f=$WORK/$pair
	printf "%-14s %s; setup ms %s; wall ms %s\n" "${pair/:/ -> }" \
		"$(awk '{ print $1 }' "$f" | sort | uniq -c | awk '{ printf "%s%s %d", (NR > 1 ? ", " : ""), $2, $1 }')" \
		"$(awk '$2 != "-" { print $2 }' "$f" | stat)" "$(awk '{ print $3 }' "$f" | stat)"
done
[ ! -s "$WORK/errors" ] || { echo "failures, the last of each:"; tac "$WORK/errors" | sort -s -u -t: -k1,1; }
