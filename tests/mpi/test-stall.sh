#!/usr/bin/env bash
#
# mpi-stall: a btl_qcg channel whose path goes silent, as when a NAT or a
# stateful firewall on the way forgets the connection (conntrack -F, a router
# reboot): the packets of one direction are dropped, no reset comes.  The
# job must carry data again within seconds (btl_qcg_stall_timeout, 10 s by
# default, then a new connection and the resend), not when TCP gives up.
#
#   rank 0 <==== direct, TCP on 127.0.0.1 ====> rank 1      (qcg-mpi-resend)
#              iptables INPUT DROP of the packets to one end of it
#        `--unix--> qcg-helper c1/n1 --mTLS--> qcg-frontend c1 127.0.0.1:18722
#                                                 --mTLS--> qcg-broker 127.0.0.1:18721
#
# Runs in a network namespace of its own (unshare -n: the rule dies with it;
# ports 18721-18749 there).  Before btl_qcg_stall_timeout the job stood still
# here for minutes (one cluster: no keepalive; TCP retransmits for ~15 min).
#
#   test-stall.sh BUILD_DIR SRC_DIR      exit 0 passed, 1 failed, 77 skipped

set -euo pipefail
export LC_ALL=C

# shellcheck source=../lib/own_netns.sh
. "$(dirname "$0")/../lib/own_netns.sh"
own_netns QCG_STALL_NETNS "$@"

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)
fail_lines=40 log_lines=30
# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"

port_b=18721 port_f=18722 low=18730 high=18749 name=mpi-stall
# shellcheck source=resend-channel.sh
. "$src/tests/mpi/resend-channel.sh"
start_resend

if ! wait_for "the job's third round" 600 more_rounds 2 || ! wait_for "one channel" 100 one_channel; then
	fail "the job runs over one btl_qcg channel"
	exit 1
fi
read -r aport iport < <(channel)
before=$(rounds)
t0=$(ms)
# The packets to the initiator's end vanish: its peer's data and acks alike.
iptables -I INPUT -p tcp -s 127.0.0.1 --sport "$aport" --dport "$iport" -j DROP
if wait_for "a round after the drop" 600 more_rounds "$before"; then
	gap=$(($(ms) - t0))
	if ((gap < 30000)); then
		pass "a channel whose packets one way are dropped (no reset) carries data again $gap ms after the drop (btl_qcg_stall_timeout 10000 ms, a new connection, the resend)"
	else
		fail "the job carried data again only $gap ms after the drop (bound 30000 ms)"
	fi
else
	fail "a channel whose packets one way are dropped: the job carried no data for 60 s after the drop"
fi
dropped=$(iptables -nvxL INPUT | awk '/DROP/ {print $1; exit}')
touch "$stop"
wait_exit "$job" 600 || true
echo "(exit $rc, $dropped packets dropped)" >>"$out"
if [[ $rc -eq 0 ]] && grep -q "^PASS resend" "$out" && ((dropped > 0)) &&
	grep -q "broken (no acknowledgement from the peer's host for 10000 ms" "$out" &&
	grep -q "re-established by direct" "$out"; then
	pass "the stall is said ('broken (no acknowledgement ...)', 're-established'), every message once, in order, intact: $(grep "^PASS" "$out" | cut -c1-100)"
else
	fail "after the stall: the job ends with every message intact and says why the channel was replaced"
fi

echo "$passed passed, $failed failed"
((failed == 0))
