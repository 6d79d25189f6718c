#!/usr/bin/env bash
# The scale simulator (issue 29; bench/README.md "scale-sim.sh"): N ranks of one
# job spread over the ten compute nodes of the five sites, one event-driven
# bench/scale-sim process per node holding its ranks as libqcgconn contexts,
# connecting the pairs of a pattern (storm: every pair; stencil: 3-D, 6
# neighbours; ring; tree: binomial); every connection's 16 bytes checked by
# both ends.  Then the baseline: the same ranks and pattern on the two nodes
# of one site (open1, open2) over plain TCP connects followed by the same TLS
# 1.3 handshake (scale-sim --mode tcp), the machine's own limit.
#
# For each run: grid-wide setups/s, each service's CPU per setup (broker with
# its reflector, the frontends, the helpers with their privileged children,
# the proxy: /proc/PID/stat before the start and after the last connection),
# setup latency p50/p99 (cross-site in round trips of 4 x DELAY, same-site in
# ms), the most descriptors each service held (sampled every 0.5 s) and its
# RSS (VmRSS after, VmHWM), and failures with their reasons.
#
#   bench/scale-sim.sh [--delay MS] [--ranks "100 400"] [--patterns "storm stencil ring tree"]
#                      [--rounds R] [--no-baseline] [--window W] [--timeout MS]
#                      [--run-s S] [--use-lab] [--out DIR]
#
# Brings the lab up with --delay (default 5) and down at the end, unless
# --use-lab (a lab that runs: the lab test).  Needs root, a build
# (QCG_BUILD_DIR, default build/) and the lab lock:
#   flock -o -w 3600 /tmp/qcg-lab.lock env QCG_BUILD_DIR=build bench/scale-sim.sh ...
# Prints the table of medians (spread) over the rounds; --out DIR keeps every
# run's raw results (DIR/<mode>-<ranks>-<pattern>-<round>/) and the table's
# rows (DIR/rows) there.  Exit status: 0 when every connection was made and
# checked at both ends, 1 otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$root/build}
lab=$root/lab/qcg-lab
sim=$QCG_BUILD_DIR/bench/scale-sim
state=${QCG_LAB_DIR:-/run/qcg-lab}

delay=5 ranks_list="100 400" patterns="storm stencil ring tree" rounds=1 baseline=yes
window=32 timeout_ms=30000 run_s=600 use_lab=no out=""
while [ $# -gt 0 ]; do
	case $1 in
	--delay) delay=$2; shift ;;
	--ranks) ranks_list=$2; shift ;;
	--patterns) patterns=$2; shift ;;
	--rounds) rounds=$2; shift ;;
	--no-baseline) baseline=no ;;
	--window) window=$2; shift ;;
	--timeout) timeout_ms=$2; shift ;;
	--run-s) run_s=$2; shift ;;
	--use-lab) use_lab=yes ;;
	--out) out=$2; shift ;;
	*) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
	esac
	shift
done
[ -x "$sim" ] || { echo "scale-sim.sh: $sim missing: build first (scripts/build)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "scale-sim.sh: needs root (the lab)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/scale-sim.XXXXXX")
chmod 755 "$work"
rows=$work/rows
[ -n "$out" ] && mkdir -p "$out"
sims=()
# stop_sims: ends the simulators still running (bounded).
stop_sims() {
	local p
	for p in "${sims[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${sims[@]}"; do wait "$p" 2>/dev/null || true; done
	sims=()
}
cleanup() {
	stop_sims
	[ "$use_lab" = yes ] || "$lab" down >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT  # the EXIT trap runs (the lab comes down) when killed

if [ "$use_lab" = no ]; then
	"$lab" down >/dev/null 2>&1 || true
	"$lab" up --delay "$delay" >/dev/null
fi
secret=$(cat "$state/job-secret")
GRID_NODES=(open1 open2 fw1 fw2 nata1 nata2 natb1 natb2 sym1 sym2)
declare -A NODE_ADDR=([open1]=198.51.100.11 [open2]=198.51.100.12)

# cpu PID: utime + stime of PID and its live children, in clock ticks.
cpu() {
	local t=0 p c
	for p in "$1" $(cat /proc/"$1"/task/*/children 2>/dev/null); do
		c=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{ print $12 + $13 }') || c=0
		t=$((t + ${c:-0}))
	done
	echo "$t"
}
# The services, "CLASS PID" each: broker, frontend, helper, proxy.
services() {
	local f name
	for f in "$state"/run/*.pid; do
		name=$(basename "$f" .pid)
		case $name in
		broker | proxy | proxy2) echo "${name%2} $(cat "$f")" ;;
		frontend-* | helper-*) echo "${name%%-*} $(cat "$f")" ;;
		esac
	done
}
# fds_sample: "CLASS FDS" per service, appended to $1 every 0.5 s until killed.
fds_sample() {
	local cls pid
	while :; do
		services | while read -r cls pid; do
			echo "$cls $(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)"
		done >>"$1"
		sleep 0.5
	done
}

# run MODE N PATTERN ROUND: one simulation; prints its row (see below).
run() {
	local mode=$1 n=$2 pattern=$3 round=$4 dir nodes per k first count pids=() i t0 p sampler
	local job="sim-$$-$mode-$n-$pattern-$round" tick
	dir=$work/$mode-$n-$pattern-$round
	mkdir -p "$dir"
	chmod 777 "$dir"
	if [ "$mode" = qcg ]; then nodes=("${GRID_NODES[@]}"); else nodes=(open1 open2); fi
	k=${#nodes[@]}
	per=$(((n + k - 1) / k))
	# per node: ranks [i*per, min(n, (i+1)*per)); a site is 2 nodes (baseline: one site)
	local per_site=$((2 * per))
	[ "$mode" = tcp ] && per_site=$n
	for ((i = 0; i < k; i++)); do
		first=$((i * per))
		count=$((n - first < per ? n - first : per))
		[ "$count" -gt 0 ] || continue
		QCG_JOB_SECRET=$secret "$lab" exec "${nodes[$i]}" -- "$sim" --job "$job" --ranks "$n" \
			--first "$first" --count "$count" --pattern "$pattern" \
			--window "$window" --timeout "$timeout_ms" --run-ms $((run_s * 1000)) \
			--dir "$dir" --mode "$mode" ${NODE_ADDR[${nodes[$i]}]:+--addr ${NODE_ADDR[${nodes[$i]}]}} \
			>"$dir/stdout-$i" 2>"$dir/stderr-$i" &
		pids+=($!)
	done
	sims=("${pids[@]}")
	# Every process ready (its ranks published): 0.5 s per rank of a node at most, + 30 s.
	t0=$SECONDS
	while [ "$(find "$dir" -name 'ready-*' | wc -l)" -lt "${#pids[@]}" ]; do
		if [ $((SECONDS - t0)) -gt $((per / 2 + 30)) ]; then
			echo "scale-sim.sh: $mode $n $pattern: not every process published its ranks within $((SECONDS - t0)) s:" >&2
			cat "$dir"/stderr-* >&2
			stop_sims
			return 1
		fi
		for p in "${pids[@]}"; do
			kill -0 "$p" 2>/dev/null || { echo "scale-sim.sh: a simulator ended before it was ready:" >&2; cat "$dir"/stderr-* >&2; stop_sims; return 1; }
		done
		sleep 0.1
	done
	services >"$dir/services"
	while read -r cls p; do echo "$cls $p $(cpu "$p")"; done <"$dir/services" >"$dir/cpu-before"
	fds_sample "$dir/fds" &
	sampler=$!
	touch "$dir/go"
	t0=$SECONDS
	# Until every pair is checked; or, once every process's connects ended,
	# 5 s more for what the acceptors still expect (an initiator that failed
	# never comes); at most --run-s.
	local out_done_at=""
	while [ "$(find "$dir" -name 'done-*' | wc -l)" -lt "${#pids[@]}" ] && [ $((SECONDS - t0)) -le "$run_s" ]; do
		sleep 0.1
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || break 2; done
		if [ -z "$out_done_at" ]; then
			[ "$(find "$dir" -name 'out-done-*' | wc -l)" -lt "${#pids[@]}" ] || out_done_at=$SECONDS
		elif [ $((SECONDS - out_done_at)) -ge 5 ]; then
			break
		fi
	done
	while read -r cls p; do echo "$cls $p $(cpu "$p")"; done <"$dir/services" >"$dir/cpu-after"
	while read -r cls p; do
		echo "$cls $p $(awk '/^VmRSS/ { r = $2 } /^VmHWM/ { h = $2 } END { print r + 0, h + 0 }' "/proc/$p/status" 2>/dev/null)"
	done <"$dir/services" >"$dir/rss"
	kill "$sampler" 2>/dev/null || true
	wait "$sampler" 2>/dev/null || true
	touch "$dir/stop"
	for p in "${pids[@]}"; do
		for ((i = 0; i < 100; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	sims=()
	tick=$(getconf CLK_TCK)
	summarise "$dir" "$mode" "$n" "$pattern" "$tick" "$per_site" >"$dir/row"
	grep -v '^#' "$dir/row" >>"$rows"
	grep '^#' "$dir/row" >&2 || true
	[ -n "$out" ] && cp -r "$dir" "$out/"
	return 0
}

# pct FILE P: the P-th percentile of FILE's sorted numbers ("-" if none).
pct() { awk -v p="$2" '{ v[NR] = $1 } END { if (!NR) { print "-"; exit } i = int(NR * p / 100 + 0.999); if (i < 1) i = 1; print v[i] }' "$1"; }

# summarise DIR MODE N PATTERN TICK PER_SITE: one row of name=value fields,
# then "# ..." lines: the failures grouped by reason.
summarise() {
	local dir=$1 mode=$2 n=$3 pattern=$4 tick=$5 per_site=$6 rtt_us=$((4 * delay * 1000))
	cat "$dir"/result-* >"$dir/results" 2>/dev/null || true
	# setup times (us) of cross-site and same-site connections, sorted
	awk -v ps="$per_site" '$1 == "ok" && int($2 / ps) != int($3 / ps) { print $5 }' "$dir/results" | sort -n >"$dir/lat-cross"
	awk -v ps="$per_site" '$1 == "ok" && int($2 / ps) == int($3 / ps) { print $5 }' "$dir/results" | sort -n >"$dir/lat-same"
	printf 'mode=%s ranks=%d pattern=%s ' "$mode" "$n" "$pattern"
	awk '$1 == "summary" { ok += $4; fout += $5; inok += $6; inexp += $7
			if (go == "" || $8 < go) go = $8; if ($9 > last) last = $9 }
		$1 == "ok" { tech[$4]++ }
		$1 == "fail" && $2 == "in" { fin++ }
		$1 == "missing" { nm++ }
		$1 == "unended" { nu++ }
		$1 == "refused" { nr += $3 }
		END { secs = (last - go) / 1000; if (secs <= 0) secs = 0.001
			printf "expected_in=%d ok=%d failed=%d failed_in=%d checked_in=%d missing=%d unended=%d refused=%d seconds=%.2f setups_per_s=%.1f", \
				inexp, ok, fout, fin, inok, nm, nu, nr, secs, ok / secs
			t = ""; for (k in tech) t = t (t == "" ? "" : ",") k ":" tech[k]; printf " techniques=%s", (t == "" ? "-" : t) }' "$dir/results"
	# the longest turn of any simulator's loop (its ranks wait that long for their events)
	awk '$1 == "turn" && $3 > m { m = $3 } END { printf " turn_max_ms=%d", m }' "$dir/results"
	awk -v r="$rtt_us" -v c50="$(pct "$dir/lat-cross" 50)" -v c99="$(pct "$dir/lat-cross" 99)" \
		-v s50="$(pct "$dir/lat-same" 50)" -v s99="$(pct "$dir/lat-same" 99)" \
		-v nc="$(wc -l <"$dir/lat-cross")" -v ns="$(wc -l <"$dir/lat-same")" '
		function f(v, d) { return v == "-" ? "-" : sprintf("%.2f", v / d) }
		BEGIN { printf " cross=%d p50_rtt=%s p99_rtt=%s same=%d same_p50_ms=%s same_p99_ms=%s", nc, f(c50, r), f(c99, r), ns, f(s50, 1000), f(s99, 1000) }'
	awk -v tick="$tick" -v ok="$(awk '$1 == "summary" { s += $4 } END { print s + 0 }' "$dir/results")" \
		-v sim_cpu="$(awk '$1 == "summary" { s += $10 } END { print s / 1e6 }' "$dir/results")" '
		FNR == 1 { file++ }
		file == 1 { b[$1] += $3 }
		file == 2 { a[$1] += $3 }
		file == 3 { if ($2 > fd[$1]) fd[$1] = $2 }
		file == 4 { if ($3 > rss[$1]) rss[$1] = $3; if ($4 > hwm[$1]) hwm[$1] = $4 }
		END {
			b["sim"] = 0; a["sim"] = sim_cpu * tick
			split("broker frontend helper proxy sim", cls, " ")
			for (i = 1; i <= 5; i++) { c = cls[i]; cs = (a[c] - b[c]) / tick
				printf " %s_cpu_s=%.2f %s_us_per_setup=%.0f", c, cs, c, (ok ? cs * 1e6 / ok : 0) }
			for (i = 1; i <= 4; i++) { c = cls[i]; printf " %s_fds=%d %s_rss_kib=%d %s_hwm_kib=%d", c, fd[c], c, rss[c], c, hwm[c] }
			printf "\n"
		}' "$dir/cpu-before" "$dir/cpu-after" "$dir/fds" "$dir/rss"
	# Failures, grouped by reason with ranks, ports, times and addresses blanked.
	grep -h '^fail\|^refused\|^missing' "$dir/results" 2>/dev/null |
		sed -E 's/^(fail (out|in)) [0-9-]+ [0-9-]+ /\1 /; s/^refused [0-9]+ [0-9]+ /refused /; s/^missing (out|in) [0-9-]+ [0-9-]+ /missing \1 /' |
		sed -E 's/rank [0-9]+/rank N/g; s/port [0-9]+/port P/g; s/[0-9]+ ms/T ms/g; s/request [0-9]+/request N/g; s/[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+/ADDR/g' |
		sort | uniq -c | sort -rn | head -8 | sed "s|^ *|# $mode $n $pattern failure: |" || true
}

# In this order per round, so both modes share the machine's state of the moment.
: >"$rows"
for ((r = 1; r <= rounds; r++)); do
	# A fresh lab each round: the proxy remembers tokens (pairs) per source
	# address for their lifetime + skew (6 min), the broker failed techniques
	# per cluster pair (10 min); a round must not inherit them.
	if [ "$use_lab" = no ] && [ "$r" -gt 1 ]; then
		"$lab" down >/dev/null
		"$lab" up --delay "$delay" >/dev/null
	fi
	for n in $ranks_list; do
		for pattern in $patterns; do
			echo "round $r/$rounds: $n ranks, $pattern" >&2
			run qcg "$n" "$pattern" "$r" || echo "mode=qcg ranks=$n pattern=$pattern expected_in=0 ok=0 failed=-1 setup_failed=1" >>"$rows"
			if [ "$baseline" = yes ]; then
				run tcp "$n" "$pattern" "$r" || echo "mode=tcp ranks=$n pattern=$pattern expected_in=0 ok=0 failed=-1 setup_failed=1" >>"$rows"
			fi
		done
	done
done
[ -n "$out" ] && cp "$rows" "$out/rows"

# The table: medians (min-max) over the rounds.
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
spread() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (NR > 1) printf "(%s-%s)", lo, hi }'; }
stat() { local v; v=$(grep "^mode=$1 ranks=$2 pattern=$3 " "$rows" | field "$4"); echo "$(echo "$v" | median)$(echo "$v" | spread)"; }
echo
echo "scale-sim: lab --delay $delay (cross-site RTT $((4 * delay)) ms), window $window per rank, medians of $rounds round(s) (min-max)"
printf '%-4s %5s %-8s %7s %7s %6s %16s %14s %14s %11s %11s %11s %11s\n' mode ranks pattern pairs ok failed \
	"setups/s" "p50 setup" "p99 setup" "broker us" "front. us" "helper us" "proxy us"
for n in $ranks_list; do
	for pattern in $patterns; do
		for mode in qcg tcp; do
			grep -q "^mode=$mode ranks=$n pattern=$pattern " "$rows" || continue
			if [ "$mode" = qcg ]; then p50=p50_rtt p99=p99_rtt; else p50=same_p50_ms p99=same_p99_ms; fi
			printf '%-4s %5s %-8s %7s %7s %6s %16s %14s %14s %11s %11s %11s %11s\n' "$mode" "$n" "$pattern" \
				"$(stat "$mode" "$n" "$pattern" expected_in)" "$(stat "$mode" "$n" "$pattern" ok)" \
				"$(stat "$mode" "$n" "$pattern" failed)" "$(stat "$mode" "$n" "$pattern" setups_per_s)" \
				"$(stat "$mode" "$n" "$pattern" "$p50")" "$(stat "$mode" "$n" "$pattern" "$p99")" \
				"$(stat "$mode" "$n" "$pattern" broker_us_per_setup)" "$(stat "$mode" "$n" "$pattern" frontend_us_per_setup)" \
				"$(stat "$mode" "$n" "$pattern" helper_us_per_setup)" "$(stat "$mode" "$n" "$pattern" proxy_us_per_setup)"
		done
	done
done
echo "(qcg: setup p50/p99 of cross-site connections in round trips of $((4 * delay)) ms; tcp: the baseline on"
echo " open1+open2, in ms; us: a service's CPU per connection made, all instances summed)"
for n in $ranks_list; do
	for pattern in $patterns; do
		grep -q "^mode=qcg ranks=$n pattern=$pattern " "$rows" || continue
		echo "longest turn of a simulator's loop, qcg $n $pattern: $(stat qcg "$n" "$pattern" turn_max_ms) ms (its ranks wait that long for their events)"
	done
done
echo
echo "services at the end of each qcg run, medians: most descriptors of one instance (sampled every 0.5 s), largest VmRSS / VmHWM KiB"
printf '%5s %-8s %16s %16s %16s %16s\n' ranks pattern broker frontend helper proxy
for n in $ranks_list; do
	for pattern in $patterns; do
		grep -q "^mode=qcg ranks=$n pattern=$pattern " "$rows" || continue
		printf '%5s %-8s' "$n" "$pattern"
		for c in broker frontend helper proxy; do
			printf ' %16s' "$(stat qcg "$n" "$pattern" "${c}_fds" | sed 's/(.*//')/$(stat qcg "$n" "$pattern" "${c}_rss_kib" | sed 's/(.*//')/$(stat qcg "$n" "$pattern" "${c}_hwm_kib" | sed 's/(.*//')"
		done
		echo
	done
done
echo "(all fields of every run: ${out:-use --out DIR}/rows)"
bad=$(awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
	if (f["failed"] > 0 || f["missing"] > 0 || f["ok"] != f["expected_in"] || f["checked_in"] != f["expected_in"]) n++ }
	END { print n + 0 }' "$rows")
[ "$bad" = 0 ]
