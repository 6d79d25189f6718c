#!/usr/bin/env bash
# Issue 32's attacks in one run, each with a legitimate client's success
# rate and latency beside the same client's with no attack (measured in the
# same run, just before it).  Every part runs on loopback in a network
# namespace of its own; this script only calls the pieces and puts their
# figures in one table:
#
#   stage-1, stage-400, stage-1000   bench/soap-stage.sh: new broker
#       connections (TLS + GET /?wsdl) from a known address (a registered
#       frontend's) and from unknown ones, while 1000 idle connections and
#       100 trickled ClientHellos come from 1, 400 or 1000 addresses;
#       stage256-*: the same with --max-handshakes 256 (the stage's size
#       before it was an option);
#   proxy-one, proxy-many            bench/service-load.sh (proxy part, with
#       QCG_LOAD_PAIRS): new relayed pairs (both hellos and a round trip)
#       while 1000 idle + 100 dripping connections come from one address or
#       100;
#   lookups, reports                 bench/service-load.sh (broker part,
#       modes lookups and reports): 10 frontends' paced lookups while
#       another cluster looks up as fast as it can over 8 connections, or
#       sends batches of 256 forged failure reports of the first frontend's
#       job over 8 connections (a REPORT storm);
#   rank-one, rank-many              bench/listener-flood.sh: a peer's
#       connects to a rank while 1100 idle connections come from one
#       address or 1200 from 24.
#
#   root# bench/attacks.sh [TRIALS]        (QCG_BUILD_DIR, default build/)
#
# TRIALS (default 40): connections per client and mode.  Rows: ok = the
# legitimate client's successes, p50/p99 in ms; "idle" the same client's
# figures with no attack in the same part of the run; p99/idle the ratio.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${QCG_BUILD_DIR:-$root/build}
export QCG_BUILD_DIR=$build
trials=${1:-40}
[ "$(id -u)" = 0 ] || { echo "attacks.sh: run as root (network namespaces)" >&2; exit 1; }
work=$(mktemp -d /tmp/qcg-attacks.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Each part's own output is kept on stderr as it runs (its progress) and
# in $work/PART for the table.
part() { # NAME CMD...
  local name=$1
  shift
  echo "attacks.sh: $name" >&2
  "$@" 2>&1 | tee "$work/$name" >&2
}

for addrs in 1 400 1000; do
  part "stage-$addrs" "$root/bench/soap-stage.sh" "$trials" "$addrs" 1000
  # The same with main's stage of 256 places before issue 32's second round.
  part "stage256-$addrs" env QCG_STAGE_BROKER_ARGS="--max-handshakes 256" \
    "$root/bench/soap-stage.sh" "$trials" "$addrs" 1000
done
part proxy env QCG_LOAD_ONLY=proxy QCG_LOAD_MODES="idle one many" QCG_LOAD_PAIRS="$trials" \
  "$root/bench/service-load.sh" 1 5
part lookups env QCG_LOAD_ONLY=broker QCG_LOAD_MODES="idle lookups reports" \
  "$root/bench/service-load.sh" 1 10
part rank unshare -n sh -c 'ip link set lo up && exec "$0" 1 "$1"' \
  "$root/bench/listener-flood.sh" "$trials"

# Rows "attack client ok p50 p99" into $work/rows, "client p50 p99" of the
# same client with no attack into $work/idle.
# soap-stage: "LABEL... K/N  p50 X ms  p99 Y ms", LABEL "idle known ..." or
# "attack A addresses unknown ...".
for st in stage-{1,400,1000} stage256-{1,400,1000}; do
  awk -v a="$st" '
    { for (i = 1; i <= NF; i++) { if ($i ~ /^[0-9]+\/[0-9]+$/) ok = $i; if ($i == "p50") p50 = $(i + 1);
        if ($i == "p99") p99 = $(i + 1) } }
    / known / && /\/[0-9]+ / { c = "known" } / unknown / && /\/[0-9]+ / { c = "unknown" }
    /^idle / && /\/[0-9]+/ { printf "%s-%s %s %s\n", a, c, (index(ok, "0/") == 1 ? "-" : p50), (index(ok, "0/") == 1 ? "-" : p99) > "/dev/stderr" }
    /^attack / && /\/[0-9]+/ { printf "%s %s %s %s %s\n", a, c, ok, (index(ok, "0/") == 1 ? "-" : p50), (index(ok, "0/") == 1 ? "-" : p99) }
  ' "$work/$st" >>"$work/rows" 2>>"$work/idle"
done
# service-load, proxy: "MODE new pairs K/N  p50 X ms  p99 Y ms".
awk '$2 == "new" && $3 == "pairs" { m = $1; ok = $4; p50 = $6; p99 = $9
    if (m == "idle") printf "proxy-pair %s %s\n", p50, p99 > "/dev/stderr"
    else printf "proxy-%s pair %s %s %s\n", m, ok, p50, p99 }' \
  "$work/proxy" >>"$work/rows" 2>>"$work/idle"
# service-load, broker: "MODE SOURCES P50 (..) P99 (..) RATE (..) FAILED NOSETUP CPU (..)"
# in microseconds; every frontend's lookups.
awk '$1 == "idle" || $1 == "lookups" || $1 == "reports" { n = ($1 == "idle") ? 2 : 3
    p50 = $n; p99 = $(n + 2); f = $(n + 6); ms50 = p50 / 1000; ms99 = p99 / 1000
    if ($1 == "idle") printf "lookup %.2f %.2f\n", ms50, ms99 > "/dev/stderr"
    else printf "%s lookup %s %.2f %.2f\n", $1, (f == 0 ? "all" : f "-failed"), ms50, ms99 }' \
  "$work/lookups" >>"$work/rows" 2>>"$work/idle"
# listener-flood: "new MODE K/N P50 P99" (ms).
awk '$1 == "new" { if ($2 == "idle") printf "peer %s %s\n", $4, $5 > "/dev/stderr"
    else printf "rank-%s peer %s %s %s\n", $2, $3, $4, $5 }' \
  "$work/rank" >>"$work/rows" 2>>"$work/idle"

echo
echo "issue 32's attacks, $trials trials per client (lookup: 10 frontends x 2 x 50/s for 10 s)"
printf '%-12s %-8s %8s %9s %9s %10s %10s %9s\n' attack client ok "p50 ms" "p99 ms" \
  "idle p50" "idle p99" p99/idle
while read -r attack client ok p50 p99; do
  key=$client
  case $attack in
  stage*) key=$attack-$client ;;
  proxy-*) key=proxy-pair ;;
  esac
  read -r ip50 ip99 < <(awk -v k="$key" '$1 == k { print $2, $3 }' "$work/idle")
  printf '%-12s %-8s %8s %9s %9s %10s %10s %9s\n' "$attack" "$client" "$ok" "$p50" "$p99" \
    "${ip50:--}" "${ip99:--}" "$(awk -v a="$p99" -v b="${ip99:-0}" \
      'BEGIN { if (a == "-" || b + 0 == 0) print "-"; else printf "%.2f", a / b }')"
done <"$work/rows"
echo
echo "the attackers (slow-clients: connects, cut by the service, failed, held at the end; floods: calls answered):"
for st in stage-{1,400,1000} stage256-{1,400,1000}; do
  echo "$st $(grep -h '^attacker:' "$work/$st"); broker $(grep -h 'under attack' "$work/$st" | cut -d: -f2-)"
done
grep -h 'flood:' "$work/lookups" || true
