#!/usr/bin/env bash
# Encrypted (TLS 1.3, AES-128-GCM) against plain libqcgconn connections over
# loopback, same pair, same run: throughput of one connection (SECONDS of
# 256 KiB writes), 8-byte round trips (COUNT, median of each run; once with
# both ends sleeping in recv, once with both spinning as MPI ranks do) and setup
# time; ROUNDS rounds alternate the two; medians, with the spread (min-max).
# Each end's CPU seconds per GB moved are printed too: on a shared machine the
# Gbit/s follow the CPU the two ends were given (the CPU pressure line says how
# contended it was), the CPU per GB does not.
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
QCG_RANK=0 "$bench" serve $((ROUNDS * 6)) >"$work/serve.out" 2>&1 &
pids+=($!)
wait_for "the server's listening line" 100 grep -q listening "$work/serve.out" || exit 1

psi() { awk '/^some/ {sub("avg10=", "", $2); print $2}' /proc/pressure/cpu 2>/dev/null || echo "?"; }
psi_start=$(psi)
rank=1
for _ in $(seq 1 "$ROUNDS"); do
	for mode in never always; do
		QCG_RANK=$rank "$bench" stream 0 "$SECS" "$mode" >>"$work/stream-$mode"
		QCG_RANK=$((rank + 1)) "$bench" pingpong 0 "$COUNT" "$mode" >>"$work/rtt-$mode"
		QCG_RANK=$((rank + 2)) "$bench" pingpong 0 "$COUNT" "$mode" spin >>"$work/spin-$mode"
		rank=$((rank + 3))
	done
done

# stats FILE FIELD: "median (min-max)" of the FIELD-th word of FILE's lines.
stats() {
	awk -v f="$2" '{print $f}' "$1" | sort -g |
		awk '{v[NR] = $1} END {printf "%s (%s-%s)", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], v[NR]}'
}
med() { stats "$1" "$2" | cut -d' ' -f1; }
echo "tls-loopback: $ROUNDS rounds, ${SECS} s streams, $COUNT round trips; $(nproc) CPUs, $(uname -r)"
echo "CPU pressure (some, avg10 %): $psi_start at the start, $(psi) at the end"
printf '%-6s %-9s %-22s %-19s %-19s %-19s %-19s %s\n' mode path "Gbit/s" "send CPU s/GB" "recv CPU s/GB" \
	"rtt_us sleeping" "rtt_us spinning" "setup_us"
for mode in never always; do
	f=$work/stream-$mode
	printf '%-6s %-9s %-22s %-19s %-19s %-19s %-19s %s\n' "$mode" "$(awk '{print $NF; exit}' "$f")" \
		"$(stats "$f" 2)" "$(stats "$f" 6)" "$(stats "$f" 8)" "$(stats "$work/rtt-$mode" 3)" \
		"$(stats "$work/spin-$mode" 3)" "$(stats "$f" 4)"
done
awk -v e="$(med "$work/stream-always" 2)" -v p="$(med "$work/stream-never" 2)" \
	-v se="$(med "$work/stream-always" 6)" -v sp="$(med "$work/stream-never" 6)" \
	-v ce="$(med "$work/stream-always" 8)" -v cp="$(med "$work/stream-never" 8)" \
	-v re="$(med "$work/rtt-always" 3)" -v rp="$(med "$work/rtt-never" 3)" \
	-v ze="$(med "$work/spin-always" 3)" -v zp="$(med "$work/spin-never" 3)" \
	'BEGIN {printf "encrypted/plain throughput %.2f; CPU per byte plain/encrypted: send %.2f, receive %.2f; round trip added %.1f us sleeping, %.1f us spinning\n", e / p, sp / se, cp / ce, re - rp, ze - zp}'
