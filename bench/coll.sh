#!/usr/bin/env bash
# coll_qcg against Open MPI's own collectives (coll ^qcg) in the lab with
# --delay MS (default 5: 20 ms round trip between nodes of two sites), all
# five sites, PPN ranks per node; runs alternate the two (each first in
# every other round), ROUNDS of each (default 3).  Each run is
# bench/coll-latency ITERS BLOCKS (per-call time of the slowest rank,
# median of BLOCKS blocks), then bench/cg-kernel
# (QCG_BENCH_CG_ITERS, default 50: time per CG iteration; the residuals
# reached are printed for both); the table gives, per case,
# the median over the rounds of those medians, the spread (min-max over the
# rounds) and the ratio qcg/default.
#   bench/coll.sh [ROUNDS] [PPN] [ITERS] [BLOCKS]
# Root; QCG_BUILD_DIR (default build/); QCG_BENCH_DELAY (default 5); brings
# the lab up with the delay and down again after.  Share the lab:
#   flock -o -w 3600 /tmp/qcg-lab.lock bench/coll.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$root/build}
rounds=${1:-3} ppn=${2:-2} iters=${3:-10} blocks=${4:-5} cg_iters=${QCG_BENCH_CG_ITERS:-50}
delay=${QCG_BENCH_DELAY:-5}
lab=$root/lab/qcg-lab
prog=$QCG_BUILD_DIR/bench/coll-latency
cg=$QCG_BUILD_DIR/bench/cg-kernel
[ -x "$prog" ] && [ -x "$cg" ] || { echo "coll.sh: $prog or $cg missing: build first" >&2; exit 1; }
[ -e "$QCG_BUILD_DIR/coll_qcg/mca_coll_qcg.so" ] || { echo "coll.sh: coll_qcg not built" >&2; exit 1; }
work=$(mktemp -d)
cleanup() {
	"$lab" down >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
"$lab" up --delay "$delay" >"$work/up.log" 2>&1 || { tail -n 20 "$work/up.log" >&2; exit 1; }
sites=open,fw,nata,natb,sym
echo "coll_qcg vs coll ^qcg: $sites, $ppn per node ($((10 * ppn)) ranks), --delay $delay, $rounds rounds, $iters calls x $blocks blocks"
for ((r = 1; r <= rounds; r++)); do
	# ABBA: each mode goes first in every other round (no order bias).
	modes="qcg default"
	((r % 2 == 1)) || modes="default qcg"
	for mode in $modes; do
		args="--mca coll_qcg_verbose 1"
		[ "$mode" = qcg ] || args="--mca coll ^qcg"
		QCG_MPIRUN_ARGS=$args timeout -k 10 900 "$lab" mpirun --sites "$sites" --ppn "$ppn" -- \
			"$prog" "$iters" "$blocks" >"$work/$mode-$r.out" 2>&1 ||
			{ tail -n 20 "$work/$mode-$r.out" >&2; echo "coll.sh: run $r ($mode) failed" >&2; exit 1; }
		if [ "$mode" = qcg ] && ! grep -q "spans 5 sites: hierarchical" "$work/$mode-$r.out"; then
			echo "coll.sh: coll_qcg did not take MPI_COMM_WORLD in run $r" >&2
			exit 1
		fi
		awk -v m="$mode" '$1 == "case" { print m, $2, $4 }' "$work/$mode-$r.out" >>"$work/all"
		# The application kernel: time per CG iteration, in us as the rest.
		QCG_MPIRUN_ARGS=$args timeout -k 10 900 "$lab" mpirun --sites "$sites" --ppn "$ppn" -- \
			"$cg" "$cg_iters" >"$work/cg-$mode-$r.out" 2>&1 ||
			{ tail -n 20 "$work/cg-$mode-$r.out" >&2; echo "coll.sh: cg run $r ($mode) failed" >&2; exit 1; }
		awk -v m="$mode" '$1 == "cg" { print m, "cg-iteration", $5 * 1000; print m, "cg-residual", $7 }' \
			"$work/cg-$mode-$r.out" >>"$work/all"
	done
	echo "round $r done ($(date +%T))"
done
printf '%-16s %14s %20s %14s %20s %8s\n' case "qcg us" "(min-max)" "default us" "(min-max)" ratio
# The cases in coll-latency's order, then the kernel.
cases=$(awk '$1 == "qcg" { print $2 }' "$work/all" | awk '!seen[$0]++' | grep -v '^cg-')
for c in $cases cg-iteration; do
	q=$(awk -v c="$c" '$1 == "qcg" && $2 == c { print $3 }' "$work/all" | sort -g)
	d=$(awk -v c="$c" '$1 == "default" && $2 == c { print $3 }' "$work/all" | sort -g)
	med() { awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
	qm=$(echo "$q" | med) dm=$(echo "$d" | med)
	printf '%-16s %14.1f %20s %14.1f %20s %8.2f\n' "$c" "$qm" "($(echo "$q" | head -n1)-$(echo "$q" | tail -n1))" \
		"$dm" "($(echo "$d" | head -n1)-$(echo "$d" | tail -n1))" "$(echo "$qm $dm" | awk '{ print $1 / $2 }')"
done
echo "CG residual after $cg_iters iterations: qcg $(awk '$1 == "qcg" && $2 == "cg-residual" { print $3 }' "$work/all" | sort -u | paste -sd' ' -), default $(awk '$1 == "default" && $2 == "cg-residual" { print $3 }' "$work/all" | sort -u | paste -sd' ' -)"
