#!/usr/bin/env bash
# Connection setup time in the lab: a process on nata1 connects to processes on
# open1 through qcg-connect (cold lookup, then cached at nata's frontend) and
# with a plain TCP connect on the same path; medians of COUNT (default 20).
#   bench/connect-time.sh [DELAY_MS] [COUNT]      (root; QCG_BUILD_DIR, default build/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$root/build}
delay=${1:-5}
count=${2:-20}
lab=$root/lab/qcg-lab
bin=$QCG_BUILD_DIR/bench/connect-time
job=bench-$$
work=$(mktemp -d)
server=
lab_was_up=0
ip netns list | grep -qw qcg-inet && lab_was_up=1

cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  [ "$lab_was_up" = 1 ] || "$lab" down >/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

[ -x "$bin" ] || { echo "connect-time.sh: $bin missing: build first (scripts/build)" >&2; exit 1; }
"$lab" up --delay "$delay" >/dev/null
"$lab" exec open1 -- "$bin" serve --job "$job" --first 100 --count "$count" 2>"$work/serve.log" &
server=$!
for _ in $(seq 200); do
  grep -q serving "$work/serve.log" && break
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 0.05
done
grep -q serving "$work/serve.log" || { echo "server did not start" >&2; exit 1; }
echo "lab delay ${delay} ms one-way per WAN link; nata1 -> open1:"
"$lab" exec nata1 -- "$bin" measure --job "$job" --rank 1 --first 100 --count "$count" "${@:3}"
