#!/usr/bin/env bash
#
# launch-loopback: the launch path (qcg-agent, qcg-launch, qcg-mpirun)
# against the real daemons on loopback, with a throw-away CA.  Two agents of
# one job stand for two nodes, a1 and a2, on the one helper (a node's name
# is only its agent's address in the job); mpirun runs here and reaches them
# through qcg-launch as it would across sites.
#
#   qcg-mpirun --host-list {a1, a2}
#     `- mpirun --mca plm_rsh_agent qcg-launch
#          |- qcg-launch a1 orted ... ==qcg-connect==> qcg-agent --node a1 -> orted -> rank 0
#          `- qcg-launch a2 orted ... ==qcg-connect==> qcg-agent --node a2 -> orted -> rank 1
#   each of them `--unix--> qcg-helper c1/n1 --mTLS--> qcg-frontend c1 127.0.0.1:18602
#                                                  --mTLS--> qcg-broker 127.0.0.1:18601
#
# Ports 18600-18699 belong to this test: broker 18601, frontend 18602, the
# helper's listening range 18650-18699.  Each part has a job of its own
# ($base-TAG) and agents of its own (log agent-TAG-NODE.log): a. what the
# agent refuses; b. a job on two agents, the ranks' output, environment and
# colours; c. a rank fails; c2. ranks that end at once; d. a node without an
# agent; e. a wrong secret; f. a wrong job; g. a command other than orted;
# h. MPI_Abort, SIGINT to qcg-mpirun, SIGKILL to mpirun: nothing of the job
# may be left after any.  Every wait is
# bounded and waits on something observable (a log line, an exit, the
# processes of an orted's session); whatever the test started is ended in the
# cleanup, the orteds' sessions included.
#
#   test-launch-loopback.sh BUILD_DIR SRC_DIR      exit 0 passed, 1 failed, 77 skipped

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)

# A failed check shows the last 40 lines of its output; the cleanup, 30 of each log.
fail_lines=40 log_lines=30
# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"

qcg_agent=$build/launch/qcg-agent
qcg_launch=$build/launch/qcg-launch
qcg_mpirun=$build/launch/qcg-mpirun
btl=$build/btl_qcg/mca_btl_qcg.so
progs=$build/tests/mpi
port_b=18601 port_f=18602 low=18650 high=18699

need_built "$qcg_agent" "$qcg_launch" "$qcg_mpirun" "$helper" "$frontend" "$broker" "$certs" \
	"$progs/qcg-mpi-pairs" "$progs/qcg-mpi-abort"
[[ -e $btl ]] || { echo "$btl not built: skipping"; exit 77; }
need_commands mpirun ompi_info ss ps
# Open MPI 5 (PRRTE) starts prted where 4.1 (ORTE) starts orted; the test is
# the same (the agents' log lines name the daemon).
daemon=orted
[[ $(mpirun --version 2>/dev/null) != *"(Open MPI) 5."* ]] || daemon=prted
need_commands "$daemon"

ompi_dir=$(ompi_info --path pkglibdir 2>/dev/null | sed -n 's/.*Pkglibdir: *//p')
component_path=$build/btl_qcg${ompi_dir:+:$ompi_dir}

grid_workdir qcg-launch

# The agents and mpiruns started (pid -> nothing): ended first in the cleanup.
declare -A launch_pids=()
declare -A agent_pid=()
# An agent refuses root unless told; run as root (CI), every agent is told.
root_opt=()
if [[ $(id -u) -eq 0 ]]; then root_opt=(--allow-root); fi

# The orteds the agents of part TAG (all parts without one) started, from their logs.
orted_pids() {
	cat "$work"/agent-"${1:-*}"-*.log 2>/dev/null |
		sed -n 's/.*: [op]rted pid \([0-9][0-9]*\), runtime through.*/\1/p' | sort -u
}

# session_procs SID...: the live processes (zombies aside) in those sessions,
# one "PID SID COMMAND" a line.  An agent starts each orted in a session of
# its own, and what orted starts stays in it.
session_procs() {
	local want=" $* " pid sid stat args
	[[ $# -gt 0 ]] || return 0
	ps -eo pid=,sid=,stat=,args= | while read -r pid sid stat args; do
		[[ $stat == Z* ]] && continue
		[[ $want == *" $sid "* ]] && echo "$pid $sid $args"
	done
	return 0
}

# job_gone TAG: nothing is left of the orteds of part TAG and their processes.
# shellcheck disable=SC2046 # one word per pid
job_gone() { [[ -z $(session_procs $(orted_pids "$1")) ]]; }

# running PROGRAM: a live process of this part's job (QCG_JOB=$QCG_JOB in its
# environment: other tests may run the same programs) whose command line
# starts with PROGRAM.
running() {
	local pid args
	while read -r pid args; do
		[[ $args == "$1"* ]] || continue
		tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxF "QCG_JOB=$QCG_JOB" && return 0
	done < <(ps -eo pid=,stat=,args= | awk '$2 !~ /^Z/ { pid = $1; $1 = $2 = ""; sub(/^ +/, ""); print pid, $0 }')
	return 1
}

# forget PID: a process the test waited for is no longer its to end.
forget() { unset "launch_pids[$1]"; }

# agent TAG NODE [OPTION...]: qcg-agent of job $QCG_JOB for NODE, log
# agent-TAG-NODE.log, pid in agent_pid[NODE]; returns once it is ready (1 if
# it did not come up).  With no_env_secret set, QCG_JOB_SECRET is not in its
# environment.  QCG_TEST_NODE=NODE is in it: a variable of ours the agent does
# not set, which must reach the ranks as it is.  Each node has a TMPDIR of
# its own, as real nodes have a /tmp of their own: two orteds of one job on
# one host would share their session directory (ompi.HOST.UID/jf.N), where
# each writes the hwloc topology and PMIx's store; written by both at once,
# orted crashes.
agent() {
	local tag=$1 node=$2 log unset=() own_host=()
	shift 2
	# PRRTE names a node by its daemon's host name, not by the host list's:
	# each agent gets a host name of its own, as each real node has (root).
	if [[ $daemon == prted ]]; then
		own_host=(unshare --uts sh -c 'hostname "$1" && shift && exec "$@"' sh "$node")
	fi
	log=$work/agent-$tag-$node.log
	mkdir -p "$work/tmp-$node"
	[[ -z ${no_env_secret:-} ]] || unset=(-u QCG_JOB_SECRET)
	env "${unset[@]}" TMPDIR="$work/tmp-$node" QCG_TEST_NODE="$node" "${own_host[@]}" \
		"$qcg_agent" --node "$node" "${root_opt[@]}" "$@" >>"$log" 2>&1 &
	agent_pid[$node]=$!
	launch_pids[$!]=1
	wait_for "the agent of $node ($tag)" 100 grep -q "ready: agent of job $QCG_JOB for node $node" "$log"
}

# agents TAG NODE...: an agent of part TAG for each NODE, or the test ends.
agents() {
	local tag=$1 node
	shift
	for node in "$@"; do
		agent "$tag" "$node" || { fail "the agent of $node for part $tag comes up"; exit 1; }
	done
}

# agents_exit TAG TRIES WHY NODE...: each NODE's agent of part TAG exits 0 by
# itself within TRIES tenths of a second, its log saying "stopping: WHY".
agents_exit() {
	local tag=$1 tries=$2 why=$3 node ok=0
	shift 3
	for node in "$@"; do
		wait_exit "${agent_pid[$node]}" "$tries" || ok=1
		[[ $rc -eq 124 ]] || forget "${agent_pid[$node]}"
		if [[ $rc -ne 0 ]] || ! grep -q "stopping: $why" "$work/agent-$tag-$node.log"; then
			echo "(the agent of $node: exit $rc)" >>"$out"
			ok=1
		fi
	done
	return $ok
}

# agents_stop TAG NODE...: SIGTERM to the agents of part TAG; each must end
# with 0, saying so.
agents_stop() {
	local tag=$1 node
	shift
	for node in "$@"; do kill "${agent_pid[$node]}" 2>/dev/null || true; done
	agents_exit "$tag" 100 SIGTERM "$@"
}

# part TAG: a new job for the next part (QCG_JOB=$base-TAG).
part() { export QCG_JOB=$base-$1; }

# mpirun_job SECONDS HOSTS [OPTION...] PROGRAM [ARGS...]: qcg-mpirun bounded
# by SECONDS; output in $out, status in $rc, time taken in $elapsed (ms).
# The ranks (instrumented under the sanitizer build) do not check for leaks:
# Open MPI leaves much allocated at exit.  The agents and launchers do.
mpirun_job() {
	local secs=$1 hosts=$2 t0
	shift 2
	t0=$(ms)
	rc=0
	timeout -k 5 "$secs" "$qcg_mpirun" --host-list "$hosts" --allow-run-as-root --bind-to none \
		--mca mca_base_component_path "$component_path" \
		-x "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "$@" >"$out" 2>&1 || rc=$?
	elapsed=$(($(ms) - t0))
}

# Ends the agents and mpiruns first (an agent ends its orteds' sessions,
# SIGKILL after its grace), then whatever is still in those sessions, then
# the grid (grid_cleanup).
launch_cleanup() {
	local p
	for p in "${!launch_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${!launch_pids[@]}"; do
		wait_exit "$p" 60 || kill -KILL "$p" 2>/dev/null || true
	done
	# shellcheck disable=SC2046 # one word per pid
	session_procs $(orted_pids) | while read -r p _; do kill -KILL "$p" 2>/dev/null || true; done
	grid_cleanup
}
trap launch_cleanup EXIT

# --- the grid -------------------------------------------------------------
grid_one_node $port_b $port_f $low-$high
export QCG_HELPER_SOCKET=$work/helper.sock
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
printf 'a1 slots=1\na2 slots=1\n' >"$work/hosts"
printf 'a1 slots=1\na3 slots=1\n' >"$work/hosts-a3"

# --- a new job ------------------------------------------------------------------
"$qcg_mpirun" --new-job >"$out" 2>&1 || true
if grep -qE '^export QCG_JOB=[A-Za-z0-9][A-Za-z0-9._-]{0,36}$' "$out" &&
	grep -qE '^export QCG_JOB_SECRET=[0-9a-f]{64}$' "$out" && [[ $(wc -l <"$out") -eq 2 ]]; then
	pass "qcg-mpirun --new-job: 'export QCG_JOB=...' and 'export QCG_JOB_SECRET=...'"
else fail "qcg-mpirun --new-job: 'export QCG_JOB=...' and 'export QCG_JOB_SECRET=...'"; fi
eval "$(cat "$out")"
# Each part's job is $base-TAG (a fresh job id) with the one secret.
base=${QCG_JOB:0:36}
secret=$QCG_JOB_SECRET
[[ -n $base && -n $secret ]] || { echo "no job from qcg-mpirun --new-job"; exit 1; }

# --- a: what the agent refuses ------------------------------------------------------
part a
# refused AGENT_ARGS...: runs an agent that must refuse; its exit status in $rc, output in $out.
refused() {
	rc=0
	timeout -k 5 10 "$qcg_agent" --node a1 "$@" >"$out" 2>&1 || rc=$?
}
if [[ $(id -u) -eq 0 ]]; then
	refused
	if [[ $rc -eq 2 && $(wc -l <"$out") -eq 1 ]] && grep -q "^qcg-agent: refusing to run as root: " "$out"; then
		pass "as root without --allow-root: the agent refuses (exit 2, one line why)"
	else echo "(exit $rc)" >>"$out"; fail "as root without --allow-root: the agent refuses (exit 2, one line why)"; fi
fi
env -u QCG_JOB_SECRET "$qcg_agent" --node a1 "${root_opt[@]}" >"$out" 2>&1 && rc=0 || rc=$?
if [[ $rc -eq 2 ]] && grep -q "^qcg-agent: no job secret: set QCG_JOB_SECRET or --secret-file$" "$out"; then
	pass "no job secret: the agent refuses (exit 2, 'no job secret')"
else echo "(exit $rc)" >>"$out"; fail "no job secret: the agent refuses (exit 2, 'no job secret')"; fi
QCG_JOB_SECRET=0123456789abcdef "$qcg_agent" --node a1 "${root_opt[@]}" >"$out" 2>&1 && rc=0 || rc=$?
if [[ $rc -eq 2 ]] && grep -q "^qcg-agent: the job secret is too weak (about 64 bits, at least 128 needed); make one with: openssl rand -hex 32$" "$out"; then
	pass "a 64-bit secret: the agent refuses (exit 2, saying how to make one)"
else echo "(exit $rc)" >>"$out"; fail "a 64-bit secret: the agent refuses (exit 2, saying how to make one)"; fi
QCG_JOB='j/../x' refused "${root_opt[@]}"
if [[ $rc -eq 2 ]] && grep -q "^qcg-agent: job 'j/../x' is not 1..40 characters of" "$out"; then
	pass "an invalid job id: the agent refuses (exit 2, naming it)"
else echo "(exit $rc)" >>"$out"; fail "an invalid job id: the agent refuses (exit 2, naming it)"; fi
QCG_JOB=$(printf 'j%.0s' {1..41}) refused "${root_opt[@]}"
if [[ $rc -eq 2 ]] && grep -q "is not 1..40 characters" "$out"; then
	pass "a job id of 41 characters: the agent refuses (exit 2)"
else echo "(exit $rc)" >>"$out"; fail "a job id of 41 characters: the agent refuses (exit 2)"; fi
printf '%s\n' "$secret" >"$work/secret"
chmod 0644 "$work/secret"
env -u QCG_JOB_SECRET "$qcg_agent" --node a1 "${root_opt[@]}" --secret-file "$work/secret" \
	>"$out" 2>&1 && rc=0 || rc=$?
if [[ $rc -eq 2 ]] && grep -q "^qcg-agent: secret-file .*: must be a regular file of yours, mode 0600 or stricter (it is 0644)$" "$out"; then
	pass "a --secret-file of mode 0644: the agent refuses (exit 2, saying the mode)"
else echo "(exit $rc)" >>"$out"; fail "a --secret-file of mode 0644: the agent refuses (exit 2, saying the mode)"; fi
chmod 0600 "$work/secret"
# qcg-launch's bound in words or with a unit: refused, not read as 10 (or 0).
rc=0
QCG_LAUNCH_TIMEOUT=10s "$qcg_launch" a1 orted -mca orte_hnp_uri '"1.0;tcp://127.0.0.1:9"' \
	>"$out" 2>&1 || rc=$?
if [[ $rc -eq 255 ]] && grep -q "^qcg-launch: a1: --timeout (or QCG_LAUNCH_TIMEOUT) must be 1..3600 seconds, not '10s'$" "$out"; then
	pass "QCG_LAUNCH_TIMEOUT=10s: qcg-launch refuses it, naming the value"
else echo "(exit $rc)" >>"$out"; fail "QCG_LAUNCH_TIMEOUT=10s: qcg-launch refuses it, naming the value"; fi

# --- b: a job on two agents ---------------------------------------------------------------
# a1 reads the secret from its 0600 file (and passes it on to its orted's ranks), a2 from
# the environment; a second agent of the job for a1 finds the first one.
part b
if no_env_secret=1 agent b a1 --secret-file "$work/secret" && agent b a2; then
	pass "two agents of one job, a1 (--secret-file 0600) and a2 (QCG_JOB_SECRET), ready"
else fail "two agents of one job, a1 (--secret-file 0600) and a2 (QCG_JOB_SECRET), ready"; exit 1; fi
rc=0
timeout -k 5 20 "$qcg_agent" --node a1 "${root_opt[@]}" >"$out" 2>&1 || rc=$?
if [[ $rc -eq 1 ]] && grep -q "^qcg-agent: an agent of job $QCG_JOB for node a1 is already running" "$out" &&
	kill -0 "${agent_pid[a1]}"; then
	pass "a second agent for the same job and node: exit 1, 'already running' (the first one stays)"
else echo "(exit $rc)" >>"$out"; fail "a second agent for the same job and node: exit 1, 'already running'"; fi

mpirun_job 120 "$work/hosts" -np 2 --mca btl_qcg_verbose 1 "$progs/qcg-mpi-pairs"
if [[ $rc -eq 0 ]] && grep -q "^PASS pairs: 2 ranks" "$out"; then
	pass "qcg-mpirun pairs on a1 and a2 ($elapsed ms): $(grep "^PASS" "$out" | cut -c1-80)"
else echo "(exit $rc)" >>"$out"; fail "qcg-mpirun pairs on a1 and a2"; fi
# Each rank's own output comes back through its launch, one line per end of
# the connection; the end that connected names its peer's node (rank 0 runs
# on a1, rank 1 on a2; whichever rank connects first, the other accepts and
# may not know its peer's node yet: "unknown").
if grep -qE 'btl_qcg: rank 0 (->|<-) rank 1 \(host (a2|unknown)\): direct' "$out" &&
	grep -qE 'btl_qcg: rank 1 (->|<-) rank 0 \(host (a1|unknown)\): direct' "$out" &&
	grep -qE 'btl_qcg: rank (0 -> rank 1 \(host a2|1 -> rank 0 \(host a1)\): direct' "$out"; then
	pass "both ranks' output arrives (rank 0 on a1, rank 1 on a2, connected direct)"
else fail "both ranks' output arrives (rank 0 on a1, rank 1 on a2, connected direct)"; fi
if agents_exit b 100 "the last launch ended" a1 a2; then
	pass "both agents exit 0 by themselves: 'the last launch ended'"
else fail "both agents exit 0 by themselves: 'the last launch ended'"; fi
if [[ $(orted_pids b | wc -l) -eq 2 ]] && wait_for "the orteds of part b to end" 50 job_gone b &&
	! running "$progs/qcg-mpi-pairs" && ! running "$qcg_launch"; then
	pass "no orted, rank or qcg-launch of the job is left"
else
	# shellcheck disable=SC2046
	session_procs $(orted_pids b) >>"$out"
	fail "no orted, rank or qcg-launch of the job is left"
fi

# --- b2: the ranks' environment ------------------------------------------------------------
# It is their agent's: the job id the agent set, and the agent's own variables.
part b2
agents b2 a1 a2
# shellcheck disable=SC2016 # for the ranks' shell
mpirun_job 60 "$work/hosts" -np 2 sh -c 'echo "env of rank $OMPI_COMM_WORLD_RANK: QCG_JOB=$QCG_JOB QCG_TEST_NODE=$QCG_TEST_NODE"'
if [[ $rc -eq 0 ]] && grep -qx "env of rank 0: QCG_JOB=$QCG_JOB QCG_TEST_NODE=a1" "$out" &&
	grep -qx "env of rank 1: QCG_JOB=$QCG_JOB QCG_TEST_NODE=a2" "$out"; then
	pass "each rank has its agent's environment: QCG_JOB of the job, QCG_TEST_NODE of its node"
else echo "(exit $rc)" >>"$out"; fail "each rank has its agent's environment: QCG_JOB of the job, QCG_TEST_NODE of its node"; fi
agents_exit b2 100 "the last launch ended" a1 a2 || fail "after the job of part b2 both agents exit 0"

# --- b3: the ranks' colours (libqcgcolour) -------------------------------------------------
# Each rank's site is its agent's cluster as the grid declared it (c1), its node
# the agent's node; the job's lists come from the host list's site= through
# qcg-mpirun.  A host list whose site= is not the grid's leaves the ranks
# without an integer, saying why, rather than giving a wrong one.
part b3
printf 'a1 slots=1 site=c1\na2 site=c1 slots=1\n' >"$work/hosts-sites"
agents b3 a1 a2
mpirun_job 60 "$work/hosts-sites" -np 2 "$progs/qcg-mpi-colours" --expect-sites 1
if [[ $rc -eq 0 ]] && grep -q "^PASS colours: 2 ranks, 1 sites, 2 nodes, 0 errors" "$out" &&
	grep -qx "colour 0 c1 a1" "$out" && grep -qx "colour 1 c1 a2" "$out"; then
	pass "each rank's colours: site c1 (the grid's), node a1/a2 (its agent's), 1 site, 2 nodes"
else echo "(exit $rc)" >>"$out"; fail "each rank's colours: site c1 (the grid's), node a1/a2 (its agent's)"; fi
agents_exit b3 100 "the last launch ended" a1 a2 || fail "after the job of part b3 both agents exit 0"
part b4
printf 'a1 site=elsewhere\na2 site=elsewhere\n' >"$work/hosts-wrong-site"
agents b4 a1 a2
mpirun_job 60 "$work/hosts-wrong-site" -np 2 "$progs/qcg-mpi-colours"
if [[ $rc -ne 0 ]] && grep -q "^colour site: the colour is not among the job's" "$out"; then
	pass "a host list naming another site than the grid's: the ranks get no integer and say why"
else echo "(exit $rc)" >>"$out"; fail "a host list naming another site than the grid's: the ranks say why"; fi
agents_exit b4 100 "the last launch ended" a1 a2 || fail "after the job of part b4 both agents exit 0"
printf 'a1 site=c1\na2\n' >"$work/hosts-half"
mpirun_job 10 "$work/hosts-half" -np 2 "$progs/qcg-mpi-colours"
if [[ $rc -eq 2 ]] && grep -qx "qcg-mpirun: $work/hosts-half: site=NAME on 1 of 2 lines: give every node's site, or none" "$out"; then
	pass "site= on some lines only: qcg-mpirun refuses (exit 2, one line)"
else echo "(exit $rc)" >>"$out"; fail "site= on some lines only: qcg-mpirun refuses (exit 2, one line)"; fi

# --- c: a rank fails ------------------------------------------------------------------------
part c
agents c a1 a2
mpirun_job 60 "$work/hosts" -np 2 sh -c 'exit 3'
if [[ $rc -eq 3 ]]; then
	pass "ranks exiting 3: qcg-mpirun exits 3 ($elapsed ms)"
else echo "(exit $rc)" >>"$out"; fail "ranks exiting 3: qcg-mpirun exits 3"; fi
if agents_exit c 100 "the last launch ended" a1 a2 && wait_for "the orteds of part c to end" 50 job_gone c; then
	pass "after the failed job both agents exit 0 and nothing of the job is left"
else fail "after the failed job both agents exit 0 and nothing of the job is left"; fi

# --- c2: ranks that end at once ---------------------------------------------------------------
# Sixteen ranks that exit as soon as they start, five jobs in a row: every
# mpirun ends.  PRRTE 3.0 forking on launch threads lost such a rank (its
# exit reaped before its pid was recorded) in 8 of 10 jobs like these, and
# mpirun then waited for it forever.
printf 'a1 slots=8\na2 slots=8\n' >"$work/hosts-8"
ended=0
for try in 1 2 3 4 5; do
	part "c2$try"
	agents "c2$try" a1 a2
	mpirun_job 30 "$work/hosts-8" -np 16 true
	[[ $rc -eq 0 ]] || break
	agents_exit "c2$try" 100 "the last launch ended" a1 a2 || break
	ended=$try
done
if [[ $ended -eq 5 ]]; then
	pass "16 ranks ending at once, 5 jobs: every mpirun exits 0"
else echo "(job $try: exit $rc)" >>"$out"; fail "16 ranks ending at once, 5 jobs: every mpirun exits 0"; fi

# --- d: a node without an agent ---------------------------------------------------------------
# a3 has no agent: its launch fails after --launch-timeout 3 naming it, and
# mpirun gives up; a1's launch, which had started, is ended with it.
part d
agents d a1
mpirun_job 60 "$work/hosts-a3" --launch-timeout 3 -np 2 hostname
if [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] && ((elapsed < 15000)) &&
	grep -q "^qcg-launch: a3: no qcg-agent of job $QCG_JOB answered within 3 s" "$out"; then
	pass "a node without an agent: qcg-mpirun fails in $elapsed ms, 'qcg-launch: a3: no qcg-agent ... within 3 s'"
else echo "(exit $rc after $elapsed ms)" >>"$out"; fail "a node without an agent: qcg-mpirun fails within the launch timeout naming a3"; fi
if agents_exit d 100 "the last launch ended" a1 && wait_for "the orteds of part d to end" 50 job_gone d; then
	pass "a1's launch is ended with the job: its agent exits 0, no orted left"
else fail "a1's launch is ended with the job: its agent exits 0, no orted left"; fi

# --- e: a wrong secret --------------------------------------------------------------------------
# The agents' job ids are bound to the secret they were started with: a
# launcher with another one is refused by the grid before reaching them.
part e
agents e a1 a2
QCG_JOB_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n') mpirun_job 60 "$work/hosts" -np 2 hostname
if [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] && ((elapsed < 15000)) &&
	grep -qE "^qcg-launch: a[12]: .*wrong secret for job $QCG_JOB\.a\.a[12]" "$out"; then
	pass "a wrong secret: qcg-mpirun fails in $elapsed ms: $(grep -a -m1 -oE "^qcg-launch: a[12]: [^:]*" "$out")"
else echo "(exit $rc after $elapsed ms)" >>"$out"; fail "a wrong secret: qcg-mpirun fails naming the node and the wrong secret"; fi
if kill -0 "${agent_pid[a1]}" && kill -0 "${agent_pid[a2]}" && ! grep -q "connection from rank" "$work"/agent-e-*.log; then
	pass "a wrong secret reaches no agent: both still wait for a launch"
else fail "a wrong secret reaches no agent: both still wait for a launch"; fi

# --- f: a wrong job --------------------------------------------------------------------------
# The agents of part e still run; a launcher of another job finds none.
rc=0
t0=$(ms)
QCG_JOB=$base-other timeout -k 5 30 "$qcg_launch" --timeout 2 a1 orted -mca orte_hnp_uri \
	'"1.0;tcp://127.0.0.1:9"' >"$out" 2>&1 || rc=$?
elapsed=$(($(ms) - t0))
if [[ $rc -eq 255 ]] && ((elapsed < 10000)) && [[ $(wc -l <"$out") -eq 1 ]] &&
	grep -q "^qcg-launch: a1: no qcg-agent of job $base-other answered within 2 s" "$out"; then
	pass "a wrong job: qcg-launch exits 255 in $elapsed ms, one line 'qcg-launch: a1: no qcg-agent of job ...'"
else echo "(exit $rc after $elapsed ms)" >>"$out"; fail "a wrong job: qcg-launch exits 255 naming the host"; fi
if agents_stop e a1 a2; then
	pass "SIGTERM: the waiting agents exit 0 ('stopping: SIGTERM')"
else fail "SIGTERM: the waiting agents exit 0 ('stopping: SIGTERM')"; fi

# --- g: only orted -------------------------------------------------------------------------------
# A holder of the secret asks for another program: refused, and a refused
# launch is no launch: a1 (--persist) and a2 (without) both serve the job
# that follows; then a2 exits as its launch ended, a1 stays until SIGTERM.
part g
agent g a1 --persist || { fail "the agent of a1 (--persist) for part g comes up"; exit 1; }
agents g a2
ok=0
for node in a1 a2; do
	rc=0
	timeout -k 5 30 "$qcg_launch" --timeout 10 "$node" /bin/id -mca orte_hnp_uri '"1.0;tcp://127.0.0.1:9"' \
		>"$out" 2>&1 || rc=$?
	if [[ $rc -ne 255 ]] || ! grep -q "^qcg-launch: $node: the agent refused the launch: only orted or prted can be launched, not '/bin/id'$" "$out" ||
		! grep -q "refused: only orted or prted can be launched, not '/bin/id'" "$work/agent-g-$node.log"; then
		echo "($node: exit $rc)" >>"$out"
		ok=1
	fi
done
if ((ok == 0)); then
	pass "qcg-launch A /bin/id ...: exit 255, 'the agent refused the launch: only orted or prted can be launched'; the agent logs it"
else fail "qcg-launch A /bin/id ...: exit 255, 'the agent refused the launch: only orted or prted can be launched'"; fi
rc=0
timeout -k 5 30 "$qcg_launch" a1 orted -mca orte_hnp_uri '"1.0;tcp://127.0.0.1:9"' ';' id >"$out" 2>&1 || rc=$?
if [[ $rc -eq 255 ]] && grep -q "^qcg-launch: a1: cannot run the command without a shell: argument 5: ';' would need a shell" "$out"; then
	pass "a command needing a shell: qcg-launch exits 255 before connecting"
else echo "(exit $rc)" >>"$out"; fail "a command needing a shell: qcg-launch exits 255 before connecting"; fi
# The refusals must not have ended either agent: a job runs on both.
mpirun_job 120 "$work/hosts" -np 2 "$progs/qcg-mpi-pairs"
if [[ $rc -eq 0 ]] && grep -q "^PASS pairs: 2 ranks" "$out" && kill -0 "${agent_pid[a1]}"; then
	pass "after the refusals both agents serve a job (pairs passes)"
else echo "(exit $rc)" >>"$out"; fail "after the refusals both agents serve a job (pairs passes)"; fi
if agents_exit g 100 "the last launch ended" a2 && kill -0 "${agent_pid[a1]}" &&
	agents_stop g a1 && wait_for "the orteds of part g to end" 50 job_gone g; then
	pass "then a2 exits 0 by itself, a1 (--persist) keeps running until SIGTERM (exit 0)"
else fail "then a2 exits 0 by itself, a1 (--persist) keeps running until SIGTERM (exit 0)"; fi

# --- h: MPI_Abort, and mpirun interrupted ---------------------------------------------------------
part h
agents h a1 a2
mpirun_job 60 "$work/hosts" -np 2 "$progs/qcg-mpi-abort" 7
# (The ranks' own lines may be lost with them: the abort races their output.)
if [[ $rc -eq 7 ]] && ((elapsed < 30000)) && grep -q "MPI_ABORT was invoked on rank 1" "$out"; then
	pass "MPI_Abort(7) on rank 1 while rank 0 waits: qcg-mpirun exits 7 in $elapsed ms"
else echo "(exit $rc after $elapsed ms)" >>"$out"; fail "MPI_Abort(7) on rank 1 while rank 0 waits: qcg-mpirun exits 7"; fi
if agents_exit h 100 "the last launch ended" a1 a2 && wait_for "the orteds of part h to end" 50 job_gone h &&
	! running "$progs/qcg-mpi-abort" && ! running "$qcg_launch"; then
	pass "after MPI_Abort no orted, rank or qcg-launch is left and both agents exit 0"
else fail "after MPI_Abort no orted, rank or qcg-launch is left and both agents exit 0"; fi

# interrupted TAG SIGNAL WHOM: a job of `sleep 60` on a1 and a2 (agents of
# part TAG), and once both ranks run, SIGNAL to WHOM: "qcg-mpirun" (what a
# terminal's Ctrl-C reaches: qcg-mpirun passes it on to mpirun, which runs in a
# session of its own) or "mpirun" itself.  qcg-mpirun must end within 15 s,
# not 0, and leave nothing: no orted, rank or qcg-launch, both agents gone.
# A background command of a script starts with SIGINT ignored, and a shell
# cannot trap a signal it started with ignored: qcg-mpirun gets SIGINT's
# default back (env --default-signal), as under a terminal.
interrupted() {
	local tag=$1 sig=$2 whom=$3 qpid target what launchers
	what="SIG$sig to $whom with 2 ranks running"
	part "$tag"
	agents "$tag" a1 a2
	# shellcheck disable=SC2046
	sleep_ranks() { session_procs $(orted_pids "$tag") | grep -c ' sleep 60$' || true; }
	two_sleeping() { [[ $(sleep_ranks) -eq 2 ]]; }
	"${default_int[@]}" "$qcg_mpirun" --host-list "$work/hosts" --allow-run-as-root --bind-to none \
		-np 2 sleep 60 >"$out" 2>&1 &
	qpid=$!
	launch_pids[$qpid]=1
	if ! wait_for "both ranks of part $tag sleeping" 300 two_sleeping; then
		echo "($(sleep_ranks) ranks sleeping)" >>"$out"
		fail "$what: both ranks were running first"
	else
		# The check that none is left afterwards sees them now.
		launchers=no
		if running "$qcg_launch"; then launchers=yes; fi
		target=$qpid
		if [[ $whom == mpirun ]]; then
			# qcg-mpirun's child, or grandchild when setsid had to fork
			# (Open MPI 5's mpirun is prterun once started).
			target=$(pgrep -P "$qpid" -x 'mpirun|prterun' ||
				for c in $(pgrep -P "$qpid"); do pgrep -P "$c" -x 'mpirun|prterun'; done || true)
		fi
		t0=$(ms)
		kill -"$sig" "${target:-$qpid}"
		wait_exit "$qpid" 150 || true
		elapsed=$(($(ms) - t0))
		[[ $rc -eq 124 ]] || forget "$qpid"
		if [[ -n $target && $launchers == yes && $rc -ne 0 && $rc -ne 124 ]]; then
			pass "$what: qcg-mpirun exits ($rc) in $elapsed ms"
		else
			echo "(mpirun ${target:-not found}, launchers seen: $launchers: exit $rc after $elapsed ms)" >>"$out"
			fail "$what: qcg-mpirun exits within 15 s"
		fi
	fi
	if agents_exit "$tag" 100 "the last launch ended" a1 a2 &&
		wait_for "the orteds of part $tag to end" 50 job_gone "$tag" && ! running "$qcg_launch"; then
		pass "after SIG$sig to $whom no orted, no 'sleep 60' and no qcg-launch is left; both agents exit 0"
	else
		# shellcheck disable=SC2046
		session_procs $(orted_pids "$tag") >>"$out"
		fail "after SIG$sig to $whom no orted, no 'sleep 60' and no qcg-launch is left; both agents exit 0"
	fi
}
default_int=(env --default-signal=INT)
"${default_int[@]}" true 2>/dev/null || default_int=()
if ((${#default_int[@]} > 0)); then
	interrupted h2 INT qcg-mpirun
else
	echo "env --default-signal is missing: SIGINT goes to mpirun itself"
	interrupted h2 INT mpirun
fi
# mpirun killed (OOM, a scheduler): its launchers go, and with them the launches.
interrupted h3 KILL mpirun

echo "passed $passed, failed $failed"
((failed == 0))
