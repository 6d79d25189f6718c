#!/usr/bin/env bash
# The connection storm (tests/mpi/storm.c: right after MPI_Init every rank
# sends one byte to every other at once, so every connection of the job is set
# up at the same moment from both ends): the slowest rank's time until all its
# messages arrived, and descriptors at the peak: the most any rank held (its
# own count, every 2 ms) and the most any node's qcg-helper held (sampled
# every 20 ms from /proc while the job runs), and the btl_qcg lines each
# passing job printed (a job that succeeds prints no warning: 0 each).
#   (a) one site (open, 2 nodes x 8 ranks = 16 ranks): btl_qcg against btl_tcp,
#       alternating (both connect there; vader carries a node's own pairs)
#   (b) the five sites, 10 nodes x 8 ranks = 80 ranks (3160 pairs): btl_qcg only
#       (tcp cannot cross the NATs)
# both on a lab with DELAY_MS on every WAN link (default 5).  Medians of RUNS
# (default 5) and their spread (min-max); a failed job is listed with its first
# reason and left out of the medians.
#   bench/connect-storm.sh [DELAY_MS] [RUNS]    (root; QCG_BUILD_DIR, default build/)
# STORM_PARTS="site grid" (default) picks the parts.  A failed job's output and
# the services' logs of that moment are kept in STORM_KEEP (default a new
# /tmp/connect-storm.XXXXXX, named at the end).
# Share the lab: flock -w 3600 /tmp/qcg-lab.lock bench/connect-storm.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$root/build}
delay=${1:-5}
runs=${2:-5}
lab=$root/lab/qcg-lab
prog=$QCG_BUILD_DIR/tests/mpi/qcg-mpi-storm
state=${QCG_LAB_DIR:-/run/qcg-lab}
work=$(mktemp -d)
parts=${STORM_PARTS:-site grid}
keep=${STORM_KEEP:-}
failed_jobs=0
lab_was_up=0
ip netns list | grep -qw qcg-inet && lab_was_up=1

# The lab as it was: down, or up without delay.
cleanup() {
  "$lab" down >/dev/null
  [ "$lab_was_up" = 0 ] || "$lab" up >/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

[ -x "$prog" ] || { echo "connect-storm.sh: $prog missing: build first (scripts/build)" >&2; exit 1; }
[ "$lab_was_up" = 1 ] && "$lab" down >/dev/null
"$lab" up --delay "$delay" >/dev/null

# helper_fds: the most descriptors any helper holds now.
helper_fds() {
  local f pid n max=0
  for f in "$state"/run/helper-*.pid; do
    pid=$(cat "$f" 2>/dev/null) || continue
    n=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
    [ "$n" -gt "$max" ] && max=$n
  done
  echo "$max"
}

# one NAME ARGS...: a storm job; appends "seconds rank_fds helper_fds" to $work/NAME.
one() {
  local name=$1 sampler peak=0 n
  shift
  (
    while :; do helper_fds; sleep 0.02; done
  ) >"$work/helper-fds" &
  sampler=$!
  local rc=0
  "$lab" mpirun --ppn 8 "$@" -- "$prog" >"$work/out" 2>&1 || rc=$?
  kill "$sampler"
  wait "$sampler" 2>/dev/null || true
  # A job whose storm passed but which then failed (its exit status) failed.
  if ! grep -q '^PASS storm' "$work/out" || [ "$rc" != 0 ]; then
    # Counted, with the first reason given (Open MPI's, else the first line
    # of btl_qcg's or mpirun's), kept with the services' logs, and the
    # rounds go on.
    local why
    why=$(grep -m1 'Reason:' "$work/out" || grep -m1 -E 'btl_qcg|mpirun|qcg-mpirun|error' "$work/out" ||
      { [ "$rc" != 0 ] && echo "exit $rc"; } ||
      echo "no PASS line; exit without a reason (see the kept output)")
    failed_jobs=$((failed_jobs + 1))
    [ -n "$keep" ] || keep=$(mktemp -d /tmp/connect-storm.XXXXXX)
    mkdir -p "$keep/$failed_jobs-$name"
    cp "$work/out" "$keep/$failed_jobs-$name/job.out"
    cp -p "$state"/log/*.log "$keep/$failed_jobs-$name/" 2>/dev/null || true
    read -r why <<<"$why"
    echo "$name: failed: ${why:0:300} (kept: $keep/$failed_jobs-$name)" |
      tee -a "$work/failures" >&2
    return 0
  fi
  for n in $(cat "$work/helper-fds"); do [ "$n" -gt "$peak" ] && peak=$n; done
  # A job that succeeds prints no warning: btl_qcg's lines in it are counted.
  awk -v h="$peak" -v w="$(grep -c 'btl_qcg' "$work/out")" '/^STORM/ { print $7, $9, h, w }' \
    "$work/out" >>"$work/$name"
}

for ((r = 1; r <= runs; r++)); do
  echo "round $r/$runs" >&2
  case " $parts " in *" site "*)
    one site-qcg --sites open
    one site-tcp --sites open --tcp
    ;;
  esac
  case " $parts " in *" grid "*) one grid-qcg ;; esac
done

. "$root/bench/stats.sh" # median, spread
col() { awk -v c="$2" '{ print $c }' "$work/$1"; }

echo
echo "connection storm, every pair at once; --delay $delay; medians of $runs (spread)"
printf '%-40s %-5s %16s %16s %14s %s\n' "" btl "seconds" "rank fds max" "helper fds max" "btl_qcg lines"
for f in site-qcg site-tcp grid-qcg; do
  [ -s "$work/$f" ] || continue
  case $f in
  site-*) what="16 ranks, open (8 per node), 120 pairs" ;;
  grid-*) what="80 ranks, five sites (8 per node), 3160 pairs" ;;
  esac
  printf '%-40s %-5s %7s %-8s %7s %-8s %6s %-7s %s\n' "$what" "${f#*-}" \
    "$(col "$f" 1 | median)" "($(col "$f" 1 | spread))" \
    "$(col "$f" 2 | median)" "($(col "$f" 2 | spread))" \
    "$(col "$f" 3 | median)" "($(col "$f" 3 | spread))" "$(col "$f" 4 | tr '\n' ' ')"
done
if [ -s "$work/failures" ]; then
  echo "failed jobs (not in the medians):"
  sed 's/^/  /' "$work/failures"
fi
case " $parts " in *" grid "*)
  echo "five sites: $(wc -l <"$work/grid-qcg" 2>/dev/null || echo 0) of $runs jobs passed"
  ;;
esac
if [ -s "$work/site-qcg" ] && [ -s "$work/site-tcp" ]; then
  q=$(col site-qcg 1 | median) t=$(col site-tcp 1 | median)
  echo "one site: qcg/tcp $(awk -v a="$q" -v b="$t" 'BEGIN { printf "%.2f", a / b }')"
fi
