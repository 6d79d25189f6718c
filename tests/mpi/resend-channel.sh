# shellcheck shell=bash disable=SC2154,SC2034 # build, port_*, low, high, name: from the sourcing script.
# tests/mpi/resend-channel.sh: what mpi-stall and mpi-suspend share (sourced
# after tests/lib/loopback-grid.sh, with build, port_b, port_f, low, high
# and name set): the programs checked (77 when missing), one cluster of one
# node on loopback, the job's identity in the environment, and
# start_resend MCA_ARGS...: a 2-rank qcg-mpi-resend over btl self,qcg
# (verbose 1) in the background, its output in $out, its mpirun in $job,
# ended by touching $stop.  rounds, more_rounds N, channel, one_channel
# read it.

btl=$build/btl_qcg/mca_btl_qcg.so
progs=$build/tests/mpi

need_commands mpirun ompi_info ss iptables
for f in "$helper" "$frontend" "$broker" "$certs" "$btl" "$progs/qcg-mpi-resend"; do
	[[ -e $f ]] || { echo "$f not built: skipping"; exit 77; }
done
ompi_dir=$(ompi_info --path pkglibdir 2>/dev/null | sed -n 's/.*Pkglibdir: *//p')
component_path=$build/btl_qcg${ompi_dir:+:$ompi_dir}

grid_workdir "qcg-$name"
grid_one_node "$port_b" "$port_f" "$low-$high"

export QCG_HELPER_SOCKET=$work/helper.sock
QCG_JOB=$name-$(od -An -tx1 -N8 /dev/urandom | tr -d ' \n')
QCG_JOB_SECRET=$TEST_SECRET
export QCG_JOB QCG_JOB_SECRET
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI 5's mpirun hands the component path to PMIx as well, which then
# names every file there that is not a PMIx component ("bad prefix"); none
# of that is ours to check (Open MPI 4.1 does not pass it on).
export PMIX_MCA_mca_base_component_show_load_errors=none
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0

# rounds: how many "round N" lines rank 0 printed (one a second at most, each
# saying the pair carried data both ways since the last).
rounds() { grep -c '^round ' "$out" || true; }
more_rounds() { (($(rounds) > $1)); }
# The channel: the one established connection whose local port is a rank's
# listening port (the acceptor's end); prints "ACCEPTOR_PORT INITIATOR_PORT".
channel() {
	ss -Htn state established "( sport >= :$low and sport <= :$high )" |
		awk '{n = split($3, l, ":"); m = split($4, p, ":"); print l[n], p[m]}'
}
one_channel() { [[ $(channel | wc -l) -eq 1 ]]; }

stop=$work/stop
start_resend() {
	timeout -k 5 240 mpirun --oversubscribe -np 2 --bind-to none \
		--mca mca_base_component_path "$component_path" --mca pml ob1 --mca btl self,qcg \
		--mca mpi_yield_when_idle 1 --mca btl_qcg_verbose 1 "$@" \
		-x QCG_JOB -x QCG_JOB_SECRET -x QCG_HELPER_SOCKET -x ASAN_OPTIONS \
		"$progs/qcg-mpi-resend" 1000000 -1 "$stop" >"$out" 2>&1 &
	job=$!
	pids+=("$job")
}
