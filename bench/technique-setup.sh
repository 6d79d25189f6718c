#!/usr/bin/env bash
# Connection setup time per technique in the lab with a WAN delay: for each pair
# below, COUNT connections (qcg-cat, 1 byte) and the median of the connecting
# side's setup time, next to the median of a plain TCP connect from the same
# initiator to open1 (one inter-site round trip = 4 x DELAY).
#   bench/technique-setup.sh [DELAY_MS] [COUNT]     (root; QCG_BUILD_DIR, default build/)
#
# With --scrape ROUNDS (issue 34: does Prometheus scraping every daemon every
# 5 s add setup latency?): the lab up with --monitor too, then ROUNDS rounds
# of two phases in one run, alternating: Prometheus scraping (its 5 s
# interval), then Prometheus stopped (SIGSTOP: no scrape at all); each phase
# makes COUNT connections of every pair.  Per pair and phase: the median of
# all its connections and the range of the rounds' medians; the ratio of
# scraping to stopped.
#   bench/technique-setup.sh --scrape 3 5 10        (under the lab lock)
set -euo pipefail
SCRAPE=0
if [ "${1:-}" = --scrape ]; then
	SCRAPE=${2:?--scrape ROUNDS}
	shift 2
fi
DELAY=${1:-5}
COUNT=${2:-20}
REPO=$(cd "$(dirname "$0")/.." && pwd)
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$REPO/build}
LAB=$REPO/lab/qcg-lab
WORK=$(mktemp -d)
prom=""
trap '[ -n "$prom" ] && kill -CONT "$prom" 2>/dev/null; rm -rf "$WORK"; "$LAB" down >/dev/null 2>&1 || true' EXIT
if [ "$SCRAPE" -gt 0 ]; then
	"$LAB" up --delay "$DELAY" --monitor >/dev/null
	prom=$(cat "${QCG_LAB_DIR:-/run/qcg-lab}/run/prometheus.pid")
else
	"$LAB" up --delay "$DELAY" >/dev/null
fi
JOB=bench-$$
rank=0
. "$REPO/bench/stats.sh" # median, spread

# one FROM TO: the setup time in us of one qcg-cat connection, and its technique.
one() {
	local from=$1 to=$2 rto=$rank rfrom=$((rank + 1)) lpid
	rank=$((rank + 2))
	"$LAB" exec "$to" -- qcg-cat --job "$JOB" --rank "$rto" --json --timeout 30 listen \
		>/dev/null 2>"$WORK/l" &
	lpid=$!
	for _ in $(seq 1 200); do grep -q listening "$WORK/l" 2>/dev/null && break; sleep 0.05; done
	echo x | "$LAB" exec "$from" -- qcg-cat --job "$JOB" --rank "$rfrom" --json --timeout 30 \
		connect "$rto" 2>&1 >/dev/null | grep '"sent"' |
		sed 's/.*"technique":"\([a-z]*\)","setup_us":\([0-9]*\).*/\2 \1/'
	wait "$lpid" || true
}

rtt_us=$("$LAB" exec fw1 -- ping -U -c 5 -i 0.2 -q 198.51.100.11 | sed -n 's|.*= [0-9.]*/\([0-9.]*\)/.*|\1|p')
rtt_us=$(awk -v r="$rtt_us" 'BEGIN { printf "%d", r * 1000 }')
printf "delay %d ms per WAN link; inter-site round trip (fw1 -> open1, ping -U): %d us; medians of %d\n" \
	"$DELAY" "$rtt_us" "$COUNT"
PAIRS="nata1:open1 open1:fw1 nata1:fw1 fw1:nata1 nata1:natb1 sym1:natb1"
# series FILE FROM TO: COUNT connections FROM -> TO appended to FILE.
series() { for _ in $(seq 1 "$COUNT"); do one "$2" "$3" >>"$1"; done; }
if [ "$SCRAPE" -gt 0 ]; then
	# FILE per pair and phase: "round setup_us technique" lines.
	for ((r = 1; r <= SCRAPE; r++)); do
		for phase in scrape off; do
			[ "$phase" = scrape ] && kill -CONT "$prom" || kill -STOP "$prom"
			for pair in $PAIRS; do
				from=${pair%:*} to=${pair#*:}
				: >"$WORK/one"
				series "$WORK/one" "$from" "$to"
				sed "s/^/$r /" "$WORK/one" >>"$WORK/$phase-$pair"
			done
			echo "round $r/$SCRAPE: $phase done ($(date +%T))" >&2
		done
	done
	kill -CONT "$prom"
	# stat FILE: "median [min-max of the rounds' medians]" in ms.
	stat() {
		local all rounds
		all=$(awk '{ print $2 }' "$1" | median)
		rounds=$(for ((r = 1; r <= SCRAPE; r++)); do awk -v r=$r '$1 == r { print $2 }' "$1" | median; done | sort -n)
		awk -v m="$all" -v lo="$(head -n 1 <<<"$rounds")" -v hi="$(tail -n 1 <<<"$rounds")" \
			'BEGIN { printf "%.1f [%.1f-%.1f]", m / 1000, lo / 1000, hi / 1000 }'
	}
	printf "%-14s %-11s %-22s %-22s %s\n" pair technique "scraping ms" "not scraping ms" ratio
	for pair in $PAIRS; do
		tech=$(awk '{ print $3 }' "$WORK/scrape-$pair" "$WORK/off-$pair" | sort | uniq -c | sort -rn | awk 'NR == 1 { print $2 }')
		a=$(awk '{ print $2 }' "$WORK/scrape-$pair" | median)
		b=$(awk '{ print $2 }' "$WORK/off-$pair" | median)
		printf "%-14s %-11s %-22s %-22s %.3f\n" "${pair/:/->}" "$tech" "$(stat "$WORK/scrape-$pair")" \
			"$(stat "$WORK/off-$pair")" "$(awk -v a="$a" -v b="$b" 'BEGIN { print a / b }')"
	done
	exit 0
fi
printf "%-16s %-12s %12s %10s\n" pair technique setup_us round_trips
for pair in $PAIRS; do
	from=${pair%:*} to=${pair#*:}
	: >"$WORK/t"
	series "$WORK/t" "$from" "$to"
	tech=$(awk '{print $2}' "$WORK/t" | sort | uniq -c | sort -rn | awk 'NR==1 {print $2}')
	med=$(awk '{print $1}' "$WORK/t" | median)
	printf "%-16s %-12s %12.0f %10.1f\n" "$from->$to" "$tech" "$med" "$(awk -v m="$med" -v r="$rtt_us" 'BEGIN {print m / r}')"
done
# Plain TCP connect, same initiators, to a listener on open1 (the lab's verify ports).
: >"$WORK/p"
"$LAB" exec open1 -- python3 -c '
import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.51.100.11", 21995)); s.listen(64)
while True: c, _ = s.accept(); c.close()' &
srv=$!
sleep 0.5
"$LAB" exec nata1 -- python3 -c '
import socket, time
for i in range('"$COUNT"'):
    s = socket.socket(); t = time.monotonic(); s.connect(("198.51.100.11", 21995))
    print(int((time.monotonic() - t) * 1e6)); s.close(); time.sleep(0.05)' >"$WORK/p"
kill "$srv" 2>/dev/null || true
med=$(median <"$WORK/p")
printf "%-16s %-12s %12.0f %10.1f\n" "nata1->open1" "plain TCP" "$med" "$(awk -v m="$med" -v r="$rtt_us" 'BEGIN {print m / r}')"
