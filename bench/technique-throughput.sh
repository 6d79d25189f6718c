#!/usr/bin/env bash
# Throughput of a connection made by each technique against plain TCP, in the
# lab, in one run: each round sends SIZE MiB once over every path below, in
# turn, and the table gives the median of ROUNDS per path and its ratio to
# plain TCP over the same kind of route (two WAN links, the same delay and rate).
#
#   bench/technique-throughput.sh [DELAY_MS] [RATE_MBIT] [SIZE_MIB] [ROUNDS]
#       (root; QCG_BUILD_DIR, default build/; RATE 0 = no rate limit)
#
# Paths (technique as qcg-cat reports it on the connecting side):
#   plain       socat nata1 -> open1 (nata1's NAT lets it out, open1 accepts),
#               with qcg-cat's 256 KiB buffer (socat's default 8 KiB halves it)
#   direct      qcg-cat nata1 -> open1
#   reversed    qcg-cat open1 -> fw1
#   traversing  qcg-cat nata1 -> fw1
#   holepunch   qcg-cat nata1 -> natb1
#   proxy       qcg-cat sym1 -> natb1 (through qcg-proxy on the proxy host)
# Once made, every connection but the proxy's is one kernel TCP connection
# between the two nodes, so each should carry what plain TCP carries; the
# proxy's crosses one more host (splice there).  Time is from the sender's
# start to both ends' exit, setup included (about 50-90 ms with a 5 ms delay).
set -euo pipefail
DELAY=${1:-5}
RATE=${2:-1000}
SIZE=${3:-128}
ROUNDS=${4:-3}
REPO=$(cd "$(dirname "$0")/.." && pwd)
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$REPO/build}
LAB=$REPO/lab/qcg-lab
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"; "$LAB" down >/dev/null 2>&1 || true' EXIT
command -v socat >/dev/null || { echo "socat is missing (scripts/install-deps)" >&2; exit 1; }
"$LAB" up --delay "$DELAY" --rate "$RATE" >/dev/null
JOB=bench-tp-$$
rank=0
. "$REPO/bench/stats.sh" # median, spread
now() { date +%s.%N; }

. "$REPO/bench/listening.sh"

# qcg FROM TO: one transfer with qcg-cat; prints "MBIT TECHNIQUE".
qcg() {
	local from=$1 to=$2 rto=$rank rfrom=$((rank + 1)) lpid t0 t1 tech
	rank=$((rank + 2))
	"$LAB" exec "$to" -- qcg-cat --job "$JOB" --rank "$rto" --json --timeout 120 listen \
		>/dev/null 2>"$WORK/l" &
	lpid=$!
	listening "$WORK/l"
	t0=$(now)
	head -c "${SIZE}M" /dev/zero | "$LAB" exec "$from" -- qcg-cat --job "$JOB" --rank "$rfrom" \
		--json --timeout 120 connect "$rto" 2>"$WORK/c" >/dev/null
	wait "$lpid"
	t1=$(now)
	tech=$(sed -n 's/.*"technique":"\([a-z]*\)".*/\1/p' "$WORK/c" | tail -n 1)
	awk -v s="$SIZE" -v a="$t0" -v b="$t1" -v t="$tech" 'BEGIN { printf "%.1f %s\n", s * 8 * 1.048576 / (b - a), t }'
}

# plain: socat nata1 -> open1 on a port of open1's range.
plain() {
	local lpid t0 t1
	"$LAB" exec open1 -- socat -u -b 262144 TCP-LISTEN:21994,bind=198.51.100.11,reuseaddr OPEN:/dev/null \
		2>"$WORK/s" &
	lpid=$!
	for _ in $(seq 1 200); do
		"$LAB" exec open1 -- ss -Htln 'sport = :21994' | grep -q . && break
		sleep 0.05
	done
	t0=$(now)
	head -c "${SIZE}M" /dev/zero | "$LAB" exec nata1 -- socat -u -b 262144 - TCP:198.51.100.11:21994
	wait "$lpid"
	t1=$(now)
	awk -v s="$SIZE" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f plain\n", s * 8 * 1.048576 / (b - a) }'
}

PATHS=(plain nata1:open1 open1:fw1 nata1:fw1 nata1:natb1 sym1:natb1)
for ((r = 1; r <= ROUNDS; r++)); do
	for p in "${PATHS[@]}"; do
		if [ "$p" = plain ]; then plain; else qcg "${p%:*}" "${p#*:}"; fi >>"$WORK/$p"
	done
done
printf "lab --delay %s --rate %s, %s MiB per transfer, medians of %s rounds (paths in turn)\n" \
	"$DELAY" "$RATE" "$SIZE" "$ROUNDS"
base=$(awk '{print $1}' "$WORK/plain" | median)
printf "%-14s %-11s %10s %9s\n" path technique Mbit/s vs_plain
for p in "${PATHS[@]}"; do
	med=$(awk '{print $1}' "$WORK/$p" | median)
	tech=$(awk '{print $2}' "$WORK/$p" | sort | uniq -c | sort -rn | awk 'NR==1 {print $2}')
	name=$([ "$p" = plain ] && echo "nata1->open1" || echo "${p%:*}->${p#*:}")
	printf "%-14s %-11s %10.1f %9.3f\n" "$name" "$tech" "$med" "$(awk -v m="$med" -v b="$base" 'BEGIN {print m / b}')"
done
