#!/usr/bin/env bash
#
# mpi-suspend: a job suspended while a btl_qcg channel is broken (issue 32,
# finding 7).  A batch system suspends a whole job by stopping every rank
# (Slurm's suspend is SIGSTOP); a rank that comes back must count the time
# it was away from MPI out of its reconnect bound, not declare its peer lost.
#
#   rank 0 <==== direct, TCP on 127.0.0.1 ====> rank 1      (qcg-mpi-resend)
#     the acceptor's end: iptables INPUT DROP (no reset: the stall detector
#     breaks the channel, and reconnects cannot get through either);
#     once a rank says "broken", SIGSTOP of both ranks for 2 x
#     btl_qcg_reconnect_timeout (3 s), the drop removed, SIGCONT
#
# The job must carry data again, re-establish the channel and end with
# every message once, in order, intact.  Before, the ranks came back with
# the bound spent and the job aborted ("peer gone").
#
# Runs in a network namespace of its own (unshare -n: the rule dies with it;
# ports 18751-18779 there).
#
#   test-suspend.sh BUILD_DIR SRC_DIR      exit 0 passed, 1 failed, 77 skipped

set -euo pipefail
export LC_ALL=C

# shellcheck source=../lib/own_netns.sh
. "$(dirname "$0")/../lib/own_netns.sh"
own_netns QCG_SUSPEND_NETNS "$@"

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)
fail_lines=40 log_lines=30
# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"

port_b=18751 port_f=18752 low=18760 high=18779 name=mpi-suspend
bound_ms=3000
# shellcheck source=resend-channel.sh
. "$src/tests/mpi/resend-channel.sh"

# The ranks: the processes listening in the node's range.
ranks() {
	ss -Htlnp "( sport >= :$low and sport <= :$high )" | grep -o 'pid=[0-9]*' | cut -d= -f2 |
		sort -u
}
broken() { grep -q "connection to rank [01] broken" "$out"; }
stopped() { local p; for p in "$@"; do grep -q '^State:.*T' "/proc/$p/status" || return 1; done; }

start_resend --mca btl_qcg_reconnect_timeout "$bound_ms" --mca btl_qcg_stall_timeout 1000

if ! wait_for "the job's third round" 600 more_rounds 2 || ! wait_for "one channel" 100 one_channel; then
	fail "the job runs over one btl_qcg channel"
	exit 1
fi
read -r aport _ < <(channel)
mapfile -t rank_pids < <(ranks)
if ((${#rank_pids[@]} != 2)); then
	echo "ranks: ${rank_pids[*]}" >>"$out"
	fail "two ranks listen in the node's range"
	exit 1
fi
# Everything to the acceptor's port vanishes: the channel's data and acks,
# and the SYNs of every reconnect.
iptables -I INPUT -p tcp --dport "$aport" -j DROP
if ! wait_for "a rank to say the channel broke" 200 broken; then
	iptables -D INPUT -p tcp --dport "$aport" -j DROP
	fail "the dropped channel is said broken within 20 s"
	exit 1
fi
kill -STOP "${rank_pids[@]}"
wait_for "both ranks stopped" 50 stopped "${rank_pids[@]}" || true
before=$(rounds)
sleep $((2 * bound_ms / 1000))
iptables -D INPUT -p tcp --dport "$aport" -j DROP
kill -CONT "${rank_pids[@]}"
pass "both ranks stopped for $((2 * bound_ms)) ms (2 x btl_qcg_reconnect_timeout) while the channel was broken"

if wait_for "a round after the resume" 300 more_rounds "$before"; then
	pass "resumed, the job carries data again"
else
	fail "resumed, the job carries data again within 30 s"
fi
touch "$stop"
wait_exit "$job" 600 || true
echo "(exit $rc)" >>"$out"
if [[ $rc -eq 0 ]] && grep -q "^PASS resend" "$out" && grep -q "re-established by direct" "$out" &&
	! grep -q "no new one was made" "$out"; then
	pass "the channel is re-established, every message once, in order, intact: $(grep "^PASS" "$out" | cut -c1-100)"
else
	fail "after the suspension: the job ends with every message intact, the channel re-established"
fi

echo "$passed passed, $failed failed"
((failed == 0))
