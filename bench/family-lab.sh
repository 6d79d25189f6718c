#!/usr/bin/env bash
# Direct over IPv6 against direct over IPv4 in the lab, on the same pair and
# technique, in one run (issue 33): nata2 (dual-stack, NAT44 for IPv4, in its
# site's IPv6 open range) connects to open1 (dual-stack, open), ROUNDS times
# each way, alternating.  The broker plans direct to open1's IPv6 address with
# its IPv4 address behind it; for an IPv4 round nata2 gets an `unreachable`
# route to open1's IPv6 address, so the IPv6 connect fails inside nata2 at
# once (no packet leaves) and the same connect goes on over IPv4: both rounds
# cross the same links, with the same delay and rate, and make the same round
# trips.  Each transfer is one qcg-cat of SIZE MiB; the table gives medians
# (min-max) of the setup time (qcg-cat's setup_us), of that time in round
# trips of the pair (the least of 10 pings per family), and of Mbit/s from the
# sender's start to both ends' exit (setup included, as in
# technique-throughput.sh).
#
#   bench/family-lab.sh [DELAY_MS] [RATE_MBIT] [SIZE_MIB] [ROUNDS]
#       (root, the lab lock; QCG_BUILD_DIR, default build/; RATE 0 = no limit)
#
# It brings the lab up (qcg-lab up --delay --rate) and down at the end.
set -euo pipefail
export LC_ALL=C
DELAY=${1:-5}
RATE=${2:-0}
SIZE=${3:-64}
ROUNDS=${4:-7}
REPO=$(cd "$(dirname "$0")/.." && pwd)
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$REPO/build}
LAB=$REPO/lab/qcg-lab
WORK=$(mktemp -d)
FROM=nata2 TO=open1
TO_V4=198.51.100.11 TO_V6=2001:db8:1::11
unreach() { "$LAB" exec "$FROM" -- ip -6 route "$1" unreachable "$TO_V6/128" 2>/dev/null || true; }
trap 'unreach del; rm -rf "$WORK"; "$LAB" down >/dev/null 2>&1 || true' EXIT
"$LAB" up --delay "$DELAY" --rate "$RATE" >/dev/null
JOB=bench-family-$$
rank=0
now() { date +%s.%N; }

. "$REPO/bench/listening.sh"

# ping_least ADDR: the least RTT in ms of 10 pings from FROM.
ping_least() {
	"$LAB" exec "$FROM" -- ping -U -n -c 10 -i 0.05 -W 2 "$1" 2>/dev/null |
		sed -n 's/.*time=\([0-9.]*\).*/\1/p' | sort -n | head -n 1
}

# transfer FAMILY: one qcg-cat FROM -> TO; a line "FAMILY MBIT SETUP_US ADDRESS".
transfer() {
	local fam=$1 rto=$rank rfrom=$((rank + 1)) lpid t0 t1
	rank=$((rank + 2))
	"$LAB" exec "$TO" -- qcg-cat --job "$JOB" --rank "$rto" --json --timeout 120 listen \
		>/dev/null 2>"$WORK/l" &
	lpid=$!
	listening "$WORK/l"
	t0=$(now)
	head -c "${SIZE}M" /dev/zero | "$LAB" exec "$FROM" -- qcg-cat --job "$JOB" --rank "$rfrom" \
		--json --timeout 120 connect "$rto" 2>"$WORK/c" >/dev/null
	wait "$lpid"
	t1=$(now)
	python3 - "$WORK/c" "$fam" "$SIZE" "$t0" "$t1" <<-'EOF'
		import json, sys
		ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
		sent = [e for e in ev if e.get("event") == "sent"][-1]
		mbit = int(sys.argv[3]) * 8 * 1.048576 / (float(sys.argv[5]) - float(sys.argv[4]))
		print(sys.argv[2], "%.1f" % mbit, sent["setup_us"], sent["technique"], sent.get("address", "?"))
	EOF
}

rtt4=$(ping_least "$TO_V4")
rtt6=$(ping_least "$TO_V6")
for ((r = 1; r <= ROUNDS; r++)); do
	unreach del
	transfer ipv6 >>"$WORK/runs"
	unreach add
	transfer ipv4 >>"$WORK/runs"
done
unreach del

python3 - "$WORK/runs" "$rtt4" "$rtt6" "$DELAY" "$RATE" "$SIZE" "$ROUNDS" <<'EOF'
import statistics, sys
runs, rtt = sys.argv[1], {"ipv4": float(sys.argv[2]), "ipv6": float(sys.argv[3])}
rows = {}
for line in open(runs):
    fam, mbit, setup, tech, addr = line.split()
    rows.setdefault(fam, []).append((float(mbit), int(setup) / 1000, tech, addr))
def show(v, f="%.1f"):
    return (f + " (" + f + "-" + f + ")") % (statistics.median(v), min(v), max(v))
print("nata2 -> open1, --delay %s --rate %s, %s MiB, %s rounds alternating" % tuple(sys.argv[4:8]))
print("| family | technique | far end | pair RTT, ms | setup, ms | setup, round trips | Mbit/s |")
print("|---|---|---|---|---|---|---|")
for fam in ("ipv6", "ipv4"):
    r = rows[fam]
    techs = sorted(set(x[2] for x in r))
    ends = sorted(set(x[3].rsplit(":", 1)[0] for x in r))
    print("| %s | %s | %s | %.2f | %s | %s | %s |" % (
        fam, ",".join(techs), ",".join(ends), rtt[fam], show([x[1] for x in r]),
        show([x[1] / rtt[fam] for x in r]), show([x[0] for x in r])))
m6 = statistics.median(x[0] for x in rows["ipv6"])
m4 = statistics.median(x[0] for x in rows["ipv4"])
s6 = statistics.median(x[1] for x in rows["ipv6"])
s4 = statistics.median(x[1] for x in rows["ipv4"])
print("IPv6/IPv4 by the medians: throughput %.3f, setup %.3f" % (m6 / m4, s6 / s4))
EOF
