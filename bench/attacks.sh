#!/usr/bin/env bash
# Issue 32's attacks in one run, each with a legitimate client's success
# rate and latency beside the same client's with no attack (measured in the
# same part of the same round, just before it).  Every part runs on
# loopback in a network namespace of its own; this script only calls the
# pieces and puts their figures in one table:
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
#       address or 1200 from 24;
#   uid-requests, uid-lookups, uid-idle   bench/helper-uid.sh: a rank's
#       connects (uid 4242) through the node's helper while another uid
#       (65534) keeps 300 connections of 8 requests in flight to it (any
#       request, or LOOKUPs only), or holds 256 half-sent ones beside 50
#       requesting; uid-cpu, a control: two busy loops of that uid.
#
#   root# bench/attacks.sh [TRIALS] [ROUNDS]     (QCG_BUILD_DIR, default build/)
#
# TRIALS (default 40): connections per client and mode; ROUNDS (default 1):
# every part again, in the same order.  Rows: ok = the legitimate client's
# successes (the fewest of a round), p50/p99 in ms (medians over the
# rounds); "idle" the same client's with no attack; p99/idle their ratio.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${QCG_BUILD_DIR:-$root/build}
export QCG_BUILD_DIR=$build
trials=${1:-40}
rounds=${2:-1}
[ "$(id -u)" = 0 ] || { echo "attacks.sh: run as root (network namespaces)" >&2; exit 1; }
work=$(mktemp -d /tmp/qcg-attacks.XXXXXX)
trap 'rm -rf "$work"' EXIT
stages=(stage-1 stage-400 stage-1000 stage256-1 stage256-400 stage256-1000)

# Each part's own output is kept on stderr as it runs (its progress) and
# in $work/PART.ROUND for the table.
part() { # NAME CMD...
  local name=$1
  shift
  echo "attacks.sh: round $r: $name" >&2
  "$@" 2>&1 | tee "$work/$name.$r" >&2
}

# parse ROUND: rows "attack client ok p50 p99" into $work/rows, the same
# client's with no attack ("key p50 p99") into $work/idle.
parse() {
  local st
  # soap-stage: "LABEL... K/N  p50 X ms  p99 Y ms", LABEL "idle known ..."
  # or "attack A addresses unknown ...".
  for st in "${stages[@]}"; do
    awk -v a="$st" '
      / known / { c = "known" } / unknown / { c = "unknown" }
      /^(idle|attack) / && / p50 | [0-9]+\/[0-9]+$/ {
        ok = "0/0"; p50 = "-"; p99 = "-"
        for (i = 1; i <= NF; i++) { if ($i ~ /^[0-9]+\/[0-9]+$/) ok = $i
          if ($i == "p50") p50 = $(i + 1); if ($i == "p99") p99 = $(i + 1) }
        if ($1 == "idle") printf "%s-%s %s %s\n", a, c, p50, p99 > "/dev/stderr"
        else printf "%s %s %s %s %s\n", a, c, ok, p50, p99 }
    ' "$work/$st.$1" >>"$work/rows" 2>>"$work/idle"
  done
  # service-load, proxy: "MODE new pairs K/N  p50 X ms  p99 Y ms".
  awk '$2 == "new" && $3 == "pairs" {
      if ($1 == "idle") printf "proxy-pair %s %s\n", $6, $9 > "/dev/stderr"
      else printf "proxy-%s pair %s %s %s\n", $1, $4, $6, $9 }' \
    "$work/proxy.$1" >>"$work/rows" 2>>"$work/idle"
  # service-load, broker: "MODE [SOURCE] P50 (..) P99 (..) RATE (..) FAILED
  # NOSETUP CPU (..)", microseconds over every frontend's lookups; ok is
  # the lookups answered of those made.
  awk '$1 == "idle" || $1 == "lookups" || $1 == "reports" { n = ($1 == "idle") ? 2 : 3
      p50 = $n / 1000; p99 = $(n + 2) / 1000; f = $(n + 6)
      if ($1 == "idle") printf "lookup %.2f %.2f\n", p50, p99 > "/dev/stderr"
      else printf "%s lookup %s %.2f %.2f\n", $1, (f == 0 ? "all" : f "-failed"), p50, p99 }' \
    "$work/lookups.$1" >>"$work/rows" 2>>"$work/idle"
  # listener-flood: "new MODE K/N P50 P99" (ms).
  awk '$1 == "new" { if ($2 == "idle") printf "peer %s %s\n", $4, $5 > "/dev/stderr"
      else printf "rank-%s peer %s %s %s\n", $2, $3, $4, $5 }' \
    "$work/rank.$1" >>"$work/rows" 2>>"$work/idle"
  # helper-uid: "ROUND MODE ok K/N p50 X ms p99 Y ms max Z ms", the same
  # client with no attack as MODE idle-ATTACK.
  awk '$3 == "ok" && $2 ~ /^idle-/ { printf "uid-%s %s %s\n", substr($2, 6), $6, $9 > "/dev/stderr" }
      $3 == "ok" && $2 !~ /^idle-/ { printf "uid-%s rank %s %s %s\n", $2, $4, $6, $9 }' \
    "$work/uid.$1" >>"$work/rows" 2>>"$work/idle"
}

for ((r = 1; r <= rounds; r++)); do
  for addrs in 1 400 1000; do
    part "stage-$addrs" "$root/bench/soap-stage.sh" "$trials" "$addrs" 1000
    # The same with the stage of 256 places it had before max-handshakes.
    part "stage256-$addrs" env QCG_STAGE_BROKER_ARGS="--max-handshakes 256" \
      "$root/bench/soap-stage.sh" "$trials" "$addrs" 1000
  done
  part proxy env QCG_LOAD_ONLY=proxy QCG_LOAD_MODES="idle one many" QCG_LOAD_PAIRS="$trials" \
    "$root/bench/service-load.sh" 1 5
  part lookups env QCG_LOAD_ONLY=broker QCG_LOAD_MODES="idle lookups reports" \
    "$root/bench/service-load.sh" 1 10
  # shellcheck disable=SC2016 # expanded by the inner sh
  part rank unshare -n sh -c 'ip link set lo up && exec "$0" 1 "$1"' \
    "$root/bench/listener-flood.sh" "$trials"
  part uid "$root/bench/helper-uid.sh" 1 "$trials"
  parse "$r"
done

median() { grep -v '^-$' | sort -g | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "-" }'; }
# The worst round: the fewest successes ("K/N") or the most failures
# ("F-failed"; "all": none failed).
fewest() {
  awk '/\// { split($1, a, "/"); if (!n || a[1] < lo) { lo = a[1]; w = $1 }; n++ }
    /-failed$/ { f = $1 + 0; if (f > hi) { hi = f; w = $1 } }
    $1 == "all" && w == "" { w = "all" }
    END { print (w == "" ? "-" : w) }'
}

echo
echo "issue 32's attacks: $trials trials per client, $rounds round(s); lookup: 10 frontends" \
  "x 2 connections x 50/s for 10 s"
printf '%-13s %-8s %9s %9s %9s %10s %10s %9s\n' attack client ok "p50 ms" "p99 ms" \
  "idle p50" "idle p99" p99/idle
awk '{ print $1, $2 }' "$work/rows" | awk '!seen[$0]++' | while read -r attack client; do
  key=$client
  case $attack in
  stage*) key=$attack-$client ;;
  proxy-*) key=proxy-pair ;;
  uid-*) key=$attack ;;
  esac
  sel() { awk -v a="$attack" -v c="$client" -v k="$2" '$1 == a && $2 == c { print $k }' "$1"; }
  ok=$(sel "$work/rows" 3 | fewest)
  p50=$(sel "$work/rows" 4 | median)
  p99=$(sel "$work/rows" 5 | median)
  ip50=$(awk -v k="$key" '$1 == k { print $2 }' "$work/idle" | median)
  ip99=$(awk -v k="$key" '$1 == k { print $3 }' "$work/idle" | median)
  printf '%-13s %-8s %9s %9s %9s %10s %10s %9s\n' "$attack" "$client" "$ok" "$p50" "$p99" \
    "$ip50" "$ip99" "$(awk -v a="$p99" -v b="$ip99" \
      'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f", a / b }')"
done

echo
echo "the attackers (slow-clients: connects, cut by the service, failed, held at the end;" \
  "floods: calls answered) and the broker under attack:"
for ((r = 1; r <= rounds; r++)); do
  for st in "${stages[@]}"; do
    echo "round $r $st $(grep -h '^attacker:' "$work/$st.$r");" \
      "broker$(grep -h 'under attack' "$work/$st.$r" | cut -d: -f2-)"
  done
  grep -h 'flood:' "$work/lookups.$r" | sed "s/^/round $r /" || true
done
