#!/usr/bin/env bash
# What an idle relayed pair costs qcg-proxy: N pairs held open through a proxy
# on 127.0.0.1 (tcp-stream --hold, tokens from proxy-token), once their pipes
# are dropped (2 s without data), the proxy's RSS and descriptors per pair,
# and the RSS extrapolated to 100,000 pairs.  Each N on a fresh proxy, in a
# network namespace of its own.  With QCG_BASE_BUILD_DIR, that build's
# qcg-proxy is measured too, by turns with QCG_BUILD_DIR's.
#
#   bench/proxy-idle.sh [PAIRS ...]      (root; default 500 1000 2400)
#       QCG_BUILD_DIR (default build/), QCG_BASE_BUILD_DIR (optional)
#
# The proxy counts 8 descriptors per pair (two sockets, two pipes while data
# flows, the two connections before pairing) and 256 besides, so a hard
# nofile of 20000 (this machine's, which root cannot raise) leaves room for
# 2468 pairs: measure up to that and extrapolate per pair.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${QCG_BUILD_DIR:-$root/build}
base=${QCG_BASE_BUILD_DIR:-}
if [ -z "${PROXY_IDLE_INNER:-}" ]; then
  for f in "$build/bench/tcp-stream" "$build/bench/proxy-token" "$build/proxy/qcg-proxy" \
    ${base:+"$base/proxy/qcg-proxy"} "$root/certs/qcg-certs"; do
    [ -x "$f" ] || { echo "proxy-idle.sh: $f missing: build first" >&2; exit 1; }
  done
  exec unshare -n env PROXY_IDLE_INNER=1 bash "$0" "$@"
fi
ip link set lo up
[ $# -gt 0 ] || set -- 500 1000 2400
stream=$build/bench/tcp-stream mint=$build/bench/proxy-token
port=18711 cport=18712
work=$(mktemp -d /tmp/proxy-idle.XXXXXX)
proxy_pid='' holder_pid=''
cleanup() {
  for p in $holder_pid $proxy_pid; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ca=$work/ca key=$work/proxy.key
"$root/certs/qcg-certs" --dir "$ca" init >/dev/null
"$root/certs/qcg-certs" --dir "$ca" issue proxy p1 --san 127.0.0.1 >/dev/null
(umask 077 && openssl rand -hex 32 >"$key")
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
nfds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 | wc -l; }
# wait_for WHAT SECONDS COMMAND...: bounded.
wait_for() {
  local what=$1 secs=$2 i
  shift 2
  for ((i = 0; i < secs * 10; i++)); do "$@" && return 0; sleep 0.1; done
  echo "proxy-idle.sh: no $what within $secs s" >&2
  return 1
}

# one BUILD WHO PAIRS: a fresh proxy of BUILD holding PAIRS idle pairs.
one() {
  local n=$3 rss0 fds0 rss1 fds1
  "$1/proxy/qcg-proxy" --listen 127.0.0.1 --port $port --control-port $cport --ca "$ca/ca.crt" \
    --cert "$ca/proxy-p1.pem" --key-file "$key" --log-level warn 2>"$work/proxy.log" &
  proxy_pid=$!
  wait_for "listener" 10 sh -c "ss -ltnH 'sport = :$port' | grep -q ."
  rss0=$(rss $proxy_pid) fds0=$(nfds $proxy_pid)
  "$mint" "$key" 600 "$n" >"$work/tokens"
  rm -f "$work/hold"
  mkfifo "$work/hold"
  "$stream" --connect 127.0.0.1:$port --hold "$work/tokens" <"$work/hold" >"$work/held" 2>&1 &
  holder_pid=$!
  exec 9>"$work/hold"
  wait_for "$n pairs held" 120 grep -q "^held $n pairs" "$work/held" ||
    { cat "$work/held" "$work/proxy.log" >&2; exit 1; }
  # Pipes made at pairing are dropped after 2 s without data.
  trimmed() { [ "$(nfds $proxy_pid)" -le $((fds0 + 2 * n + 4)) ]; }
  wait_for "pipes dropped" 30 trimmed
  rss1=$(rss $proxy_pid) fds1=$(nfds $proxy_pid)
  exec 9>&-
  wait "$holder_pid" || true
  holder_pid=
  kill "$proxy_pid"
  wait "$proxy_pid" || true
  proxy_pid=
  awk -v w="$2" -v n="$n" -v r0="$rss0" -v r1="$rss1" -v f0="$fds0" -v f1="$fds1" 'BEGIN {
    per = (r1 - r0) / n
    printf "%-5s %7d %9d %9d %10.3f %8d %8.2f %14.1f\n", w, n, r0, r1, per, f1 - f0,
      (f1 - f0) / n, (r0 + per * 100000) / 1024 }'
}

echo "qcg-proxy, idle pairs on loopback (pipes dropped), RSS in KiB"
printf '%-5s %7s %9s %9s %10s %8s %8s %14s\n' build pairs "RSS 0" "RSS N" "KiB/pair" "fds" \
  "fds/pair" "100k pairs MiB"
for n in "$@"; do
  [ -n "$base" ] && one "$base" base "$n"
  one "$build" new "$n"
done
