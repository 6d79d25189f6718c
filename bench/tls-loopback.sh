#!/usr/bin/env bash
# Encrypted (TLS 1.3, AES-128-GCM) against plain libqcgconn connections over
# loopback, same pair, same run: throughput of one connection (SECONDS of
# 256 KiB writes), 8-byte round trips (COUNT, median of each run) and setup
# time; ROUNDS rounds alternate the two; medians, with the spread (min-max).
# The real broker, frontend and helper on 127.0.0.1 (tests/lib/loopback-grid.sh;
# ports 18901, 18902, 18950-18999), so run it in a network namespace of its own:
#
#   unshare -n sh -c 'ip link set lo up; bench/tls-loopback.sh [SECONDS] [COUNT] [ROUNDS]'
#       (QCG_BUILD_DIR, default build/)
set -euo pipefail
export LC_ALL=C
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${QCG_BUILD_DIR:-$src/build}" && pwd)
SECS=${1:-3}
COUNT=${2:-20000}
ROUNDS=${3:-5}
# shellcheck source=../tests/lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"
bench=$build/bench/tls-bench
need_built "$helper" "$frontend" "$broker" "$certs" "$bench"
need_commands ss
grid_workdir qcg-tls-bench
grid_one_node 18901 18902 18950-18999
export QCG_HELPER_SOCKET=$work/helper.sock QCG_JOB=tls-bench-$$
QCG_JOB_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export QCG_JOB_SECRET
QCG_RANK=0 "$bench" serve $((ROUNDS * 4)) >"$work/serve.out" 2>&1 &
pids+=($!)
wait_for "the server's listening line" 100 grep -q listening "$work/serve.out" || exit 1

rank=1
for _ in $(seq 1 "$ROUNDS"); do
	for mode in never always; do
		QCG_RANK=$rank "$bench" stream 0 "$SECS" "$mode" >>"$work/stream-$mode"
		QCG_RANK=$((rank + 1)) "$bench" pingpong 0 "$COUNT" "$mode" >>"$work/rtt-$mode"
		rank=$((rank + 2))
	done
done

# stats FILE FIELD: "median (min-max)" of the FIELD-th word of FILE's lines.
stats() {
	awk -v f="$2" '{print $f}' "$1" | sort -g |
		awk '{v[NR] = $1} END {printf "%s (%s-%s)", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], v[NR]}'
}
med() { stats "$1" "$2" | cut -d' ' -f1; }
echo "tls-loopback: $ROUNDS rounds, ${SECS} s streams, $COUNT round trips; $(nproc) CPUs, $(uname -r)"
printf '%-8s %-12s %-24s %-24s %s\n' mode path "Gbit/s" "rtt_us median" "setup_us"
for mode in never always; do
	printf '%-8s %-12s %-24s %-24s %s\n' "$mode" "$(awk '{print $NF; exit}' "$work/stream-$mode")" \
		"$(stats "$work/stream-$mode" 2)" "$(stats "$work/rtt-$mode" 3)" "$(stats "$work/stream-$mode" 4)"
done
awk -v e="$(med "$work/stream-always" 2)" -v p="$(med "$work/stream-never" 2)" \
	-v re="$(med "$work/rtt-always" 3)" -v rp="$(med "$work/rtt-never" 3)" \
	'BEGIN {printf "encrypted/plain throughput %.2f; round trip added %.1f us\n", e / p, re - rp}'
