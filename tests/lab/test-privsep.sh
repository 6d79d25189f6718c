#!/usr/bin/env bash
# lab-privsep: a helper that may intercept runs as two processes
# (helper/privsep.h): the main one, which talks to the world and holds no
# capability, and its child qcg-helper-priv, which runs the packet engine and
# holds CAP_NET_ADMIN and CAP_NET_RAW only.
#
#   nata1: qcg-helper (CapEff 0) ==socketpair== qcg-helper-priv (CapEff 3000)
#            |  traversing: nata1's SYN watched here, injected at fw1
#   fw1:   qcg-helper (CapEff 0) ==socketpair== qcg-helper-priv (CapEff 3000)
#
# 1. Every compute node's helper: the main process has no capability at all
#    (effective, permitted, inheritable, ambient, bounding) and no_new_privs;
#    its one qcg-helper-priv child holds CAP_NET_ADMIN and CAP_NET_RAW only
#    (bounding set too) and no_new_privs.
# 2. nata1 -> fw1 traverses (16 MiB intact).
# 3. nata1's privileged process is killed: its helper says so once, stays up
#    and registered; nata1 -> fw1 then connects by the next technique, the
#    traversal failing at once on nata1 with that reason.
# 4. fw1's helper gets SIGTERM: both processes exit, the privileged one
#    removing its chains first; started again, it has a privileged process.
# The lab is put back (nata1's helper restarted, the broker's memory of the
# failed traversal forgotten) at the end, also on failure; then nata1 -> fw1
# traverses again.
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
command -v pgrep >/dev/null 2>&1 || skip "pgrep (procps) is not installed"
scratch
restore() {
	"$LAB" service stop nata1-helper >/dev/null 2>&1 || true
	"$LAB" service start nata1-helper >/dev/null 2>&1 || true
	"$LAB" service start fw1-helper >/dev/null 2>&1 || true
	forget_outcomes >/dev/null 2>&1 || true
}
trap 'scratch_cleanup; restore' EXIT
JOB=$(new_job privsep)
head -c $((16 << 20)) /dev/urandom >"$WORK/in"

main_pid() { cat "$LAB_STATE/run/helper-$1.pid"; }
priv_pid() { pgrep -P "$1" -x qcg-helper-priv; }
status_of() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
log_of() { echo "$LAB_STATE/log/helper-$1.log"; }
helper_connected() {
	ip netns exec "qcg-$1" "$QCG_BUILD_DIR/helper/qcg-helper" --status --json \
		--socket "$LAB_STATE/nodes/$1/helper.sock" | grep -q '"upstream_connected":true'
}

# expect PID FIELD VALUE WHAT
expect() {
	local v
	v=$(status_of "$1" "$2")
	[ "$v" = "$3" ] || fail "$4 (pid $1): $2 is $v, not $3"
}

# check_node NODE: the two processes and what each may do.
check_node() {
	local n=$1 main priv f
	main=$(main_pid "$n") || fail "$n: no helper pid"
	priv=$(priv_pid "$main") || fail "$n: its helper (pid $main) has no qcg-helper-priv child"
	[ "$(echo "$priv" | wc -w)" -eq 1 ] || fail "$n: more than one privileged process: $priv"
	for f in CapEff CapPrm CapInh CapAmb CapBnd; do
		expect "$main" "$f" 0000000000000000 "$n's main helper process"
	done
	expect "$main" NoNewPrivs 1 "$n's main helper process"
	for f in CapEff CapPrm CapBnd; do
		expect "$priv" "$f" 0000000000003000 "$n's privileged process"
	done
	expect "$priv" NoNewPrivs 1 "$n's privileged process"
	PRIV=$priv
}

# --- 1: capabilities per process ---------------------------------------------
nodes=""
for conf in "$LAB_STATE"/etc/helper-*.conf; do
	n=${conf##*/helper-}
	n=${n%.conf}
	grep -q '^# unprivileged' "$conf" && continue
	check_node "$n"
	nodes+=" $n"
done
[ -n "$nodes" ] || fail "no privileged helper in the lab"
note "main helper processes: CapEff/Prm/Inh/Amb/Bnd 0, no_new_privs; qcg-helper-priv: CAP_NET_ADMIN+CAP_NET_RAW (3000) only, on:$nodes"

# --- 2: traversing through the privileged processes ----------------------------
cat_transfer nata1 fw1
[ "$XFER_TECH" = traversing ] || fail "nata1 -> fw1 used $XFER_TECH, not traversing"
grep -q "helper-priv\[[0-9]*\] info traverse_new: traversing TCP ready on queue" "$(log_of fw1)" ||
	fail "fw1's privileged process did not log its engine"
note "nata1 -> fw1: 16 MiB identical, traversing, setup $XFER_SETUP_US us"

# --- 3: the privileged process killed --------------------------------------------
check_node nata1
victim=$PRIV main=$(main_pid nata1)
regs=$(grep -c "node nata/nata1 registered: " "$LAB_STATE/log/broker.log")
kill -KILL "$victim"
lost="the privileged process (pid $victim) was killed by signal 9"
poll 5 "nata1's helper to notice" grep -q "$lost" "$(log_of nata1)" ||
	fail "nata1's helper did not log the loss"
pid_gone "$main" && fail "nata1's helper exited with its privileged process"
helper_connected nata1 || fail "nata1's helper is no longer registered"
cat_transfer nata1 fw1
[ "$XFER_TECH" != traversing ] || fail "nata1 -> fw1 traversed without a privileged process"
grep -q "traversing to fw/fw1 cannot start: traversing is no longer available: $lost" \
	"$(log_of nata1)" || fail "nata1's helper did not fail the traversal with the reason"
[ "$(grep -c "error lose: $lost" "$(log_of nata1)")" -eq 1 ] || fail "the loss was not logged once"
pid_gone "$main" && fail "nata1's helper exited"
# The node registers again, declaring it cannot intercept (within a poll's
# wait): the broker stops planning traversals from it.
registered_again() {
	[ "$(grep -c "node nata/nata1 registered: " "$LAB_STATE/log/broker.log")" -gt "$regs" ]
}
poll 40 "nata1 to register again" registered_again ||
	fail "nata1's helper did not register again after the loss"
grep "node nata/nata1 registered: " "$LAB_STATE/log/broker.log" | tail -1 | grep -q "can intercept" &&
	fail "nata1 registered again still declaring it can intercept"
cat_transfer nata1 fw1
[ "$XFER_TECH" != traversing ] || fail "nata1 -> fw1 traversed after the new registration"
grep -q "job $JOB rank $XFER_FROM_RANK (nata) -> .*tried before: traversing" "$LAB_STATE/log/broker.log" &&
	fail "the broker still planned traversing from nata1 after its new registration"
note "nata1's privileged process killed: logged once, helper up and registered again without intercepting; nata1 -> fw1 by $XFER_TECH, traversing no longer planned: ${lost}"

# --- 4: SIGTERM: both processes go, the chains with them -------------------------
check_node fw1
victim=$PRIV main=$(main_pid fw1)
"$LAB" service stop fw1-helper >/dev/null
poll 5 "fw1's privileged process to exit" pid_gone "$victim" || fail "fw1's privileged process outlived its helper"
pid_gone "$main" || fail "fw1's helper still runs"
"$LAB" exec fw1 -- iptables -w 5 -t raw -S | grep -q QCG-TRAVERSE && fail "fw1: interception chains left"
grep -q "helper-priv\[$victim\] info stop: stopping (the main process closed its socket): removing the rules and chains" \
	"$(log_of fw1)" || fail "fw1's privileged process did not log its stop"
grep -q "the privileged process (pid $victim) exited with status 0" "$(log_of fw1)" ||
	fail "fw1's helper did not see its privileged process exit 0"
"$LAB" service start fw1-helper >/dev/null
check_node fw1
note "fw1's helper stopped: its privileged process removed the chains and exited 0; started again with one ($PRIV)"

# --- the lab as it was ---------------------------------------------------------
trap scratch_cleanup EXIT
restore
check_node nata1
cat_transfer nata1 fw1
[ "$XFER_TECH" = traversing ] || fail "after the restart nata1 -> fw1 used $XFER_TECH, not traversing"
note "nata1's helper restarted: nata1 -> fw1 traverses again"
