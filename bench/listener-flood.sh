#!/usr/bin/env bash
# A rank's own port flooded (issue 32, finding 1): a peer of the job connects
# to a rank (bench/listener-flood: libqcgconn against the tests' fake helper)
# COUNT times in a row while bench/slow-clients holds idle connections to the
# same port, renewed 200 ms after the rank cuts one:
#
#   idle   no attack
#   one    1,100 idle connections from one address (127.3.0.1)
#   many   1,200 idle connections from 24 addresses (127.4.0.1/24)
#
# Each round runs every attack with the library under test and, when
# QCG_FLOOD_OLD_LIB names a directory holding another libqcgconn.so.0 (an
# older build's build/libqcgconn), with that one too, alternating; medians
# of ROUNDS.  Loopback only; no lab, no root.
#
#   bench/listener-flood.sh [ROUNDS] [COUNT]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${QCG_BUILD_DIR:-$root/build}
rounds=${1:-3}
count=${2:-20}
old_lib=${QCG_FLOOD_OLD_LIB:-}
flood=$build/bench/listener-flood
attack=$build/bench/slow-clients
for b in "$flood" "$attack"; do
	[[ -x $b ]] || { echo "listener-flood.sh: $b not built" >&2; exit 1; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/qcg-listener-flood.XXXXXX")
cleanup() {
	jobs -p | xargs -r kill 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)"

declare -A sources=([one]=127.3.0.1 [many]=127.4.0.1/24)
declare -A conns=([one]=1100 [many]=1200)

# run LIBDIR MODE: one measurement; appends "ok K of N p50_us X p99_us Y" to
# $work/LIB-MODE.
run() {
	local libdir=$1 mode=$2 file=$3 port apid=
	local out=$work/out err=$work/attack.err
	rm -f "$out" "$err" "$work/in" "$work/ain"
	mkfifo "$work/in" "$work/ain"
	LD_LIBRARY_PATH=$libdir "$flood" --count "$count" <"$work/in" >"$out" &
	local fpid=$!
	exec 7>"$work/in"
	for _ in $(seq 100); do grep -q '^port ' "$out" 2>/dev/null && break; sleep 0.05; done
	port=$(sed -n 's/^port //p' "$out")
	[[ -n $port ]] || { echo "listener-flood did not start" >&2; exit 1; }
	if [[ $mode != idle ]]; then
		"$attack" --connect "127.0.0.1:$port" --idle "${conns[$mode]}" \
			--sources "${sources[$mode]}" --renew-ms 200 <"$work/ain" >/dev/null 2>"$err" &
		apid=$!
		exec 8>"$work/ain"
		# Every connection made once, or 5 s (an old rank leaves some in the
		# listen queue, where they stay).
		for _ in $(seq 100); do grep -q ready "$err" 2>/dev/null && break; sleep 0.05; done
		sleep 0.5
	fi
	echo go >&7
	exec 7>&-
	for _ in $(seq 1200); do grep -q '^ok ' "$out" && break; sleep 0.1; done
	grep '^ok ' "$out" >>"$file" || echo "ok 0 of $count p50_us 0 p99_us 0" >>"$file"
	if [[ -n $apid ]]; then
		exec 8>&-
		wait "$apid" || true
	fi
	wait "$fpid" || true
}

libs=(new)
[[ -n $old_lib ]] && libs=(old new)
for ((r = 1; r <= rounds; r++)); do
	for mode in idle one many; do
		for lib in "${libs[@]}"; do
			dir=$build/libqcgconn
			[[ $lib == old ]] && dir=$old_lib
			run "$dir" "$mode" "$work/$lib-$mode"
		done
	done
done

median() { sort -n | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : 0)}'; }
printf '%-5s %-6s %14s %12s %12s\n' lib attack "ok (min)" "p50 ms" "p99 ms"
for lib in "${libs[@]}"; do
	for mode in idle one many; do
		lines=$(cat "$work/$lib-$mode")
		okmin=$(awk 'NF {print $2}' <<<"$lines" | sort -n | head -1)
		p50=$(awk 'NF {print $6}' <<<"$lines" | median)
		p99=$(awk 'NF {print $8}' <<<"$lines" | median)
		printf '%-5s %-6s %10s/%-3s %12.2f %12.2f\n' "$lib" "$mode" "$okmin" "$count" \
			"$(bc -l <<<"$p50 / 1000")" "$(bc -l <<<"$p99 / 1000")"
	done
done
