#!/usr/bin/env bash
# Multi-threaded message rate (tests/mpi/threads.c --rate): two ranks, one on
# each node of the open site, THREADS threads per rank (default 4) sending 8-byte
# messages to the other rank at once under MPI_THREAD_MULTIPLE; the aggregate
# messages per second, btl_qcg against btl_tcp, alternating in the same run.
# Medians of RUNS (default 7) and their spread (min-max).
#   bench/mpi-threads-rate.sh [RUNS] [THREADS]  (root; QCG_BUILD_DIR, default build/)
# Share the lab: flock -w 3600 /tmp/qcg-lab.lock bench/mpi-threads-rate.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$root/build}
runs=${1:-7}
threads=${2:-4}
messages=${QCG_BENCH_MESSAGES:-20000}
lab=$root/lab/qcg-lab
prog=$QCG_BUILD_DIR/tests/mpi/qcg-mpi-threads
work=$(mktemp -d)
lab_was_up=0
ip netns list | grep -qw qcg-inet && lab_was_up=1

cleanup() {
  [ "$lab_was_up" = 1 ] || "$lab" down >/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

[ -x "$prog" ] || { echo "mpi-threads-rate.sh: $prog missing: build first (scripts/build)" >&2; exit 1; }
"$lab" up >/dev/null

# one BTL: appends the messages per second of one job to $work/BTL.
one() {
  local flag=()
  [ "$1" = tcp ] && flag=(--tcp)
  "$lab" mpirun --sites open "${flag[@]}" -- "$prog" --rate --threads "$threads" --messages "$messages" \
    >"$work/out" 2>&1 || { cat "$work/out" >&2; exit 1; }
  sed -n 's/^rate: .* msgs_per_s \([0-9]*\)$/\1/p' "$work/out" >>"$work/$1"
}

for ((r = 1; r <= runs; r++)); do
  echo "round $r/$runs" >&2
  one qcg
  one tcp
done

. "$root/bench/stats.sh" # median, spread
q=$(median <"$work/qcg") t=$(median <"$work/tcp")
echo
echo "message rate, 2 ranks (open1, open2), $threads threads each, 8-byte messages; medians of $runs (spread)"
printf '%-8s %12s  %s\n' btl_qcg "$q" "($(spread <"$work/qcg"))"
printf '%-8s %12s  %s\n' btl_tcp "$t" "($(spread <"$work/tcp"))"
echo "qcg/tcp $(awk -v a="$q" -v b="$t" 'BEGIN { printf "%.3f", a / b }')"
