#!/usr/bin/env bash
# The broker's reflector under MAP requests, one per connection (what
# qcg-probe sends): requests per second, latency p50/p99 and CPU time per
# request (bench/reflector-map.c) over SECONDS with
# CLIENTS clients, medians of ROUNDS runs, in a network namespace of its own
# (loopback only).  With QCG_BASE_BUILD_DIR, each round runs that build's
# reflector-map too (base first), and the ratios new/base are printed.
#
#   bench/reflector-map.sh [ROUNDS] [SECONDS] [CLIENTS]     (root; default 5 5 4)
#       QCG_BUILD_DIR (default build/), QCG_BASE_BUILD_DIR (optional)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${QCG_BUILD_DIR:-$root/build}
base=${QCG_BASE_BUILD_DIR:-}
rounds=${1:-5} secs=${2:-5} clients=${3:-4}
work=$(mktemp -d /tmp/reflector-map.XXXXXX)
trap 'rm -rf "$work"' EXIT

for b in "$build" ${base:+"$base"}; do
  [ -x "$b/bench/reflector-map" ] || { echo "reflector-map.sh: $b/bench/reflector-map missing: build first" >&2; exit 1; }
done
# shellcheck disable=SC2016 # the inner shell expands its own arguments
run() { unshare -n sh -c 'ip link set lo up && exec "$0" "$@"' "$1/bench/reflector-map" "$secs" "$clients"; }
field() { awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }'; }
. "$root/bench/stats.sh" # median, spread

for _ in $(seq "$rounds"); do
  [ -n "$base" ] && run "$base" >>"$work/base"
  run "$build" >>"$work/new"
done
for who in ${base:+base} new; do
  for k in maps_per_s p50_us p99_us cpu_us_per_map errors; do
    field "$k" <"$work/$who" >"$work/$who.$k"
  done
done
echo "reflector MAP, one connection each, $clients clients, ${secs} s, medians of $rounds rounds (min-max)"
printf '%-8s %20s %16s %16s %18s %8s\n' build "MAPs/s" "p50 us" "p99 us" "CPU us/MAP" errors
for who in ${base:+base} new; do
  printf '%-8s %20s %16s %16s %18s %8s\n' "$who" \
    "$(median <"$work/$who.maps_per_s") ($(spread <"$work/$who.maps_per_s"))" \
    "$(median <"$work/$who.p50_us") ($(spread <"$work/$who.p50_us"))" \
    "$(median <"$work/$who.p99_us") ($(spread <"$work/$who.p99_us"))" \
    "$(median <"$work/$who.cpu_us_per_map") ($(spread <"$work/$who.cpu_us_per_map"))" \
    "$(awk '{ s += $1 } END { print s + 0 }' "$work/$who.errors")"
done
if [ -n "$base" ]; then
  awk -v n="$(median <"$work/new.maps_per_s")" -v b="$(median <"$work/base.maps_per_s")" \
    -v pn="$(median <"$work/new.p50_us")" -v pb="$(median <"$work/base.p50_us")" \
    -v cn="$(median <"$work/new.cpu_us_per_map")" -v cb="$(median <"$work/base.cpu_us_per_map")" \
    'BEGIN { printf "new/base: MAPs/s %.2f, p50 %.2f, CPU per MAP %.2f\n", n / b, pn / pb, cn / cb }'
fi
