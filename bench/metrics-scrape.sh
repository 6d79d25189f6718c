#!/usr/bin/env bash
# What Prometheus scraping every service every 5 s costs the services: the lab
# up with --monitor (lab/monitor.sh: all 17 services scraped every 5 s),
# then ROUNDS rounds of two WINDOW-second phases in one run, alternating:
# Prometheus scraping, then Prometheus stopped (SIGSTOP: no scrape at all).
# For each phase, from /proc: the CPU time (user + system) of the metrics
# threads of every service (named qcg-metrics), of the services in all, and
# of Prometheus itself, as a percentage of one core.  Medians and ranges.
#   bench/metrics-scrape.sh [ROUNDS] [WINDOW_S]     (root, under the lab lock;
#   QCG_BUILD_DIR, default build/; the lab is taken down at the end)
set -euo pipefail
ROUNDS=${1:-3}
WINDOW=${2:-30}
REPO=$(cd "$(dirname "$0")/.." && pwd)
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$REPO/build}
LAB=$REPO/lab/qcg-lab
STATE=${QCG_LAB_DIR:-/run/qcg-lab}
prom=""
trap '[ -n "$prom" ] && kill -CONT "$prom" 2>/dev/null; "$LAB" down >/dev/null 2>&1 || true' EXIT
"$LAB" up --monitor >/dev/null
prom=$(cat "$STATE/run/prometheus.pid")
services=$(for f in "$STATE"/run/*.pid; do [ "${f##*/}" = prometheus.pid ] || cat "$f"; done)
hz=$(getconf CLK_TCK)

ticks() { awk '{ print $14 + $15 }' "$1" 2>/dev/null || echo 0; }
# sample: "metrics-threads services prometheus", in clock ticks.
sample() {
	local m=0 s=0 pid t
	for pid in $services; do
		s=$((s + $(ticks "/proc/$pid/stat")))
		for t in /proc/"$pid"/task/*; do
			[ "$(cat "$t/comm" 2>/dev/null)" = qcg-metrics ] && m=$((m + $(ticks "$t/stat")))
		done
	done
	echo "$m $s $(ticks "/proc/$prom/stat")"
}
# phase NAME: the three percentages of one core over WINDOW seconds.
phase() {
	local a b
	a=$(sample)
	sleep "$WINDOW"
	b=$(sample)
	paste -d' ' <(echo "$a") <(echo "$b") |
		awk -v w="$WINDOW" -v hz="$hz" -v n="$1" '{ printf "%s %.3f %.3f %.3f\n", n, ($4 - $1) * 100 / hz / w, ($5 - $2) * 100 / hz / w, ($6 - $3) * 100 / hz / w }'
}
sleep 10 # Prometheus's first scrapes, the services settled
out=$(mktemp)
for ((r = 1; r <= ROUNDS; r++)); do
	kill -CONT "$prom"
	phase scrape >>"$out"
	kill -STOP "$prom"
	phase off >>"$out"
	echo "round $r/$ROUNDS: $(tail -n 2 "$out" | tr '\n' ' ')" >&2
done
kill -CONT "$prom"
echo "17 services, scraped every 5 s; $ROUNDS rounds of $WINDOW s per phase; % of one core (median [min-max])"
for p in scrape off; do
	for col in 2 3 4; do
		awk -v p="$p" -v c="$col" '$1 == p { print $c }' "$out" | sort -n |
			awk '{ v[NR] = $1 } END { printf "%s ", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "[%s-%s]\n", v[1], v[NR] }'
	done | paste -sd' ' | awk -v p="$p" '{ printf "%-7s metrics threads %s %s   services in all %s %s   prometheus %s %s\n", p, $1, $2, $3, $4, $5, $6 }'
done
rm -f "$out"
