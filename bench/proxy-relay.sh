#!/usr/bin/env bash
# The proxy relay in the lab: throughput (one stream), 8-byte round trip and
# relay CPU per GB for
#   (a) direct TCP            nata1 -> open1
#   (b) qcg-proxy             nata1 -> proxy <- sym1   (both connect out, tokens)
#   (c) socat two-listener    nata1 -> proxy <- sym1   (socat TCP-LISTEN:A TCP-LISTEN:B)
# with no delay, then (a) and (b) with --delay 5 --rate 1000; and 1,000 idle
# pairs held through qcg-proxy: its RSS per pair and a new pair's throughput.
# Medians of RUNS alternating runs (a, b, c, a, b, c, ...).
#
#   flock -w 1800 /tmp/qcg-lab.lock bench/proxy-relay.sh [RUNS] [SECONDS]
#                                   (root; QCG_BUILD_DIR, default build/)
#
# The lab's qcg-proxy (qcg-lab up) is the one measured: 203.0.113.20:7703, key
# $QCG_LAB_DIR/certs/proxy.key; tokens are minted with bench/proxy-token.
# Relay CPU: utime + stime of the relay process (/proc/PID/stat for qcg-proxy,
# the shell's `times` for socat, which exits with its one connection).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$root/build}
runs=${1:-3}
secs=${2:-5}
lab=$root/lab/qcg-lab
state=${QCG_LAB_DIR:-/run/qcg-lab}
stream=$QCG_BUILD_DIR/bench/tcp-stream
mint=$QCG_BUILD_DIR/bench/proxy-token
key=$state/certs/proxy.key
proxy_ip=203.0.113.20 proxy_port=7703
open1_ip=198.51.100.11 direct_port=21500 # in open1's block, below verify's ports
socat_a=36500 socat_b=36501              # in the proxy host's block
idle_pairs=1000
pings=5000 delay_pings=200
work=$(mktemp -d /tmp/proxy-relay.XXXXXX)
bg_pids=()
hold_fd=

cleanup() {
  [ -n "$hold_fd" ] && exec 8>&-
  for p in "${bg_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$lab" down >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

for f in "$stream" "$mint" "$QCG_BUILD_DIR/proxy/qcg-proxy"; do
  [ -x "$f" ] || { echo "proxy-relay.sh: $f missing: build first" >&2; exit 1; }
done
command -v socat >/dev/null || { echo "proxy-relay.sh: socat missing (scripts/install-deps)" >&2; exit 1; }

x() { "$lab" exec "$1" -- "${@:2}"; }
ticks_per_s=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
proxy_pid() { cat "$state/run/proxy.pid"; }
nfds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 | wc -l; }
listening() { ip netns exec "qcg-$1" ss -ltnH "sport = :$2" 2>/dev/null | grep -q .; }
# wait_until DESCRIPTION CMD...: bounded (10 s) wait for CMD to succeed.
wait_until() {
  local what=$1 i
  shift
  for ((i = 0; i < 200; i++)); do "$@" && return 0; sleep 0.05; done
  echo "proxy-relay.sh: timed out waiting for $what" >&2
  exit 1
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else print v[int((NR + 1) / 2)] }'; }
field() { awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }'; }

# run_direct MODE-ARGS... : prints tcp-stream's line.
run_direct() {
  x open1 "$stream" --listen $direct_port 2>/dev/null &
  local srv=$!
  wait_until "open1 listening" listening open1 $direct_port
  x nata1 "$stream" --connect $open1_ip:$direct_port "$@"
  wait $srv
}

# run_proxy MODE-ARGS... : tcp-stream's line, plus "cpu_s X" for qcg-proxy.
run_proxy() {
  local t0 t1 pid c0 c1 out
  read -r t0 t1 < <("$mint" "$key" 60)
  pid=$(proxy_pid)
  x sym1 "$stream" --connect $proxy_ip:$proxy_port --proxy-token "$t1" --serve &
  local srv=$!
  c0=$(cpu_ticks "$pid")
  out=$(x nata1 "$stream" --connect $proxy_ip:$proxy_port --proxy-token "$t0" "$@")
  wait $srv
  c1=$(cpu_ticks "$pid")
  echo "$out cpu_s $(awk -v d=$((c1 - c0)) -v t="$ticks_per_s" 'BEGIN { printf "%.3f", d / t }')"
}

# run_socat MODE-ARGS... : the same through a fresh socat.
run_socat() {
  local out
  x proxy bash -c "socat TCP-LISTEN:$socat_a,reuseaddr TCP-LISTEN:$socat_b,reuseaddr; times >&2" \
    2>"$work/socat.times" &
  local relay=$!
  wait_until "socat listening" listening proxy $socat_a
  x sym1 "$stream" --connect $proxy_ip:$socat_a --serve &
  local srv=$!
  out=$(x nata1 "$stream" --connect $proxy_ip:$socat_b --retry-ms 5000 "$@")
  wait $srv
  wait $relay
  # times: the shell's own line, then its children's "XmY.YYYs XmY.YYYs".
  echo "$out cpu_s $(sed -n 2p "$work/socat.times" | awk '{
    n = split($1 " " $2, t, " "); s = 0
    for (i = 1; i <= n; i++) { split(t[i], p, "m"); s += p[1] * 60 + p[2] }
    printf "%.3f", s }')"
}

# One measurement: appends "gbps cpu_s_per_gb" to $work/<label>.tp and the
# median RTT to $work/<label>.rtt.
measure() { # label runner pings
  local label=$1 runner=$2 n=$3 line gbps bytes cpu
  line=$($runner --seconds "$secs")
  gbps=$(echo "$line" | field gbps)
  bytes=$(echo "$line" | field bytes)
  cpu=$(echo "$line" | field cpu_s)
  echo "$gbps ${cpu:+$(awk -v c="$cpu" -v b="$bytes" 'BEGIN { printf "%.3f", c / (b / 1e9) }')}" \
    >>"$work/$label.tp"
  line=$($runner --pingpong "$n")
  echo "$line" | field median >>"$work/$label.rtt"
}

col() { awk -v c="$2" '{ print $c }' "$work/$1" | median; }

lab_up() {
  echo "lab up $*" >&2
  "$lab" up "$@" >/dev/null
  wait_until "qcg-proxy on the proxy host" listening proxy $proxy_port
}

# ---- no delay: a, b, c ----
lab_up
for ((r = 0; r < runs; r++)); do
  measure a run_direct $pings
  measure b run_proxy $pings
  measure c run_socat $pings
done

# ---- 1,000 idle pairs through qcg-proxy, then a new pair's throughput ----
pid=$(proxy_pid)
rss0=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")
fds0=$(nfds "$pid")
# Four holders of 250 pairs each: a node has ~990 ephemeral ports.
holders=(nata1 nata2 natb1 natb2)
per=$((idle_pairs / ${#holders[@]}))
mkfifo "$work/hold"
exec 8<>"$work/hold"
hold_fd=8
for h in "${holders[@]}"; do
  "$mint" "$key" 600 $per >"$work/tokens-$h"
  x "$h" "$stream" --connect $proxy_ip:$proxy_port --hold "$work/tokens-$h" \
    <"$work/hold" >"$work/held-$h" 2>&1 &
  bg_pids+=($!)
done
all_held() {
  local h
  for h in "${holders[@]}"; do grep -q "^held $per pairs" "$work/held-$h" || return 1; done
}
for ((i = 0; i < 600; i++)); do all_held && break; sleep 0.1; done
all_held || { echo "proxy-relay.sh: idle pairs not all paired:" >&2; cat "$work"/held-* >&2; exit 1; }
# Idle pipes are dropped after 2 s: wait until only the sockets are left.
idle_trimmed() { [ "$(nfds "$pid")" -le $((fds0 + 2 * idle_pairs + 8)) ]; }
wait_until "idle pairs to drop their pipes" idle_trimmed
rss1=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")
fds1=$(nfds "$pid")
for ((r = 0; r < runs; r++)); do
  line=$(run_proxy --seconds "$secs")
  echo "$line" | field gbps >>"$work/idle.tp"
done
rss2=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")
exec 8>&-
hold_fd=
# The holders' subshells inherited fd 8, so closing ours gives them no EOF:
# stop the holders themselves.
pkill -f -- "--hold $work/tokens-" || true
for p in "${bg_pids[@]}"; do wait "$p" || true; done
bg_pids=()

# ---- --delay 5 --rate 1000: a, b ----
lab_up --delay 5 --rate 1000
for ((r = 0; r < runs; r++)); do
  measure da run_direct $delay_pings
  measure db run_proxy $delay_pings
done
"$lab" down >/dev/null

# ---- the table ----
a_tp=$(col a.tp 1) b_tp=$(col b.tp 1) c_tp=$(col c.tp 1)
b_cpu=$(col b.tp 2) c_cpu=$(col c.tp 2)
a_rtt=$(median <"$work/a.rtt") b_rtt=$(median <"$work/b.rtt") c_rtt=$(median <"$work/c.rtt")
da_tp=$(col da.tp 1) db_tp=$(col db.tp 1)
da_rtt=$(median <"$work/da.rtt") db_rtt=$(median <"$work/db.rtt")
idle_tp=$(median <"$work/idle.tp")
calc() { awk "BEGIN { printf \"$1\", $2 }"; }

echo
echo "qcg-proxy relay, lab, medians of $runs alternating runs, ${secs} s streams"
printf '%-44s %9s %12s %14s\n' "path" "Gb/s" "RTT us" "relay CPU s/GB"
printf '%-44s %9s %12s %14s\n' "(a) direct nata1 -> open1" "$a_tp" "$a_rtt" "-"
printf '%-44s %9s %12s %14s\n' "(b) qcg-proxy nata1 -> proxy <- sym1" "$b_tp" "$b_rtt" "$b_cpu"
printf '%-44s %9s %12s %14s\n' "(c) socat two-listener, same hosts" "$c_tp" "$c_rtt" "$c_cpu"
printf '%-44s %9s %12s %14s\n' "(a) direct, --delay 5 --rate 1000" "$da_tp" "$da_rtt" "-"
printf '%-44s %9s %12s %14s\n' "(b) qcg-proxy, --delay 5 --rate 1000" "$db_tp" "$db_rtt" "-"
printf '%-44s %9s %12s %14s\n' "(b) new pair beside $idle_pairs idle pairs" "$idle_tp" "-" "-"
echo
echo "b/c throughput $(calc %.2f "$b_tp / $c_tp") (target >= 0.95)," \
  "b/c CPU per GB $(calc %.2f "$b_cpu / $c_cpu") (target <= 0.7)," \
  "added RTT: proxy $(calc %.1f "$b_rtt - $a_rtt") us, socat $(calc %.1f "$c_rtt - $a_rtt") us"
echo "with delay: b/a throughput $(calc %.2f "$db_tp / $da_tp"), added RTT $(calc %.1f "$db_rtt - $da_rtt") us"
echo "$idle_pairs idle pairs: proxy RSS $rss0 -> $rss1 KiB" \
  "($(calc %.2f "($rss1 - $rss0) / $idle_pairs") KiB per pair; target <= 256)," \
  "descriptors $fds0 -> $fds1; RSS $rss2 KiB after the new pairs;" \
  "new pair $(calc %.2f "$idle_tp / $b_tp")x of (b)"
