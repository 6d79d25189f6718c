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
# QCG_BENCH_COMPONENTS="NAME=FILE ...": more modes in the same rounds, each
# with FILE (another build's mca_coll_qcg.so) as coll_qcg: before and after
# a change in one run; the order of the modes rotates from round to round,
# and each gets its own table against the default.
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
# Each extra mode's build: the build's files, its own coll_qcg (what
# qcg-lab mpirun stages for the lab's user).
all_modes=(qcg default)
for spec in ${QCG_BENCH_COMPONENTS:-}; do
	name=${spec%%=*} file=${spec#*=}
	[[ $name =~ ^[a-z0-9-]+$ && $name != qcg && $name != default && -f $file ]] ||
		{ echo "coll.sh: QCG_BENCH_COMPONENTS: '$spec' is not NAME=FILE" >&2; exit 1; }
	mkdir -p "$work/build-$name/coll_qcg"
	for e in "$QCG_BUILD_DIR"/*; do
		[ "$(basename "$e")" = coll_qcg ] || ln -s "$e" "$work/build-$name/"
	done
	cp "$file" "$work/build-$name/coll_qcg/mca_coll_qcg.so"
	all_modes+=("$name")
done
"$lab" up --delay "$delay" >"$work/up.log" 2>&1 || { tail -n 20 "$work/up.log" >&2; exit 1; }
sites=open,fw,nata,natb,sym
echo "coll_qcg vs coll ^qcg: $sites, $ppn per node ($((10 * ppn)) ranks), --delay $delay, $rounds rounds, $iters calls x $blocks blocks, modes ${all_modes[*]}"
for ((r = 1; r <= rounds; r++)); do
	# The order rotates (two modes: ABBA): each mode goes first in turn.
	n=${#all_modes[@]} modes=()
	for ((i = 0; i < n; i++)); do modes+=("${all_modes[(i + r - 1) % n]}"); done
	for mode in "${modes[@]}"; do
		args="--mca coll_qcg_verbose 1" user_build=
		[ "$mode" != default ] || args="--mca coll ^qcg"
		[ "$mode" = qcg ] || [ "$mode" = default ] || user_build=$work/build-$mode
		QCG_LAB_USER_BUILD=$user_build QCG_MPIRUN_ARGS=$args timeout -k 10 900 "$lab" mpirun --sites "$sites" --ppn "$ppn" -- \
			"$prog" "$iters" "$blocks" >"$work/$mode-$r.out" 2>&1 ||
			{ tail -n 20 "$work/$mode-$r.out" >&2; echo "coll.sh: run $r ($mode) failed" >&2; exit 1; }
		if [ "$mode" != default ] && ! grep -q "spans 5 sites: hierarchical" "$work/$mode-$r.out"; then
			echo "coll.sh: coll_qcg did not take MPI_COMM_WORLD in run $r" >&2
			exit 1
		fi
		awk -v m="$mode" '$1 == "case" { print m, $2, $4 }' "$work/$mode-$r.out" >>"$work/all"
		# The application kernel: time per CG iteration, in us as the rest.
		QCG_LAB_USER_BUILD=$user_build QCG_MPIRUN_ARGS=$args timeout -k 10 900 "$lab" mpirun --sites "$sites" --ppn "$ppn" -- \
			"$cg" "$cg_iters" >"$work/cg-$mode-$r.out" 2>&1 ||
			{ tail -n 20 "$work/cg-$mode-$r.out" >&2; echo "coll.sh: cg run $r ($mode) failed" >&2; exit 1; }
		awk -v m="$mode" '$1 == "cg" { print m, "cg-iteration", $5 * 1000; print m, "cg-residual", $7 }' \
			"$work/cg-$mode-$r.out" >>"$work/all"
	done
	echo "round $r done ($(date +%T))"
done
med() { awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# The cases in coll-latency's order, then the kernel.
cases=$(awk '$1 == "qcg" { print $2 }' "$work/all" | awk '!seen[$0]++' | grep -v '^cg-')
for mode in "${all_modes[@]}"; do
	[ "$mode" != default ] || continue
	[ "$mode" = qcg ] || echo "$mode (QCG_BENCH_COMPONENTS) against the same runs of coll ^qcg:"
	printf '%-16s %14s %20s %14s %20s %8s\n' case "$mode us" "(min-max)" "default us" "(min-max)" ratio
	for c in $cases cg-iteration; do
		q=$(awk -v m="$mode" -v c="$c" '$1 == m && $2 == c { print $3 }' "$work/all" | sort -g)
		d=$(awk -v c="$c" '$1 == "default" && $2 == c { print $3 }' "$work/all" | sort -g)
		qm=$(echo "$q" | med) dm=$(echo "$d" | med)
		printf '%-16s %14.1f %20s %14.1f %20s %8.2f\n' "$c" "$qm" "($(echo "$q" | head -n1)-$(echo "$q" | tail -n1))" \
			"$dm" "($(echo "$d" | head -n1)-$(echo "$d" | tail -n1))" "$(echo "$qm $dm" | awk '{ print $1 / $2 }')"
	done
done
residuals() { awk -v m="$1" '$1 == m && $2 == "cg-residual" { print $3 }' "$work/all" | sort -u | paste -sd' ' -; }
echo "CG residual after $cg_iters iterations: $(for mode in "${all_modes[@]}"; do printf '%s %s; ' "$mode" "$(residuals "$mode")"; done)"
