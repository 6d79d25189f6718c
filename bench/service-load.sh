#!/usr/bin/env bash
# Issue 16's load benchmark, on loopback in a private network namespace:
#
#   (a) qcg-broker answering 10 frontends' lookups (10 bench/broker-load, each
#       its own cluster, certificate and address 127.0.0.11-20, 2 connections
#       x 50 lookups/s),
#       idle, then while bench/slow-clients holds 1,000 idle TCP connections
#       and 100 TLS handshakes trickled a byte at a time (renewed as the
#       broker cuts them), from 100 source addresses (127.1.0.1-100: many
#       hosts) or from one (127.2.0.1): per-lookup latency p50/p99 and rate;
#   (b) qcg-proxy relaying one stream (bench/tcp-stream, tokens from
#       bench/proxy-token), unloaded, then under the same attack on its
#       hello port (proxy hellos trickled): throughput.
#
#   root# bench/service-load.sh [ROUNDS] [SECONDS]     (QCG_BUILD_DIR, default build/)
#
# QCG_LOAD_DAEMONS=DIR takes qcg-broker and qcg-proxy from another build (a
# before/after comparison: the tools stay those of QCG_BUILD_DIR);
# QCG_LOAD_ONLY=broker or proxy runs one part; QCG_LOAD_RENEW_MS (200) sets
# how soon the attacker replaces a connection the service cut or refused;
# QCG_LOAD_MANY (127.1.0.1/100) the many-address attack's sources (e.g.
# 127.1.0.1/1000: more addresses than the broker's handshake stage has places);
# QCG_LOAD_MODES ("idle many one") the modes to run, among them `lookups`
# (the broker only: a cluster of the attacker's own, certified, looking up as
# fast as it can with 8 connections from 127.0.0.99: a lookup flood) and
# `reports` (the same cluster from 127.0.0.98 sending batches of 256
# forged failure reports of the first frontend's job: a REPORT storm);
# QCG_LOAD_PAIRS=N also times N new relayed pairs per proxy mode, one after
# the other (both ends' hellos and one 8-byte round trip: p50/p99, failures).
#
# Each round runs idle, many, one in turn (alternating, so a drift of the
# machine hits all three alike); the table gives medians of ROUNDS and the
# spread (min-max).  Targets: (a) every lookup answered and p99 under attack
# <= 2x idle; (b) throughput under attack >= 0.9x unloaded.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${QCG_BUILD_DIR:-$root/build}
daemons=${QCG_LOAD_DAEMONS:-$build}
only=${QCG_LOAD_ONLY:-}
rounds=${1:-3}
secs=${2:-10}

# Our own loopback: fixed ports, and 127/8 free for the attackers.
if [ "${QCG_SERVICE_LOAD_NETNS:-}" != 1 ]; then
  exec unshare -n env QCG_SERVICE_LOAD_NETNS=1 QCG_BUILD_DIR="$build" QCG_LOAD_DAEMONS="$daemons" \
    "$0" "$@"
fi
ip link set lo up
# 1,100 attack connections, the services' own, and their renewals.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

frontends=10 threads=2 rate=50 contacts=100
idle_conns=1000 slow_conns=100 byte_ms=100
renew_ms=${QCG_LOAD_RENEW_MS:-200}
broker_port=17660 proxy_port=17663 proxy_cport=17662
read -ra modes <<<"${QCG_LOAD_MODES:-idle many one}"
pairs_n=${QCG_LOAD_PAIRS:-0}
declare -A sources=([many]=${QCG_LOAD_MANY:-127.1.0.1/100} [one]=127.2.0.1 [lookups]=127.0.0.99
  [reports]=127.0.0.98)

for f in "$daemons/broker/qcg-broker" "$daemons/proxy/qcg-proxy" "$build/bench/broker-load" \
  "$build/bench/slow-clients" "$build/bench/tcp-stream" "$build/bench/proxy-token"; do
  [ -x "$f" ] || { echo "service-load.sh: $f missing: build first" >&2; exit 1; }
done
work=$(mktemp -d /tmp/service-load.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

ca=$work/ca
"$root/certs/qcg-certs" --dir "$ca" init >/dev/null
"$root/certs/qcg-certs" --dir "$ca" issue broker --san 127.0.0.1 >/dev/null
"$root/certs/qcg-certs" --dir "$ca" issue proxy p1 --san 127.0.0.1 >/dev/null
for ((i = 0; i < frontends; i++)); do
  "$root/certs/qcg-certs" --dir "$ca" issue frontend "bench$i" >/dev/null
done
"$root/certs/qcg-certs" --dir "$ca" issue frontend flood >/dev/null
(umask 077 && openssl rand -hex 32 >"$work/proxy.key")

listening() { ss -ltnH "sport = :$1" | grep -q .; }
wait_until() { # what cmd...: bounded (10 s)
  local what=$1 i
  shift
  for ((i = 0; i < 200; i++)); do "$@" && return 0; sleep 0.05; done
  echo "service-load.sh: timed out waiting for $what" >&2
  exit 1
}
median() { grep -v '^-$' | sort -g | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "nan" }'; }
spread() { grep -v '^-$' | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo "-" hi }'; }
pct() { grep -v '^-$' | sort -g | awk -v p="$1" '{ v[NR] = $1 } END { print NR ? v[int((NR * p + 99) / 100)] : "nan" }'; }
field() { awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }'; }

# attack_start MODE PORT HELLO: slow-clients in the background, held by a
# fifo; returns once every connection was made once.
attack_start() {
  local mode=$1 port=$2 hello=$3
  [ "$mode" = idle ] && return 0
  if [ "$mode" = lookups ] || [ "$mode" = reports ]; then
    local forge=()
    [ "$mode" = reports ] && forge=(--forge-reports job0 --batch 256)
    "$build/bench/broker-load" --url "https://127.0.0.1:$port/" --ca "$ca/ca.crt" \
      --cert "$ca/frontend-flood.pem" --cluster flood --job "flood-$mode" --contacts $contacts \
      --threads 8 --seconds 3600 --bind "${sources[$mode]}" \
      --address "${sources[$mode]}" "${forge[@]}" >"$work/attack.out" 2>&1 &
    attacker=$!
    pids+=("$attacker")
    sleep 2 # its registration and publish, then it looks up
    kill -0 "$attacker" 2>/dev/null || {
      echo "service-load.sh: the $mode flood ended: $(cat "$work/attack.out")" >&2
      exit 1
    }
    return 0
  fi
  rm -f "$work/attack.fifo"
  mkfifo "$work/attack.fifo"
  "$build/bench/slow-clients" --connect 127.0.0.1:"$port" --idle $idle_conns --slow $slow_conns \
    --hello "$hello" --sources "${sources[$mode]}" --byte-ms $byte_ms --renew-ms "$renew_ms" \
    <"$work/attack.fifo" >"$work/attack.out" 2>"$work/attack.err" &
  attacker=$!
  pids+=("$attacker")
  exec 7>"$work/attack.fifo"
  wait_until "the attack's connections" grep -q ready "$work/attack.err"
  # One handshake deadline (5 s broker, 10 s proxy) is not waited for: the
  # stage is full within a second, and the measurement spans the cuts.
  sleep 1
}
cpu_s() { awk -v h="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / h }' "/proc/$1/stat"; }
attack_stop() { # MODE LABEL: the attacker's counts and CPU into $work/attack.log
  [ "$1" = idle ] && return 0
  local cpu
  cpu=$(cpu_s "$attacker")
  if [ "$1" = lookups ] || [ "$1" = reports ]; then
    # SIGTERM: it stops and prints its counts (reports: its "lookups" are
    # the reports the broker accepted, "failed" those it refused).
    kill "$attacker" 2>/dev/null || true
    wait "$attacker" 2>/dev/null || true
    echo "$2 $1 flood: $(grep '^lookups' "$work/attack.out") cpu_s $cpu" >>"$work/attack.log"
    return 0
  fi
  exec 7>&-
  wait "$attacker" || true
  echo "$2 $(cat "$work/attack.out") cpu_s $cpu" >>"$work/attack.log"
}

col() { awk -v c="$2" '{ print $c }' "$work/$1"; }
sum() { awk '{ s += $1 } END { print s + 0 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# ---- (a) the broker ----

# lookups LABEL: 10 frontends at once; appends "p50 p99 rate failed
# setups-failed" to $work/LABEL.lookups (a failed setup: the frontend could
# not register or publish, so it made no lookups).
lookups() {
  local label=$1 i lp=() failed=0 total=0 setups=0 n
  for ((i = 0; i < frontends; i++)); do
    "$build/bench/broker-load" --url "https://127.0.0.1:$broker_port/" --ca "$ca/ca.crt" \
      --cert "$ca/frontend-bench$i.pem" --cluster "bench$i" --job "job$i" --contacts $contacts \
      --threads $threads --rate $rate --seconds "$secs" --latency "$work/lat.$i" \
      --bind 127.0.0.$((11 + i)) --address 127.0.0.$((11 + i)) >"$work/load.$i" 2>&1 &
    lp+=($!)
  done
  for ((i = 0; i < frontends; i++)); do
    wait "${lp[$i]}" ||
      echo "  $label: bench$i exit $?: $(grep -v '^latency' "$work/load.$i" | tr '\n' ' ')" >&2
    # "lookups N in T s with C connections: R/s (F failed)"; none = setup failed.
    n=$(awk '/^lookups/ { print $2 }' "$work/load.$i")
    total=$((total + ${n:-0}))
    n=$(awk '/^lookups/ { sub(/\(/, "", $10); print $10 + 0 }' "$work/load.$i")
    failed=$((failed + ${n:-0}))
    grep -q '^lookups' "$work/load.$i" || setups=$((setups + 1))
  done
  cat "$work"/lat.[0-9]* 2>/dev/null | sort -n >"$work/lat.all"
  rm -f "$work"/lat.[0-9]*
  n=$(wc -l <"$work/lat.all")
  # No lookup at all: "- -", left out of the medians.
  echo "$(awk -v n="$n" 'NR == int(n / 2) + 1 { p50 = $1 } NR == int(n * 99 / 100) + 1 { p99 = $1 }
    END { if (n) printf "%d %d", p50, p99; else printf "- -" }' "$work/lat.all") $(awk -v t=$total -v s="$secs" \
    'BEGIN { printf "%.0f", t / s }') $failed $setups" >>"$work/$label.lookups"
}

broker_part() {
  "$daemons/broker/qcg-broker" --listen 127.0.0.1 --port $broker_port --ca "$ca/ca.crt" \
    --cert "$ca/broker-broker.pem" --log-level warn 2>"$work/broker.log" &
  local pid=$! r mode f c0
  pids+=("$pid")
  wait_until "qcg-broker" listening $broker_port
  for ((r = 1; r <= rounds; r++)); do
    for mode in "${modes[@]}"; do
      attack_start "$mode" $broker_port tls
      c0=$(cpu_s "$pid")
      lookups "broker-$mode"
      awk -v a="$c0" -v b="$(cpu_s "$pid")" 'BEGIN { print b - a }' >>"$work/broker-$mode.cpu"
      attack_stop "$mode" "broker-$mode"
      echo "round $r broker $mode: p50 p99 rate failed no-setup:" \
        "$(tail -1 "$work/broker-$mode.lookups")" >&2
    done
  done
  kill "$pid"
  wait "$pid" || true

  echo
  echo "(a) qcg-broker, $frontends frontends x $threads connections x $rate lookups/s," \
    "$contacts contacts each;"
  echo "    attack: $idle_conns idle TCP + $slow_conns TLS ClientHellos at 1 byte/${byte_ms} ms," \
    "renewed ${renew_ms} ms after a cut;"
  echo "    medians of $rounds alternating rounds of ${secs} s (spread min-max)"
  printf '%-20s %16s %20s %18s %7s %8s %18s\n' "" "p50 us" "p99 us" "lookups/s" "failed" \
    "no-setup" "broker CPU s"
  for mode in "${modes[@]}"; do
    f=broker-$mode.lookups
    printf '%-20s %16s %20s %18s %7s %8s %18s\n' "$mode ${sources[$mode]:-}" \
      "$(col $f 1 | median) ($(col $f 1 | spread))" "$(col $f 2 | median) ($(col $f 2 | spread))" \
      "$(col $f 3 | median) ($(col $f 3 | spread))" "$(col $f 4 | sum)" "$(col $f 5 | sum)" \
      "$(median <"$work/broker-$mode.cpu") ($(spread <"$work/broker-$mode.cpu"))"
  done
  for mode in "${modes[@]}"; do
    [ "$mode" = idle ] && continue
    echo "p99 $mode/idle: $(ratio "$(col broker-$mode.lookups 2 | median)" \
      "$(col broker-idle.lookups 2 | median)") (target <= 2)"
  done
  echo "broker CPU: during one round's lookups; refusal lines in its log:" \
    "$(grep -c refused "$work/broker.log" || true)"
}

# ---- (b) the proxy ----

stream() { # LABEL: one relayed stream of SECONDS; appends Gb/s to $work/LABEL.gbps
  local t0 t1 srv
  read -r t0 t1 < <("$build/bench/proxy-token" "$work/proxy.key" 60)
  "$build/bench/tcp-stream" --connect 127.0.0.1:$proxy_port --proxy-token "$t1" --serve &
  srv=$!
  "$build/bench/tcp-stream" --connect 127.0.0.1:$proxy_port --proxy-token "$t0" \
    --seconds "$secs" | field gbps >>"$work/$1.gbps"
  wait $srv
}

# pairs LABEL: $pairs_n new relayed pairs one after the other, each both
# hellos and one round trip; appends each one's ms (or "-") to
# $work/LABEL.pairs.
pairs() {
  local i t0 t1 srv start ok
  for ((i = 0; i < pairs_n; i++)); do
    read -r t0 t1 < <("$build/bench/proxy-token" "$work/proxy.key" 60)
    start=$(date +%s%N)
    "$build/bench/tcp-stream" --connect 127.0.0.1:$proxy_port --proxy-token "$t1" --serve \
      >/dev/null 2>&1 &
    srv=$!
    ok=0
    timeout 10 "$build/bench/tcp-stream" --connect 127.0.0.1:$proxy_port --proxy-token "$t0" \
      --pingpong 1 >/dev/null 2>&1 && ok=1
    wait $srv 2>/dev/null || ok=0
    if [ $ok = 1 ]; then
      echo $((($(date +%s%N) - start) / 1000)) | awk '{ printf "%.2f\n", $1 / 1000 }'
    else
      echo -
    fi >>"$work/$1.pairs"
  done
}

proxy_part() {
  "$daemons/proxy/qcg-proxy" --listen 127.0.0.1 --port $proxy_port --control-port $proxy_cport \
    --ca "$ca/ca.crt" --cert "$ca/proxy-p1.pem" --key-file "$work/proxy.key" --log-level warn \
    2>"$work/proxy.log" &
  local pid=$! r mode rss
  pids+=("$pid")
  wait_until "qcg-proxy" listening $proxy_port
  for ((r = 1; r <= rounds; r++)); do
    for mode in "${modes[@]}"; do
      case $mode in lookups | reports) continue ;; esac
      attack_start "$mode" $proxy_port proxy
      stream "proxy-$mode"
      [ "$pairs_n" -gt 0 ] && pairs "proxy-$mode"
      attack_stop "$mode" "proxy-$mode"
      echo "round $r proxy $mode: $(tail -1 "$work/proxy-$mode.gbps") Gb/s" >&2
    done
  done
  rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")
  kill "$pid"
  wait "$pid" || true

  echo
  echo "(b) qcg-proxy, one relayed stream of ${secs} s; the same attack with proxy hellos;"
  echo "    medians of $rounds alternating rounds (spread min-max)"
  for mode in "${modes[@]}"; do
    case $mode in lookups | reports) continue ;; esac
    printf '%-20s %8s Gb/s (%s)\n' "$mode ${sources[$mode]:-}" \
      "$(median <"$work/proxy-$mode.gbps")" "$(spread <"$work/proxy-$mode.gbps")"
    [ "$pairs_n" -gt 0 ] && printf '%-20s new pairs %d/%d  p50 %s ms  p99 %s ms\n' "$mode" \
      "$(grep -vc '^-$' "$work/proxy-$mode.pairs")" "$(wc -l <"$work/proxy-$mode.pairs")" \
      "$(median <"$work/proxy-$mode.pairs")" "$(pct 99 <"$work/proxy-$mode.pairs")"
  done
  for mode in "${modes[@]}"; do
    case $mode in idle | lookups | reports) continue ;; esac
    echo "throughput $mode/idle: $(ratio "$(median <"$work/proxy-$mode.gbps")" \
      "$(median <"$work/proxy-idle.gbps")") (target >= 0.9)"
  done
  echo "proxy RSS at the end: $rss KiB; lines in its log: $(wc -l <"$work/proxy.log")" \
    "($(grep -c 'no token within' "$work/proxy.log" || true) 'no token within')"
}

[ "$only" = proxy ] || broker_part
[ "$only" = broker ] || proxy_part
echo
echo "attackers' counts (connects, cut by the service, failed connects, held at the end, its CPU):"
cat "$work/attack.log"
