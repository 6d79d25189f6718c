#!/usr/bin/env bash
# Connection setup time per technique in the lab with a WAN delay: for each pair
# below, COUNT connections (qcg-cat, 1 byte) and the median of the connecting
# side's setup time, next to the median of a plain TCP connect from the same
# initiator to open1 (one inter-site round trip = 4 x DELAY).
#   bench/technique-setup.sh [DELAY_MS] [COUNT]     (root; QCG_BUILD_DIR, default build/)
set -euo pipefail
DELAY=${1:-5}
COUNT=${2:-20}
REPO=$(cd "$(dirname "$0")/.." && pwd)
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$REPO/build}
LAB=$REPO/tests/lab/qcg-lab
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"; "$LAB" down >/dev/null 2>&1 || true' EXIT
"$LAB" up --delay "$DELAY" >/dev/null
JOB=bench-$$
rank=0
median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

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
printf "%-16s %-12s %12s %10s\n" pair technique setup_us round_trips
for pair in nata1:open1 open1:fw1 nata1:fw1 fw1:nata1 nata1:natb1 sym1:natb1; do
	from=${pair%:*} to=${pair#*:}
	: >"$WORK/t"
	for _ in $(seq 1 "$COUNT"); do one "$from" "$to" >>"$WORK/t"; done
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
