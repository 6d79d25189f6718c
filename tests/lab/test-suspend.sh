#!/usr/bin/env bash
# lab-suspend: a job suspended while a btl_qcg connection is broken (issue
# 32, finding 7).  qcg-mpi-resend on open and nata (four ranks, one per
# node; nata's pairs with open direct or reversed, all accepted at open1),
# mpirun on nata1.  Everything to open1's rank's listening port is dropped
# (iptables and ip6tables in open1's namespace: no reset) until a rank says a connection
# broke (btl_qcg_stall_timeout 1 s); then every rank is stopped (SIGSTOP, as
# a batch system suspends a job) for 2 x btl_qcg_reconnect_timeout (5 s),
# the drop is removed and the ranks continued.  The job must carry data
# again, re-establish what broke and end with every message once, in order,
# intact: a rank counts the time it was away out of its bound.  Before, the
# ranks came back with the bound spent and the job aborted ("lost rank").
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
command -v mpirun >/dev/null 2>&1 || skip "mpirun is not installed"
progs=$QCG_BUILD_DIR/tests/mpi
[ -x "$progs/qcg-mpi-resend" ] || skip "qcg-mpi-resend is not built (needs libopenmpi-dev)"
scratch
STOP=/tmp/qcg-suspend-stop.$$
JOB_OUT=$WORK/job.out
BOUND_MS=5000
NODES="open1 open2 nata1 nata2"
RULE=()
RANKS=()
# Both families: nata's nodes and open2 may reach open1 over IPv6.
drop() { "$LAB" exec open1 -- iptables "$1" "${RULE[@]}" && "$LAB" exec open1 -- ip6tables "$1" "${RULE[@]}"; }
undo() {
	[ ${#RULE[@]} -eq 0 ] || drop -D 2>/dev/null || true
	RULE=()
	[ ${#RANKS[@]} -eq 0 ] || kill -CONT "${RANKS[@]}" 2>/dev/null || true
}
trap 'scratch_cleanup; undo; rm -f "$STOP"' EXIT

# rank_pids NODE: the job's rank processes in NODE's namespace.
rank_pids() {
	local p
	for p in $(ip netns pids "qcg-$1" 2>/dev/null); do
		[ "$(cat "/proc/$p/comm" 2>/dev/null)" = qcg-mpi-resend ] && echo "$p"
	done
	return 0
}
connected() { [ "$(grep -c ' -> rank [0-9]* (host ' "$JOB_OUT" || true)" -ge 6 ]; }
rounds() { grep -c '^round ' "$JOB_OUT" || true; }
more_rounds() { [ "$(rounds)" -gt "$1" ]; }
broken() { grep -q 'connection to rank [0-9]* broken' "$JOB_OUT"; }
stopped() { local p; for p in "$@"; do grep -q '^State:.*T' "/proc/$p/status" || return 1; done; }

rm -f "$STOP"
QCG_MPIRUN_ARGS="--mca btl_qcg_verbose 1 --mca btl_qcg_reconnect_timeout $BOUND_MS --mca btl_qcg_stall_timeout 1000" \
	timeout -k 10 300 "$LAB" mpirun --sites open,nata --from nata1 -- \
	"$progs/qcg-mpi-resend" 100000000 -1 "$STOP" >"$JOB_OUT" 2>&1 &
job=$!
BG_PIDS+=("$job")
poll 120 "the 6 pairs connected" connected || { show "$JOB_OUT" 30; fail "the job's 6 pairs did not connect within 120 s"; }
poll 60 "3 rounds" more_rounds 2 || { show "$JOB_OUT" 30; fail "the job carried no rounds"; }
for n in $NODES; do
	for p in $(rank_pids "$n"); do RANKS+=("$p"); done
done
[ ${#RANKS[@]} -eq 4 ] || fail "4 ranks expected in open1 open2 nata1 nata2, found: ${RANKS[*]:-none}"
port=$("$LAB" exec open1 -- ss -Htlnp | grep '"qcg-mpi-resend"' | awk '{n = split($4, a, ":"); print a[n]; exit}')
[ -n "$port" ] || fail "open1's rank listens on no port"

RULE=(INPUT -p tcp --dport "$port" -j DROP)
drop -I || fail "iptables or ip6tables in open1"
poll 30 "a connection broken" broken || { show "$JOB_OUT" 30; fail "no connection said broken within 30 s of the drop"; }
kill -STOP "${RANKS[@]}"
poll 5 "the ranks stopped" stopped "${RANKS[@]}" || fail "the ranks did not stop"
before=$(rounds)
note "connection broken; ranks ${RANKS[*]} stopped for $((2 * BOUND_MS)) ms"
sleep $((2 * BOUND_MS / 1000))
drop -D || fail "iptables or ip6tables -D in open1"
RULE=()
kill -CONT "${RANKS[@]}"
RANKS=()
poll 60 "a round after the resume" more_rounds "$before" || { show "$JOB_OUT" 40; fail "resumed, the job carried no data for 60 s"; }
note "resumed: the job carries data again"
touch "$STOP"
rc=0
wait_exit "$job" 120 || rc=$?
if [ "$rc" -eq 0 ] && grep -q "^PASS resend" "$JOB_OUT" && grep -q "re-established by" "$JOB_OUT" &&
	! grep -q "lost rank" "$JOB_OUT"; then
	note "ok   $(grep '^PASS resend' "$JOB_OUT" | cut -c1-120)"
else
	show "$JOB_OUT" 40
	fail "after the suspension the job did not end with every message intact"
fi
echo "lab-suspend: passed"
