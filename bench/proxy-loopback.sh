#!/usr/bin/env bash
# qcg-proxy's relay on loopback, without the lab: one stream's throughput, the
# 8-byte round trip and the proxy's CPU per GB through a proxy on 127.0.0.1
# (both tcp-stream ends connect out with tokens, as in proxy-relay.sh (b)).
# With QCG_BASE_BUILD_DIR, each round runs that build's qcg-proxy first, then
# QCG_BUILD_DIR's, the tools (tcp-stream, proxy-token) the same for both:
# medians of ROUNDS and the ratios new/base; each round also streams over
# plain TCP (direct), for the relayed/direct ratio per round.  In a network namespace of its
# own; for comparing two builds on a machine whose lab is busy (the lab's
# figures, with NATs and routers on the path, are proxy-relay.sh's).
#
#   bench/proxy-loopback.sh [ROUNDS] [SECONDS]      (root; default 5 3)
#       QCG_BUILD_DIR (default build/), QCG_BASE_BUILD_DIR (optional)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${QCG_BUILD_DIR:-$root/build}
base=${QCG_BASE_BUILD_DIR:-}
rounds=${1:-5} secs=${2:-3}
pings=2000
if [ -z "${PROXY_LOOPBACK_INNER:-}" ]; then
  for f in "$build/bench/tcp-stream" "$build/bench/proxy-token" "$build/proxy/qcg-proxy" \
    ${base:+"$base/proxy/qcg-proxy"} "$root/certs/qcg-certs"; do
    [ -x "$f" ] || { echo "proxy-loopback.sh: $f missing: build first" >&2; exit 1; }
  done
  exec unshare -n env PROXY_LOOPBACK_INNER=1 bash "$0" "$@"
fi
ip link set lo up
stream=$build/bench/tcp-stream mint=$build/bench/proxy-token
port=18701 cport=18702
work=$(mktemp -d /tmp/proxy-loopback.XXXXXX)
proxy_pid=
cleanup() {
  [ -n "$proxy_pid" ] && kill "$proxy_pid" 2>/dev/null
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ca=$work/ca key=$work/proxy.key
"$root/certs/qcg-certs" --dir "$ca" init >/dev/null
"$root/certs/qcg-certs" --dir "$ca" issue proxy p1 --san 127.0.0.1 >/dev/null
(umask 077 && openssl rand -hex 32 >"$key")
ticks_per_s=$(getconf CLK_TCK)
field() { awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }'; }
. "$root/bench/stats.sh" # median, spread

# one_run BUILD WHO: a fresh proxy of BUILD, a stream and a ping-pong through it.
one_run() {
  local t0 t1 c0 c1 out rtt i
  "$1/proxy/qcg-proxy" --listen 127.0.0.1 --port $port --control-port $cport --ca "$ca/ca.crt" \
    --cert "$ca/proxy-p1.pem" --key-file "$key" --log-level warn 2>"$work/proxy.log" &
  proxy_pid=$!
  for ((i = 0; i < 200; i++)); do
    ss -ltnH "sport = :$port" | grep -q . && break
    sleep 0.05
  done
  read -r t0 t1 < <("$mint" "$key" 60)
  "$stream" --connect 127.0.0.1:$port --proxy-token "$t1" --serve &
  c0=$(awk '{ print $14 + $15 }' "/proc/$proxy_pid/stat")
  out=$("$stream" --connect 127.0.0.1:$port --proxy-token "$t0" --seconds "$secs")
  wait %2
  c1=$(awk '{ print $14 + $15 }' "/proc/$proxy_pid/stat")
  read -r t0 t1 < <("$mint" "$key" 60)
  "$stream" --connect 127.0.0.1:$port --proxy-token "$t1" --serve &
  rtt=$("$stream" --connect 127.0.0.1:$port --proxy-token "$t0" --pingpong $pings | field median)
  wait %2
  kill "$proxy_pid"
  wait "$proxy_pid" || true
  proxy_pid=
  echo "$out" | field gbps >>"$work/$2.gbps"
  echo "$rtt" >>"$work/$2.rtt"
  awk -v d=$((c1 - c0)) -v t="$ticks_per_s" -v b="$(echo "$out" | field bytes)" \
    'BEGIN { printf "%.3f\n", d / t / (b / 1e9) }' >>"$work/$2.cpu"
}

# direct_run: the same stream over plain TCP on loopback, no relay (the
# figure issue 29 compares a relayed stream with).
direct_run() {
  "$stream" --listen 18703 >/dev/null &
  local i
  for ((i = 0; i < 200; i++)); do
    ss -ltnH "sport = :18703" | grep -q . && break
    sleep 0.05
  done
  "$stream" --connect 127.0.0.1:18703 --seconds "$secs" | field gbps >>"$work/direct.gbps"
  wait %1 || true
}

for _ in $(seq "$rounds"); do
  direct_run
  [ -n "$base" ] && one_run "$base" base
  one_run "$build" new
done
echo "qcg-proxy on loopback, one stream of ${secs} s and $pings round trips, medians of $rounds rounds (min-max)"
printf '%-6s %22s %22s %22s\n' build "Gb/s" "RTT us" "proxy CPU s/GB"
printf '%-6s %22s\n' direct "$(median <"$work/direct.gbps") ($(spread <"$work/direct.gbps"))"
for who in ${base:+base} new; do
  printf '%-6s %22s %22s %22s\n' "$who" \
    "$(median <"$work/$who.gbps") ($(spread <"$work/$who.gbps"))" \
    "$(median <"$work/$who.rtt") ($(spread <"$work/$who.rtt"))" \
    "$(median <"$work/$who.cpu") ($(spread <"$work/$who.cpu"))"
done
if [ -n "$base" ]; then
  awk -v g="$(median <"$work/new.gbps")" -v gb="$(median <"$work/base.gbps")" \
    -v r="$(median <"$work/new.rtt")" -v rb="$(median <"$work/base.rtt")" \
    -v c="$(median <"$work/new.cpu")" -v cb="$(median <"$work/base.cpu")" \
    'BEGIN { printf "new/base: throughput %.2f, RTT %.2f, CPU per GB %.2f\n", g / gb, r / rb, c / cb }'
fi
for who in ${base:+base} new; do
  paste "$work/$who.gbps" "$work/direct.gbps" | awk '{ print $1 / $2 }' >"$work/$who.ratio"
  echo "$who/direct throughput, per round: median $(median <"$work/$who.ratio") ($(spread <"$work/$who.ratio"))"
done
