#!/usr/bin/env bash
# lab-repeated-jobs: consecutive MPI jobs as bench/mpi-netpipe.sh runs them
# (NetPIPE qcg and tcp between open1 and open2, then MPI_Init+MPI_Finalize
# with and without an all-to-all that connects every pair, on one site and
# on the five sites), ROUNDS times (QCG_LAB_JOBS_ROUNDS, default 1).  Every
# job must end well, every rank print its line, and no rank take more than
# QCG_LAB_JOBS_MAX_S (default 20) seconds to connect: the control plane must
# not stall under the load of one job after another (issue 15: a lookup
# went unanswered for 30 s in the five-site --connect step).
# QCG_LAB_JOBS_LAUNCH=netns launches the jobs with the old launcher
# (`qcg-lab mpirun --netns-launch`: orteds started by ip netns exec, all
# ranks at once), as when the stall was first seen.
#   tests/lab/repeat.sh 5 test-repeated-jobs.sh     (the loop that found it)
. "$(dirname "$0")/test-lib.sh"

require_lab
require_services
command -v mpirun >/dev/null 2>&1 || skip "mpirun is not installed"
progs=$QCG_BUILD_DIR/tests/mpi
[ -x "$progs/qcg-mpi-initfini" ] || skip "the MPI test programs are not built in $progs"
rounds=${QCG_LAB_JOBS_ROUNDS:-1}
max_s=${QCG_LAB_JOBS_MAX_S:-20}
netpipe=1
command -v NPopenmpi >/dev/null 2>&1 || { netpipe=0; note "NPopenmpi missing: no NetPIPE jobs"; }
launch=()
[ "${QCG_LAB_JOBS_LAUNCH:-}" = netns ] && launch=(--netns-launch)
scratch
out=$WORK/out
# NPopenmpi's output file is written by rank 0, as the lab's user (nobody).
npdir=$WORK/np
mkdir -m 0777 "$npdir"
chmod 0711 "$WORK"

# job NAME RANKS MPIRUN-ARGS...: one job, all its ranks' lines, in bounds.
job() {
	local name=$1 ranks=$2 rc=0 t0 lines slow
	shift 2
	t0=$(date +%s.%N)
	timeout -k 10 120 "$LAB" mpirun "${launch[@]}" "$@" >"$out" 2>&1 || rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "FAIL: round $r, $name: exit $rc after $(awk -v t="$t0" -v n="$(date +%s.%N)" 'BEGIN { printf "%.1f", n - t }') s:" >&2
		tail -n 40 "$out" | sed 's/^/     | /' >&2
		exit 1
	fi
	[ "$ranks" -gt 0 ] || { note "round $r: $name ok"; return 0; }
	lines=$(grep -c '^INITFINI' "$out" || true)
	[ "$lines" -eq "$ranks" ] || { tail -n 40 "$out" | sed 's/^/     | /' >&2; fail "round $r, $name: $lines of $ranks ranks reported"; }
	slow=$(awk -v m="$max_s" '/^INITFINI/ && $7 > m { print "rank " $3 ": " $7 " s" }' "$out")
	[ -z "$slow" ] || { cat "$out" | sed 's/^/     | /' >&2; fail "round $r, $name: connecting took over $max_s s: $slow"; }
	note "round $r: $name ok ($(awk '/^INITFINI/ { t = $5 + $7 + $9; if (t > m) m = t } END { printf "slowest rank %.2f s", m }' "$out"))"
}

initfini=$progs/qcg-mpi-initfini
for ((r = 1; r <= rounds; r++)); do
	if [ "$netpipe" = 1 ]; then
		job "NetPIPE qcg open1-open2" 0 --sites open -- NPopenmpi -p 0 -u 8388608 -o "$npdir/out"
		job "NetPIPE tcp open1-open2" 0 --sites open --tcp -- NPopenmpi -p 0 -u 8388608 -o "$npdir/out"
	fi
	job "initfini qcg open" 10 --sites open --ppn 5 -- "$initfini"
	job "initfini tcp open" 10 --sites open --ppn 5 --tcp -- "$initfini"
	job "initfini qcg five sites" 10 -- "$initfini"
	job "initfini --connect qcg open" 10 --sites open --ppn 5 -- "$initfini" --connect
	job "initfini --connect tcp open" 10 --sites open --ppn 5 --tcp -- "$initfini" --connect
	job "initfini --connect qcg five sites" 10 -- "$initfini" --connect
done
note "$rounds rounds of $((netpipe * 2 + 6)) consecutive jobs, every rank connected within $max_s s"
