#!/usr/bin/env bash
#
# packages-job.sh (run by test-trixie-packages.sh in the Debian 13 root, once
# the packages are installed): a 2-rank MPI job from the installed packages
# only, as a user runs one: the grid's daemons (/usr/sbin) on 127.0.0.1 with
# a throw-away CA (qcg-certs), two agents a1 and a2 (each a node: a host
# name of its own), qcg-mpirun starting prted through them, and the ranks
# talking over btl_qcg from Open MPI's own component directory.  Nothing in
# the environment says where a component is: qcg-mpirun finds both paths.
#
#   packages-job.sh SRC      SRC: the tree (tests/ and the MPI test program)
#   exit 0 passed, 1 failed
set -euo pipefail
export LC_ALL=C
src=$(cd "${1:?source dir}" && pwd)

# The installed programs stand in for a build's (tests/lib/loopback-grid.sh).
build=/nonexistent
fail_lines=40 log_lines=30
# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"
helper=/usr/sbin/qcg-helper frontend=/usr/sbin/qcg-frontend broker=/usr/sbin/qcg-broker
certs=/usr/bin/qcg-certs
need_built "$helper" "$frontend" "$broker" "$certs" /usr/bin/qcg-agent /usr/bin/qcg-mpirun
grid_workdir qcg-packages-job

agents=()
job_cleanup() {
	stop_pids ${agents[@]+"${agents[@]}"}
	grid_cleanup
}
trap job_cleanup EXIT

# The test program, built against the installed Open MPI.
mpicc -O2 -o "$work/pairs" "$src/tests/mpi/pairs.c" >"$out" 2>&1 || die "mpicc tests/mpi/pairs.c"

grid_one_node 18601 18602 18650-18699
export QCG_HELPER_SOCKET=$work/helper.sock
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
eval "$(qcg-mpirun --new-job)"
for node in a1 a2; do
	# PRRTE names a node by its daemon's host name; each agent's /tmp is its own.
	mkdir -p "$work/tmp-$node"
	TMPDIR=$work/tmp-$node unshare --uts sh -c 'hostname "$1" && shift && exec "$@"' sh "$node" \
		qcg-agent --node "$node" --allow-root >>"$work/agent-$node.log" 2>&1 &
	agents+=("$!")
	wait_for "the agent of $node" 100 grep -q "ready: agent of job $QCG_JOB for node $node" \
		"$work/agent-$node.log" || die "the agent of $node comes up" "$work/agent-$node.log"
done
printf 'a1 slots=1\na2 slots=1\n' >"$work/hosts"

env | grep -E '^(OMPI|PMIX)_MCA_' >"$out" && die "the environment names no component path" || true
qcg-mpirun --host-list "$work/hosts" --print-command -np 2 "$work/pairs" >"$out" 2>&1 || true
if grep -q " OMPI_MCA_mca_base_component_path=$(ompi_info --path pkglibdir --parsable 2>/dev/null |
	sed -n 's/^path:pkglibdir://p'):" "$out" && grep -q " PMIX_MCA_mca_base_component_path=/" "$out"; then
	pass "qcg-mpirun --print-command: both component paths, Open MPI's directory first"
else fail "qcg-mpirun --print-command: both component paths, Open MPI's directory first"; fi

rc=0
timeout -k 5 120 qcg-mpirun --host-list "$work/hosts" --bind-to none -np 2 \
	--mca btl_qcg_verbose 1 "$work/pairs" >"$out" 2>&1 || rc=$?
if [[ $rc -eq 0 ]] && grep -q "^PASS pairs: 2 ranks" "$out" &&
	grep -qE 'btl_qcg: rank [01] (->|<-) rank [01] .*: direct' "$out"; then
	pass "qcg-mpirun: 2 ranks on a1 and a2 over btl_qcg from the packages: $(grep "^PASS" "$out" | cut -c1-60)"
else
	echo "(exit $rc)" >>"$out"
	fail "qcg-mpirun: 2 ranks on a1 and a2 over btl_qcg from the packages"
fi
if grep -qE 'requested component was not found|has bad prefix' "$out"; then
	fail "no 'component was not found' nor 'has bad prefix' line"
fi
[[ $failed -eq 0 ]]
