# shellcheck shell=bash
# qcg-lab mpirun (sourced by qcg-lab, after the plan and services.sh): an Open MPI
# job on the compute nodes of some sites, over btl_qcg.
#
#   qcg-lab mpirun [--sites LIST] [--ppn K] [--tcp] -- PROGRAM [ARGS...]
#
#   broker 203.0.113.10: mpirun --hostfile (node addresses) --mca plm_rsh_agent AGENT
#       | AGENT HOST orted ... = qcg-lab _agent HOST orted ...
#       v   -> ip netns exec qcg-<node> unshare --uts: hostname <node>,
#              QCG_HELPER_SOCKET=<node's helper>, QCG_LAB_NODE=<node>, then orted
#   orted on <site>1, <site>2 --(outbound, routed direct)--> mpirun
#   ranks: site by site, node 1 before node 2, K per node (rank 0 on the first
#          node of the first site); btl self,vader,qcg (--tcp: self,vader,tcp)
#
# mpirun runs in the broker's namespace: every site reaches it outbound, NATs
# included.  Each run gets a fresh job secret (-x QCG_JOB_SECRET; the job id is
# Open MPI's).  $QCG_MPIRUN_ARGS adds mpirun options (split on spaces).  The exit
# status is mpirun's.

MPI_SITES_DEFAULT="open fw nata natb sym"
# Where orteds and btl_tcp talk: every lab host has one interface, qcg-eth0.
MPI_IF=qcg-eth0

mpirun_usage() {
	cat <<-EOF
		usage: $PROG mpirun [--sites LIST] [--ppn K] [--tcp] -- PROGRAM [ARGS...]
		  --sites LIST  comma-separated sites whose nodes <site>1, <site>2 run ranks
		                (default: ${MPI_SITES_DEFAULT// /,})
		  --ppn K       ranks per node (default 1)
		  --tcp         btl self,vader,tcp instead of self,vader,qcg (the baseline,
		                which fails across NATs)
		  PROGRAM       runs as given (an absolute path: every node shares the files)
		  \$QCG_MPIRUN_ARGS  extra mpirun options, e.g. "--mca btl_qcg_verbose 1"
	EOF
}

cmd_mpirun() {
	local sites=$MPI_SITES_DEFAULT ppn=1 tcp=no s node nodes=() btls dir np rc=0
	local ompi_dir cpath secret extra=()
	while [ $# -gt 0 ]; do
		case $1 in
		--sites) [ $# -ge 2 ] || die "--sites wants a list, e.g. --sites nata,open"
			sites=${2//,/ }; shift 2 ;;
		--ppn) [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]?$ ]] || die "--ppn wants 1..99"
			ppn=$2; shift 2 ;;
		--tcp) tcp=yes; shift ;;
		--) shift; break ;;
		-h | --help) mpirun_usage; return 0 ;;
		*) die "mpirun: unknown argument '$1' (the program goes after --)" ;;
		esac
	done
	[ $# -ge 1 ] || { mpirun_usage >&2; die "mpirun: no program given"; }
	need_root
	need_tools mpirun ompi_info unshare
	grep -qx 'SERVICES=yes' "$STATE/config" 2>/dev/null ||
		die "the lab is not up with its services ($PROG up)"
	for s in $sites; do
		[ -n "${SITE_KIND[$s]:-}" ] || die "mpirun: unknown site '$s' (sites: ${SITES[*]})"
		nodes+=("${s}1" "${s}2")
	done
	[ ${#nodes[@]} -gt 0 ] || die "mpirun: --sites is empty"
	if [ "$tcp" = yes ]; then
		btls=self,vader,tcp
	else
		btls=self,vader,qcg
		[ -e "$BUILD_DIR/btl_qcg/mca_btl_qcg.so" ] ||
			die "not built: $BUILD_DIR/btl_qcg/mca_btl_qcg.so (needs libopenmpi-dev), or use --tcp"
	fi
	ompi_dir=$(ompi_info --path pkglibdir 2>/dev/null | sed -n 's/.*Pkglibdir: *//p')
	cpath=$BUILD_DIR/btl_qcg${ompi_dir:+:$ompi_dir}
	secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
	# shellcheck disable=SC2206 # split on purpose: a list of options
	[ -z "${QCG_MPIRUN_ARGS:-}" ] || extra=($QCG_MPIRUN_ARGS)

	mkdir -p "$STATE"
	dir=$(mktemp -d "$STATE/mpirun.XXXXXX")
	for node in "${nodes[@]}"; do echo "${NODE_IP[$node]} slots=$ppn"; done >"$dir/hosts"
	cat >"$dir/agent" <<-EOF
		#!/bin/sh
		# mpirun's launch agent: HOST CMD... -> CMD in the namespace of the node at HOST.
		QCG_BUILD_DIR='$BUILD_DIR' QCG_LAB_DIR='$STATE' exec '$LAB_SRC/qcg-lab' _agent "\$@"
	EOF
	chmod 755 "$dir/agent"
	np=$((${#nodes[@]} * ppn))
	say "mpirun: $np ranks on ${nodes[*]} ($ppn per node), btl $btls" >&2
	QCG_JOB_SECRET=$secret OMPI_MCA_mca_base_component_path=$cpath \
		ip netns exec "$(node_ns broker)" mpirun --allow-run-as-root -np "$np" \
		--hostfile "$dir/hosts" --map-by slot --bind-to none \
		--mca plm_rsh_agent "$dir/agent" --mca routed direct \
		--mca oob_tcp_if_include "$MPI_IF" --mca btl_tcp_if_include "$MPI_IF" \
		--mca pml ob1 --mca btl "$btls" --mca mpi_yield_when_idle 1 \
		--mca mca_base_component_path "$cpath" -x QCG_JOB_SECRET \
		"${extra[@]}" "$@" || rc=$?
	rm -rf "$dir"
	return "$rc"
}

# _agent HOST CMD...: what mpirun's launcher runs to start an orted on HOST (a
# compute node's address): CMD in that node's namespace, with its own host name,
# its helper's socket and its name in QCG_LAB_NODE.
cmd_agent() {
	local host=${1:-} node="" n
	[ $# -ge 2 ] || die "usage: $PROG _agent HOST CMD..."
	shift
	for n in $(compute_nodes); do
		[ "${NODE_IP[$n]}" = "$host" ] && node=$n
	done
	[ -n "$node" ] || die "_agent: $host is the address of no compute node"
	QCG_HELPER_SOCKET=$(helper_socket "$node")
	export QCG_HELPER_SOCKET QCG_LAB_NODE=$node
	exec ip netns exec "$(node_ns "$node")" unshare --uts /bin/sh -c "hostname $node && $*"
}
