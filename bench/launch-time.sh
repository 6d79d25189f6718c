#!/usr/bin/env bash
# Launch time of an MPI job over the five lab sites, through the agents (the
# real grid's path: qcg-agent per node, qcg-mpirun on nata1 behind a NAT, the
# runtime's connections through qcg-connect) against the netns launcher
# (mpirun on the broker's public host, orteds by ip netns exec, reaching
# mpirun directly), in the same run, alternating.  10 ranks, one per node.
#   (a) qcg-mpi-initfini: MPI_Init + MPI_Finalize, mpirun's wall time
#   (b) qcg-mpi-initfini --connect: the same with a 1-byte MPI_Alltoall (every
#       btl_qcg connection of the job), mpirun's wall time and the slowest
#       rank's connect_s
# Times are from qcg-lab's "mpirun: exit N after X ms" line: mpirun alone,
# not the agents' start (a user starts them before, a batch system with the
# allocation).  Medians of RUNS (default 5) and their spread (min-max).
# Both launchers run the daemons and ranks at nice 10 (qcg-lab); each run is
# bounded (300 s) and starts once the last has left the lab (at most 30 s).
#   bench/launch-time.sh [--trixie] [DELAY_MS] [RUNS]
#                         (root; QCG_BUILD_DIR, default build/)
#   --trixie   a third launcher in the same rotation: the agents with the
#              Debian 13 root's programs (lab/debian13.sh: Open MPI 5's
#              mpirun and prted, the ranks, qcg-agent and qcg-mpirun built
#              there); the netns launcher is Open MPI 4.1's only (orted)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$root/build}
hows=(agents netns)
[ "${1:-}" != --trixie ] || { hows+=(agents5); shift; }
delay=${1:-5}
runs=${2:-5}
lab=$root/lab/qcg-lab
prog=$QCG_BUILD_DIR/tests/mpi/qcg-mpi-initfini
work=$(mktemp -d)
lab_was_up=0
ip netns list | grep -qw qcg-inet && lab_was_up=1

cleanup() {
  [ "$lab_was_up" = 1 ] || "$lab" down >/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

[ -x "$prog" ] || { echo "launch-time.sh: $prog missing: build first (scripts/build)" >&2; exit 1; }
if [ ${#hows[@]} -eq 3 ]; then
  # shellcheck source=../lab/debian13.sh
  . "$root/lab/debian13.sh"
  trixie_root
  trixie_build "$QCG_BUILD_DIR/trixie-build" qcg-agent qcg-launch mca_btl_qcg qcgcolour qcg-mpi-initfini
fi
"$lab" up --delay "$delay" >/dev/null

# job_left: a daemon or rank of a run still in one of the lab's namespaces.
job_left() {
  local ns pid
  for ns in $(ip netns list | awk '/^qcg-/ { print $1 }'); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      case $(cat "/proc/$pid/comm" 2>/dev/null) in orted | prted | qcg-mpi-initfi*) return 0 ;; esac
    done
  done
  return 1
}

# one LAUNCHER ARGS...: appends "wall_ms connect_ms" to $work/LAUNCHER.  Each
# run starts on a lab that the last one has left (at most 30 s), and is
# bounded (300 s): a run that fails or hangs ends the benchmark, naming it.
one() {
  local how=$1 wall conn p=$prog i
  shift
  local opt=() env=()
  [ "$how" = netns ] && opt=(--netns-launch)
  [ "$how" = agents5 ] && env=(QCG_LAB_ROOT="$TRIXIE_ROOT" QCG_LAB_USER_BUILD="$QCG_BUILD_DIR/trixie-build") &&
    p=$QCG_BUILD_DIR/trixie-build/tests/mpi/qcg-mpi-initfini
  for ((i = 0; i < 300; i++)); do job_left || break; sleep 0.1; done
  ! job_left || { echo "launch-time.sh: the run before $how $* left processes for 30 s" >&2; exit 1; }
  env ${env[@]+"${env[@]}"} timeout -k 10 300 "$lab" mpirun ${opt[@]+"${opt[@]}"} -- "$p" "$@" >"$work/out" 2>&1 ||
    { cat "$work/out" >&2; echo "launch-time.sh: the $how run $* failed" >&2; exit 1; }
  wall=$(sed -n 's/.*mpirun: exit 0 after \([0-9]*\) ms/\1/p' "$work/out")
  conn=$(awk '/^INITFINI/ { if ($7 > m) m = $7 } END { printf "%.1f", m * 1000 }' "$work/out")
  echo "$wall $conn" >>"$work/$how$*"
}

for ((r = 0; r < runs; r++)); do
  for how in "${hows[@]}"; do
    one "$how"
    one "$how" --connect
  done
done

# stats FILE COLUMN: median and min-max.
stats() {
  awk -v c="$2" '{ print $c }' "$1" | sort -n | awk '{ v[NR] = $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%7.0f (%s-%s)", m, v[1], v[NR] }'
}
median() { awk -v c="$2" '{ print $c }' "$1" | sort -n | awk '{ v[NR] = $1 } END {
  print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "launch of 10 ranks over 5 sites, lab delay ${delay} ms one-way per WAN link, medians of $runs (min-max), ms; ratio: to netns"
declare -A head=([agents]="agents (mpirun on nata1)" [netns]="netns (mpirun on broker)" [agents5]="agents, Open MPI 5")
printf '%-44s' ""
for how in "${hows[@]}"; do printf ' %-22s' "${head[$how]}"; done
for how in "${hows[@]}"; do [ "$how" = netns ] || printf ' %-8s' "$how"; done
echo
# row LABEL SUFFIX COLUMN: one line of the table.
row() {
  local how n
  printf '%-44s' "$1"
  for how in "${hows[@]}"; do printf ' %-22s' "$(stats "$work/$how$2" "$3")"; done
  n=$(median "$work/netns$2" "$3")
  for how in "${hows[@]}"; do
    [ "$how" = netns ] || printf ' %-8.2f' "$(awk -v a="$(median "$work/$how$2" "$3")" -v n="$n" 'BEGIN { print a / n }')"
  done
  echo
}
row "mpirun wall, initfini (Init+Finalize)" "" 1
row "mpirun wall, initfini --connect" --connect 1
row "first all-to-all (slowest rank's connect_s)" --connect 2
