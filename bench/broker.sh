#!/usr/bin/env bash
# Broker benchmark on loopback: lookups per second over mutual TLS with keep-alive
# (1 and 2 client connections, 1,000 contacts); the broker's CPU per lookup
# alone and in lookups calls of 8 and 64; then a broker holding 100,000
# contacts: its resident memory and lookup rate.  Prints medians of RUNS runs.
#   bench/broker.sh [RUNS]        (QCG_BUILD_DIR defaults to build/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${QCG_BUILD_DIR:-$root/build}
runs=${1:-3}
port=17650
work=$(mktemp -d)
broker_pid=
cleanup() {
  [ -n "$broker_pid" ] && kill "$broker_pid" 2>/dev/null && wait "$broker_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

"$root/certs/qcg-certs" --dir "$work/ca" init >/dev/null
"$root/certs/qcg-certs" --dir "$work/ca" issue broker --san 127.0.0.1 >/dev/null
"$root/certs/qcg-certs" --dir "$work/ca" issue frontend bench >/dev/null

start_broker() {
  "$build/broker/qcg-broker" --listen 127.0.0.1 --port $port --ca "$work/ca/ca.crt" \
    --cert "$work/ca/broker-broker.pem" --log-level warn 2>"$work/broker.log" &
  broker_pid=$!
  for _ in $(seq 100); do
    ss -ltn "sport = :$port" | grep -q LISTEN && return 0
    sleep 0.05
  done
  echo "broker did not start: $(cat "$work/broker.log")" >&2
  exit 1
}
stop_broker() {
  kill "$broker_pid"; wait "$broker_pid" || true; broker_pid=
}
load() {
  "$build/bench/broker-load" --url "https://127.0.0.1:$port/" --ca "$work/ca/ca.crt" \
    --cert "$work/ca/frontend-bench.pem" --cluster bench "$@"
}
. "$root/bench/stats.sh" # median, spread

for threads in 1 2; do
  rates=()
  for _ in $(seq "$runs"); do
    start_broker
    rates+=("$(load --contacts 1000 --threads $threads --seconds 5 | awk '/^lookups/ {print $9+0}')")
    stop_broker
  done
  echo "lookups/s, $threads connection(s), 1k contacts: median $(printf '%s\n' "${rates[@]}" | median) of ${rates[*]}"
done

# cpu_ticks PID: utime + stime in clock ticks.
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }
hz=$(getconf CLK_TCK)
for batch in 1 8 64; do
  per=()
  for _ in $(seq "$runs"); do
    start_broker
    c0=$(cpu_ticks "$broker_pid")
    n=$(load --contacts 1000 --threads 2 --seconds 5 --batch $batch | awk '/^lookups/ {print $2}')
    c1=$(cpu_ticks "$broker_pid")
    per+=("$(awk -v c=$((c1 - c0)) -v n="$n" -v hz="$hz" 'BEGIN {printf "%.1f", c / hz * 1e6 / n}')")
    stop_broker
  done
  echo "broker CPU per lookup, us, calls of $batch: median $(printf '%s\n' "${per[@]}" | median) of ${per[*]}"
done

start_broker
rss0=$(awk '/VmRSS/ {print $2}' /proc/$broker_pid/status)
load --contacts 100000 --threads 2 --seconds 5 | tee "$work/big.txt"
rss1=$(awk '/VmRSS/ {print $2}' /proc/$broker_pid/status)
echo "broker RSS: $((rss0 / 1024)) MiB empty, $((rss1 / 1024)) MiB with 100,000 contacts"
stop_broker
