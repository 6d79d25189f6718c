#!/usr/bin/env bash
# btl_qcg against btl_tcp in the lab, in the same run (alternating, medians of
# ROUNDS, default 5):
#   1. NPopenmpi between open1 and open2 (plain TCP reaches both ways): bandwidth
#      of large messages (mean Mbit/s over 1-8 MiB) and small-message latency
#      (NetPIPE's half round trip, min over 1-8 bytes);
#   2. MPI_Init+MPI_Finalize wall time (tests/mpi/initfini.c, the slowest rank):
#      10 ranks on one site (open, 5 per node) qcg vs tcp, and 10 ranks over the
#      five sites with qcg (tcp cannot connect them); "+connect" adds a 1-byte
#      MPI_Alltoall, which sets up every connection.
#   bench/mpi-netpipe.sh [ROUNDS]   (root; QCG_BUILD_DIR, default build/; brings the
#                                   lab up if it is down, and down again after)
#   bench/mpi-netpipe.sh --encrypt [ROUNDS]
#                                   NetPIPE only, btl_qcg with btl_qcg_encrypt
#                                   always against never (issue 17)
#   bench/mpi-netpipe.sh --trixie [ROUNDS]
#                                   NetPIPE only, qcg and tcp on Open MPI 4.1
#                                   (this host's) and on Open MPI 5.0 (the
#                                   Debian 13 root's, lab/debian13.sh;
#                                   NPopenmpi, mpirun and the ranks from the
#                                   root, btl_qcg built there), alternating
# Share the lab: flock -w 1800 /tmp/qcg-lab.lock bench/mpi-netpipe.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$root/build}
encrypt="" trixie=""
[ "${1:-}" != --encrypt ] || { encrypt=yes; shift; }
[ "${1:-}" != --trixie ] || { trixie=yes; shift; }
rounds=${1:-5}
lab=$root/lab/qcg-lab
initfini=$QCG_BUILD_DIR/tests/mpi/qcg-mpi-initfini
work=$(mktemp -d)
lab_was_up=0
ip netns list | grep -qw qcg-inet && lab_was_up=1

cleanup() {
  [ "$lab_was_up" = 1 ] || "$lab" down >/dev/null
  rm -rf "$work" "${np:-}"
}
trap cleanup EXIT

command -v NPopenmpi >/dev/null || { echo "mpi-netpipe.sh: NPopenmpi missing (apt-get install netpipe-openmpi)" >&2; exit 1; }
[ -x "$initfini" ] || { echo "mpi-netpipe.sh: $initfini missing: build first" >&2; exit 1; }
if [ -n "$trixie" ]; then
  # shellcheck source=../lab/debian13.sh
  . "$root/lab/debian13.sh"
  trixie_root
  [ -x "$TRIXIE_ROOT/usr/bin/NPopenmpi" ] || { echo "mpi-netpipe.sh: no NPopenmpi in $TRIXIE_ROOT" >&2; exit 1; }
  trixie_build "$QCG_BUILD_DIR/trixie-build" qcg-agent qcg-launch mca_btl_qcg qcgcolour
fi
"$lab" up >/dev/null
# NPopenmpi's output is written by rank 0, as the lab's user (nobody), in the
# lab's state directory: the one directory a rank in the Debian 13 root sees
# at the host's path too.
np=$(mktemp -d "${QCG_LAB_DIR:-/run/qcg-lab}/netpipe.XXXXXX")
chmod 0777 "$np"

. "$root/bench/stats.sh" # median, spread

# netpipe MODE ROUND: one NPopenmpi run open1 <-> open2 (MODE tcp: btl_tcp; qcg:
# btl_qcg as configured; always, never: btl_qcg with that btl_qcg_encrypt;
# qcg5, tcp5: qcg, tcp on the Debian 13 root's Open MPI 5).
netpipe() {
  local out=$np/$1-$2.out flag="" mca=${QCG_MPIRUN_ARGS:-}
  local -a env=()
  case $1 in tcp | tcp5) flag=--tcp ;; esac
  case $1 in always | never) mca="$mca --mca btl_qcg_encrypt $1" ;; esac
  case $1 in *5) env=(QCG_LAB_ROOT="$TRIXIE_ROOT" QCG_LAB_USER_BUILD="$QCG_BUILD_DIR/trixie-build") ;; esac
  env ${env[@]+"${env[@]}"} QCG_MPIRUN_ARGS="$mca" "$lab" mpirun --sites open $flag -- \
    /usr/bin/NPopenmpi -p 0 -u 8388608 -o "$out" \
    >"$work/np.log" 2>&1 || { cat "$work/np.log" >&2; exit 1; }
  awk '$1 >= 1048576 { s += $2; n++ } END { printf "%.0f\n", s / n }' "$out" >>"$work/bw-$1"
  awk '$1 <= 8 { if (m == "" || $3 < m) m = $3 } END { printf "%.2f\n", m * 1e6 }' "$out" >>"$work/lat-$1"
}

# initfini NAME ARGS...: the slowest rank's init+finalize (and connect) seconds.
initfini() {
  local name=$1 conn=""
  shift
  [ "${*: -1}" = --connect ] && conn=1
  "$lab" mpirun "$@" >"$work/if.log" 2>&1 || { cat "$work/if.log" >&2; exit 1; }
  awk '/^INITFINI/ { t = $5 + $9; if (t > m) m = t; c = $7; if (c > mc) mc = c }
       END { printf "%.3f %.3f\n", m, mc }' "$work/if.log" >>"$work/if-$name${conn:++connect}"
}

# compare A B HEAD_A HEAD_B HEAD_RATIO: NetPIPE's medians of modes A and B, A/B, spreads.
compare() {
  local bw_a bw_b lat_a lat_b
  bw_a=$(median <"$work/bw-$1") bw_b=$(median <"$work/bw-$2")
  lat_a=$(median <"$work/lat-$1") lat_b=$(median <"$work/lat-$2")
  printf '%-34s %14s %14s %8s\n' "" "$3" "$4" "$5"
  printf '%-34s %14s %14s %8.3f\n' "bandwidth 1-8 MiB (Mbit/s)" "$bw_a" "$bw_b" "$(awk -v a="$bw_a" -v b="$bw_b" 'BEGIN { print a / b }')"
  printf '%-34s %14s %14s %8.3f\n' "latency 1-8 B (us, half RTT)" "$lat_a" "$lat_b" "$(awk -v a="$lat_a" -v b="$lat_b" 'BEGIN { print a / b }')"
  printf '%-34s %14s %14s\n' "bandwidth spread (min-max)" "$(spread <"$work/bw-$1")" "$(spread <"$work/bw-$2")"
  printf '%-34s %14s %14s\n' "latency spread (min-max)" "$(spread <"$work/lat-$1")" "$(spread <"$work/lat-$2")"
}
if [ -n "$encrypt" ]; then
  for ((r = 1; r <= rounds; r++)); do
    echo "round $r/$rounds" >&2
    netpipe always "$r"
    netpipe never "$r"
  done
  echo "NPopenmpi open1 <-> open2 over btl_qcg, medians of $rounds alternating runs"
  compare always never "encrypt=always" "encrypt=never" "ratio"
  exit 0
fi

if [ -n "$trixie" ]; then
  for ((r = 1; r <= rounds; r++)); do
    echo "round $r/$rounds" >&2
    netpipe qcg "$r"
    netpipe tcp "$r"
    netpipe qcg5 "$r"
    netpipe tcp5 "$r"
  done
  echo "NPopenmpi open1 <-> open2, medians of $rounds alternating runs"
  echo "Open MPI $(ompi_info --parsable 2>/dev/null | sed -n 's/^ompi:version:full://p') (Debian 12, this host):"
  compare qcg tcp btl_qcg btl_tcp qcg/tcp
  echo
  echo "Open MPI $(chroot "$TRIXIE_ROOT" ompi_info --parsable 2>/dev/null | sed -n 's/^ompi:version:full://p') (Debian 13 root):"
  compare qcg5 tcp5 btl_qcg btl_tcp qcg/tcp
  exit 0
fi

for ((r = 1; r <= rounds; r++)); do
  echo "round $r/$rounds" >&2
  netpipe qcg "$r"
  netpipe tcp "$r"
  initfini site-qcg --sites open --ppn 5 -- "$initfini"
  initfini site-tcp --sites open --ppn 5 --tcp -- "$initfini"
  initfini grid-qcg -- "$initfini"
  initfini site-qcg --sites open --ppn 5 -- "$initfini" --connect
  initfini site-tcp --sites open --ppn 5 --tcp -- "$initfini" --connect
  initfini grid-qcg -- "$initfini" --connect
done

echo
echo "NPopenmpi open1 <-> open2, medians of $rounds alternating runs"
compare qcg tcp btl_qcg btl_tcp qcg/tcp
echo
echo "MPI_Init+MPI_Finalize, slowest of 10 ranks (s), medians of $rounds"
for f in site-qcg site-tcp grid-qcg site-qcg+connect site-tcp+connect grid-qcg+connect; do
  t=$(awk '{ print $1 }' "$work/if-$f" | median)
  c=$(awk '{ print $2 }' "$work/if-$f" | median)
  case $f in
  site-*) what="10 ranks, open (5 per node)" ;;
  grid-*) what="10 ranks, five sites" ;;
  esac
  btl=${f#*-}
  printf '%-34s %-5s %8s s%s\n' "$what" "${btl%+*}" "$t" \
    "$([ "${f#*+}" != "$f" ] && echo "  (+ all connections: alltoall ${c} s)")"
done
