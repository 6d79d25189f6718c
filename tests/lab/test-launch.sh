#!/usr/bin/env bash
# lab-launch: a job launched the way a user of a real grid launches it, and
# what goes wrong around it.  Everything runs as the lab's unprivileged user
# (qcg-lab exec --user): a qcg-agent per node, qcg-mpirun on a node behind a
# NAT or a firewall; no ip netns exec in the launch path, no ssh, nothing on
# the broker's or the proxy's host.
#
#   nata1 (NAT) or fw1 (firewall): qcg-mpirun -> mpirun -> qcg-launch NODE
#        ~~ qcg-connect ~~> NODE's qcg-agent -> orted -> ranks
#
# Checks: every rank's output arrives (from fw1, 2 per node, all five sites);
# a rank that exits non-zero, MPI_Abort, SIGINT and SIGKILL to mpirun all end
# the job with a non-zero status and leave no process of the user on any node; the
# refusals (root, wrong secret, wrong job, a node without an agent, an agent
# killed during the job, garbage from a LAN host, another local user on the
# runtime port), each with a message naming the node.
. "$(dirname "$0")/test-lib.sh"

require_lab
require_services
command -v mpirun >/dev/null 2>&1 || skip "mpirun is not installed"
[ -e "$QCG_BUILD_DIR/btl_qcg/mca_btl_qcg.so" ] || skip "btl_qcg is not built (libopenmpi-dev missing?)"
[ -x "$QCG_BUILD_DIR/launch/qcg-agent" ] || skip "qcg-agent is not built"
progs=$QCG_BUILD_DIR/tests/mpi
[ -x "$progs/qcg-mpi-abort" ] || skip "the MPI test programs are not built in $progs"
scratch
# The lab's user reads the host lists.
chmod 755 "$WORK"
ALL="open1 open2 fw1 fw2 nata1 nata2 natb1 natb2 sym1 sym2"

# agents JOB SECRET NODE...: a qcg-agent of JOB on each NODE, as the user
# (logs in $WORK/agent-NODE.log, pids in AGENT[NODE]); returns once all are ready.
declare -A AGENT=()
agents() {
	local job=$1 secret=$2 n i
	shift 2
	for n in "$@"; do
		QCG_JOB=$job QCG_JOB_SECRET=$secret "$LAB" exec --user "$n" -- \
			qcg-agent --idle-timeout 120 --persist >"$WORK/agent-$n.log" 2>&1 &
		AGENT[$n]=$!
		BG_PIDS+=("$!")
	done
	for n in "$@"; do
		for ((i = 0; i < 150; i++)); do
			grep -q "ready: agent" "$WORK/agent-$n.log" && break
			kill -0 "${AGENT[$n]}" 2>/dev/null || break
			sleep 0.1
		done
		grep -q "ready: agent" "$WORK/agent-$n.log" || { show "$WORK/agent-$n.log"; fail "the agent on $n did not start"; }
	done
}

stop_agents() {
	local n
	for n in "${!AGENT[@]}"; do kill "${AGENT[$n]}" 2>/dev/null || true; done
	for n in "${!AGENT[@]}"; do wait "${AGENT[$n]}" 2>/dev/null || true; done
	AGENT=()
}

# hosts NAME NODE...: a host list file, one line per node.
hosts() {
	local f=$WORK/$1
	shift
	printf '%s\n' "$@" >"$f"
	chmod 644 "$f"
	echo "$f"
}

# user_mpirun FROM SECONDS OUT [qcg-mpirun args...]: qcg-mpirun on FROM as the
# user with $JOB/$SECRET, bounded; its status in rc.
user_mpirun() {
	local from=$1 secs=$2 o=$3
	shift 3
	rc=0
	QCG_JOB=$JOB QCG_JOB_SECRET=$SECRET timeout -k 5 "$secs" "$LAB" exec --user "$from" -- \
		qcg-mpirun --bind-to none --mca mpi_yield_when_idle 1 "$@" >"$o" 2>&1 || rc=$?
}

# --- 1. the output of every rank arrives, from a firewalled node, 2 per node ----------
t0=$(ms)
rc=0
timeout -k 10 120 "$LAB" mpirun --from fw1 --ppn 2 -- /bin/sh -c \
	'echo "rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE on $(hostname)"' >"$WORK/out1" 2>&1 || rc=$?
n_ok=0 r=0
for n in $ALL; do
	for k in 0 1; do
		grep -qx "rank $r of 20 on $n" "$WORK/out1" && n_ok=$((n_ok + 1))
		r=$((r + 1))
		: "$k"
	done
done
if [ "$rc" -eq 0 ] && [ "$n_ok" -eq 20 ]; then
	note "ok   20 ranks on 10 nodes of 5 sites, mpirun on fw1: every rank's line arrived ($(($(ms) - t0)) ms)"
else
	bad "output from fw1 --ppn 2: exit $rc, $n_ok of 20 rank lines"
	show "$WORK/out1" 30
fi
no_user_processes "after the run from fw1"

# --- 2. a rank exiting non-zero --------------------------------------------------------
rc=0
timeout -k 10 120 "$LAB" mpirun --sites open,nata,sym -- /bin/sh -c \
	'[ "$OMPI_COMM_WORLD_RANK" != 3 ] || exit 7' >"$WORK/out2" 2>&1 || rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ]; then
	note "ok   rank 3 exits 7: qcg-lab mpirun exits $rc"
else
	bad "rank 3 exiting 7: mpirun exit $rc (want non-zero, not a timeout)"
	show "$WORK/out2"
fi
no_user_processes "after a rank exited non-zero"

# --- 3. MPI_Abort from rank 1, mpirun on nata1 ------------------------------------------
t0=$(ms)
rc=0
timeout -k 10 120 "$LAB" mpirun -- "$progs/qcg-mpi-abort" 9 >"$WORK/out3" 2>&1 || rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "ABORT rank 1 code 9" "$WORK/out3"; then
	note "ok   MPI_Abort(9) in rank 1 of 10: mpirun exits $rc after $(($(ms) - t0)) ms"
else
	bad "MPI_Abort: mpirun exit $rc"
	show "$WORK/out3"
fi
no_user_processes "after MPI_Abort" && note "ok   after MPI_Abort no process of the user on any node"

# interrupt NAME SIGNAL WHAT PGREP-ARGS...: a job of 10 `sleep 100` ranks; once
# all run, SIGNAL to the process PGREP-ARGS find (WHAT names it); the job must
# end non-zero, bounded, and leave no process of the user on any node.
interrupt() {
	local name=$1 sig=$2 what=$3 pid
	shift 3
	rc=0
	timeout -k 10 120 "$LAB" mpirun -- /bin/sleep 100 >"$WORK/$name" 2>&1 &
	run=$!
	BG_PIDS+=("$run")
	poll 30 "10 ranks running" sh -c "[ \$(pgrep -u $LAB_UID -x sleep | wc -l) -ge 10 ]" ||
		{ bad "$sig: the 10 ranks did not start"; show "$WORK/$name"; }
	pid=$(pgrep -u "$LAB_UID" "$@" | head -n 1)
	t0=$(ms)
	[ -n "$pid" ] && kill "-$sig" "$pid"
	wait_exit "$run" 40 || rc=$?
	if [ -n "$pid" ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then
		note "ok   $sig to $what: qcg-lab mpirun exit $rc after $(($(ms) - t0)) ms"
	else
		bad "$sig to $what (pid ${pid:-none}): exit $rc"
		show "$WORK/$name"
	fi
	no_user_processes "after $sig to $what" &&
		note "ok   after $sig to $what no process of the user on any node ($(($(ms) - t0)) ms)"
}

# --- 4. SIGINT to qcg-mpirun, as Ctrl-C does (mpirun runs in a session of its
# own), then SIGKILL to mpirun, while the ranks run ------------------------------------
interrupt out4 INT qcg-mpirun -f "bin/qcg-mpirun"
interrupt out4b KILL mpirun -x mpirun

# --- 5. refusals --------------------------------------------------------------------------
JOB=$(new_job launch)
SECRET=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')

# An agent refuses to run as root.
rc=0
QCG_JOB=$JOB QCG_JOB_SECRET=$SECRET QCG_HELPER_SOCKET=$LAB_STATE/nodes/open1/helper.sock \
	timeout 10 ip netns exec qcg-open1 "$LAB_STATE/user/bin/qcg-agent" >"$WORK/root" 2>&1 || rc=$?
if [ "$rc" -eq 2 ] && grep -q "refusing to run as root" "$WORK/root"; then
	note "ok   as root the agent refuses: $(cat "$WORK/root")"
else
	bad "an agent as root: exit $rc"
	show "$WORK/root"
fi

agents "$JOB" "$SECRET" open1 natb1

# A host on open1's LAN sends garbage to the agent's port: refused and logged,
# the agent unharmed.
port=$(sed -n 's/.*ready: agent.* port \([0-9]*\)).*/\1/p' "$WORK/agent-open1.log")
"$LAB" exec open2 -- /usr/bin/python3 -c '
import os, socket, sys
for _ in range(3):
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
    s.sendall(os.urandom(300))
    try:
        s.recv(100)
    except OSError:
        pass
    s.close()' "198.51.100.11" "$port" 2>"$WORK/garbage" || true
if poll 10 "the refusal logged" grep -q "connection refused: incoming connection refused" "$WORK/agent-open1.log" &&
	kill -0 "${AGENT[open1]}"; then
	note "ok   garbage from open2 to open1's agent: $(grep -m1 "connection refused" "$WORK/agent-open1.log" | sed 's/.*warn [a-z_]*: //')"
else
	bad "garbage to the agent: no refusal logged (or the agent died)"
	show "$WORK/agent-open1.log"
	show "$WORK/garbage"
fi

# The wrong secret: the grid refuses the launcher, the message names the node.
h2=$(hosts h2 open1 natb1)
SECRET_OK=$SECRET
SECRET=wrong-$SECRET
user_mpirun nata1 60 "$WORK/wrongsecret" --host-list "$h2" -np 2 /bin/true
SECRET=$SECRET_OK
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "qcg-launch: \(open1\|natb1\): .*secret" "$WORK/wrongsecret"; then
	note "ok   wrong secret: $(grep -m1 "qcg-launch:" "$WORK/wrongsecret" | cut -c1-160)"
else
	bad "wrong secret: exit $rc"
	show "$WORK/wrongsecret"
fi
# reason_last FILE WHAT: the last lines the user reads are qcg-mpirun's
# summary, after Open MPI's advice (PATH, LD_LIBRARY_PATH), which does not
# apply, and then only qcg-launch's reasons: one per node that failed (both
# nodes of the host list may fail).
reason_last() {
	local summary after
	summary=$(grep -n "^qcg-mpirun: mpirun ended (status [0-9]*) because qcg-launch failed for [0-9]* node(s)" "$1" | tail -n 1 | cut -d: -f1)
	after=$(tail -n +"$((${summary:-999999} + 1))" "$1")
	if [ -n "$summary" ] && [ -n "$after" ] && ! printf '%s\n' "$after" | grep -vq "^qcg-launch: [a-z0-9]*: "; then
		note "ok   $2: the last line is the reason: $(tail -n 1 "$1" | cut -c1-100)"
	else
		bad "$2: the last lines are not qcg-launch's reason"
		show "$1" 8
	fi
}
reason_last "$WORK/wrongsecret" "wrong secret"

# The wrong job: no agent of that job anywhere.
JOB_OK=$JOB
JOB=$(new_job otherjob)
user_mpirun nata1 60 "$WORK/wrongjob" --launch-timeout 5 --host-list "$h2" -np 2 /bin/true
JOB=$JOB_OK
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "qcg-launch: \(open1\|natb1\): no qcg-agent of job" "$WORK/wrongjob"; then
	note "ok   wrong job: $(grep -m1 "qcg-launch:" "$WORK/wrongjob" | cut -c1-160)"
else
	bad "wrong job: exit $rc"
	show "$WORK/wrongjob"
fi

# A node of the host list runs no agent: mpirun fails naming it, within the
# launch timeout (and the few seconds the other daemons take to end), the
# reason last; nothing is left on the nodes whose agents did launch.
h3=$(hosts h3 open1 natb1 sym1)
t0=$(ms)
user_mpirun nata1 60 "$WORK/noagent" --launch-timeout 15 --host-list "$h3" -np 3 /bin/sleep 30
elapsed=$(($(ms) - t0))
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "qcg-launch: sym1: no qcg-agent of job $JOB answered within 15 s" "$WORK/noagent" &&
	[ "$elapsed" -lt 20000 ]; then
	note "ok   no agent on sym1, --launch-timeout 15: mpirun exit $rc after $elapsed ms: $(grep -m1 "qcg-launch: sym1" "$WORK/noagent" | cut -c1-120)"
else
	bad "no agent on sym1, --launch-timeout 15: exit $rc after $elapsed ms (the bound: 20 s)"
	show "$WORK/noagent"
fi
reason_last "$WORK/noagent" "no agent on sym1"
# docs/user.md shows these last lines: they must have the shape of the real ones.
python3 "$(dirname "$0")/../docs/check_samples.py" --block launch-no-agent "$WORK/noagent" ||
	bad "docs/user.md's sample of a missing agent is not what qcg-mpirun printed"
poll 20 "no rank left" sh -c "! pgrep -u $LAB_UID -x sleep" || bad "no agent on sym1: ranks left on the other nodes"

# Another user of open1 tries the runtime port of a running launch, then the
# agent of natb1 dies during the job: mpirun fails naming natb1, nothing is left.
QCG_JOB=$JOB QCG_JOB_SECRET=$SECRET timeout -k 5 90 "$LAB" exec --user nata1 -- \
	qcg-mpirun --bind-to none --host-list "$h2" -np 2 /bin/sleep 60 >"$WORK/killed" 2>&1 &
run=$!
BG_PIDS+=("$run")
poll 30 "2 ranks running" sh -c "[ \$(pgrep -u $LAB_UID -x sleep | wc -l) -ge 2 ]" ||
	{ bad "agent killed: the ranks did not start"; show "$WORK/killed"; }
rport=$(sed -n 's/.*runtime through 127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/agent-open1.log" | tail -n 1)
ip netns exec qcg-open1 setpriv --reuid=4242 --regid=4242 --clear-groups /usr/bin/python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"not the orted" * 10)
s.settimeout(3)
try:
    print("read %d bytes" % len(s.recv(100)))
except OSError as e:
    print("closed: %s" % e)' "${rport:-9}" >"$WORK/otheruser" 2>&1 || true
if grep -q "runtime connection from uid 4242 refused" "$WORK/agent-open1.log"; then
	note "ok   uid 4242 on open1 connecting to the runtime port: refused ($(cat "$WORK/otheruser"))"
else
	bad "another user on the runtime port (127.0.0.1:${rport:-?}) was not refused"
	show "$WORK/agent-open1.log"
	show "$WORK/otheruser"
fi
t0=$(ms)
# The agent's pid in natb1's namespace: the one among the user's qcg-agents there.
for pid in $(ip netns pids qcg-natb1); do
	[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = qcg-agent ] && kill -9 "$pid"
done
rc=0
wait_exit "$run" 80 || rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "qcg-launch: natb1: lost the connection to its agent" "$WORK/killed"; then
	note "ok   natb1's agent killed: mpirun exit $rc after $(($(ms) - t0)) ms: $(grep -m1 "qcg-launch: natb1" "$WORK/killed" | cut -c1-120)"
else
	bad "natb1's agent killed: mpirun exit $rc"
	show "$WORK/killed"
fi
stop_agents
no_user_processes "after an agent was killed" && note "ok   after the killed agent no process of the user on any node"

# --- 6. docs/user.md's recipe, pasted ------------------------------------------------------
# The blocks docs/user.md marks as tested, as a user pastes them: the job on
# nata1, an agent on each node of the host list (the lab's user has one home
# on every node, as a site's shared home), mpirun on nata1.  Only <id> and
# ./app are replaced (by the job's id and a test program), and mpirun gets
# --bind-to none as every lab job.
# doc_block NAME: the indented lines after docs/user.md's marker NAME.
doc_block() {
	awk -v m="<!-- tested by tests/lab/test-launch.sh: $1 -->" '
		$0 == m { on = 1; next }
		on && /^    / { sub(/^    /, ""); print; seen = 1; next }
		on && seen { exit }' "$(dirname "$0")/../../docs/user.md"
}
for b in job agent hosts mpirun; do
	[ -n "$(doc_block "$b")" ] || bad "docs/user.md: no block after the marker '$b'"
done
home=$LAB_STATE/user/home
# The guide's host list names open1, nata1, sym1 with 2 slots each.
doc_block hosts >"$WORK/nodes.txt"
chmod 644 "$WORK/nodes.txt"
doc_nodes=$(awk '{ print $1 }' "$WORK/nodes.txt" | tr '\n' ' ')
rc=0
"$LAB" exec --user nata1 -- /bin/bash -c "cd
$(doc_block job)
echo \"\$QCG_JOB\" > doc-job" >"$WORK/doc-job" 2>&1 || rc=$?
doc_job=$(cat "$home/doc-job" 2>/dev/null || true)
if [ "$rc" -ne 0 ] || [ -z "$doc_job" ] || [ "$(stat -c %a "$home/.qcg-secret" 2>/dev/null)" != 600 ]; then
	bad "docs/user.md step 1: exit $rc, job '$doc_job', secret file mode $(stat -c %a "$home/.qcg-secret" 2>/dev/null)"
	show "$WORK/doc-job"
else
	declare -A DOC_AGENT=()
	for n in $doc_nodes; do
		"$LAB" exec --user "$n" -- /bin/bash -c "cd
$(doc_block agent | sed "s/<id>/$doc_job/g")
wait" \
			>"$WORK/doc-agent-$n.log" 2>&1 &
		DOC_AGENT[$n]=$!
		BG_PIDS+=("$!")
	done
	for n in $doc_nodes; do
		poll 15 "the guide's agent on $n" grep -q "ready: agent of job $doc_job for node $n" "$WORK/doc-agent-$n.log" ||
			{ bad "docs/user.md step 2: no agent ready on $n"; show "$WORK/doc-agent-$n.log"; }
	done
	cp "$WORK/nodes.txt" "$home/nodes.txt"
	chmod 644 "$home/nodes.txt"
	# --bind-to none: the lab's ten nodes share two cores (lab/README.md).
	cmd=$(doc_block mpirun | sed "s#\./app#$progs/qcg-mpi-allpairs#; s#qcg-mpirun #qcg-mpirun --bind-to none #")
	rc=0
	timeout -k 10 180 "$LAB" exec --user nata1 -- /bin/bash -c \
		"cd; export QCG_JOB=$doc_job QCG_JOB_SECRET=\$(cat ~/.qcg-secret)
$cmd" >"$WORK/doc-run" 2>&1 || rc=$?
	if [ "$rc" -eq 0 ] && grep -q "^PASS allpairs" "$WORK/doc-run"; then
		note "ok   docs/user.md's recipe pasted (job, agents on $doc_nodes, host list, qcg-mpirun on nata1): $(grep "^PASS" "$WORK/doc-run")"
	else
		bad "docs/user.md's recipe: qcg-mpirun exit $rc"
		show "$WORK/doc-run" 30
	fi
	# The agents of nodes that ran ranks end by themselves; nata1's (mpirun's own
	# node) is left to its idle timeout, as the guide says: stopped here.
	for n in $doc_nodes; do
		[ "$n" = nata1 ] && { kill "${DOC_AGENT[$n]}" 2>/dev/null; continue; }
		wait_exit "${DOC_AGENT[$n]}" 15 >/dev/null 2>&1 || true
		grep -q "stopping: the last launch ended" "$WORK/doc-agent-$n.log" ||
			{ bad "docs/user.md step 5: the agent on $n did not end with its launch"; show "$WORK/doc-agent-$n.log"; }
	done
	pkill -u "$LAB_UID" -x qcg-agent 2>/dev/null || true
	rm -f "$home/.qcg-secret" "$home/doc-job" "$home/nodes.txt"
fi
no_user_processes "after the guide's recipe"

[ "$failed" -eq 0 ] || fail "$failed launch checks failed"
note "launch: output, exit status, MPI_Abort, SIGINT and the refusals behave on the lab grid"
