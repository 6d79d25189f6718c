# shellcheck shell=bash
# qcg-lab mpirun (sourced by qcg-lab, after the plan and services.sh): an Open MPI
# job on the compute nodes of some sites, over btl_qcg, launched the way a user
# of a real grid launches it (launch/README.md):
#
#   qcg-lab mpirun [--sites LIST] [--ppn K] [--from NODE] [--tcp] [--netns-launch]
#                  -- PROGRAM [ARGS...]
#
#   every node of the job: qcg-agent, started as the lab's user (nobody) in the
#       node's namespace, as a user would start it on a node (by hand, srun...)
#   FROM (default nata1, behind a NAT): qcg-mpirun --host-list (node names)
#       | mpirun --mca plm_rsh_agent qcg-launch: qcg-launch NODE orted ...
#       |   --(qcg-connect: direct, reversed, holepunch, proxy...)--> NODE's agent
#       v                                                 runs orted (no shell)
#   orted's runtime connection: 127.0.0.1 on its node -> agent ~~ qcg-launch ->
#       mpirun's loopback port on FROM; nothing else crosses a site
#   ranks: site by site, node 1 before node 2, K per node (rank 0 on the first
#          node of the first site); btl self,vader,qcg (--tcp: self,vader,tcp;
#          --btl LIST: those)
#
# Each run is a job of its own (qcg-mpirun --new-job: a random id and secret,
# passed in the environment, never on a command line).  The agents end with
# their launch; any left (a node mpirun never reached) get SIGTERM.  The exit
# status is mpirun's.  $QCG_MPIRUN_ARGS adds mpirun options (split on spaces).
#
# --netns-launch is the old launcher, kept as the launch benchmark's baseline
# only: mpirun as root on the broker's host, every orted started with
# `ip netns exec` (which no real grid allows) and reaching mpirun directly.

MPI_SITES_DEFAULT="open fw nata natb sym"
MPI_FROM_DEFAULT=nata1
# Where orteds and btl_tcp talk in the netns launcher: every lab host has one
# interface, qcg-eth0.
MPI_IF=qcg-eth0
# The unprivileged user the lab's agents and mpirun run as.
LAB_USER=nobody
LAB_GROUP=nogroup
# Its login shell, as SHELL, as a login gives it: nobody's is nologin, which
# mpirun does not know (qcg-mpirun deals with that; the caller's SHELL would
# hide it).
LAB_SHELL=$(getent passwd "$LAB_USER" | cut -d: -f7)
USER_DIR=$STATE/user

mpirun_usage() {
	cat <<-EOF
		usage: $PROG mpirun [--sites LIST] [--ppn K] [--from NODE] [--tcp | --btl LIST]
		                    [--netns-launch] -- PROGRAM [ARGS...]
		  --sites LIST    comma-separated sites whose nodes <site>1, <site>2 run ranks
		                  (default: ${MPI_SITES_DEFAULT// /,})
		  --ppn K         ranks per node (default 1)
		  --from NODE     the compute node mpirun runs on (default $MPI_FROM_DEFAULT)
		  --tcp           btl self,vader,tcp instead of self,vader,qcg (the baseline,
		                  which fails across NATs)
		  --btl LIST      these BTLs, e.g. self,vader,tcp,qcg (tcp inside a site, qcg
		                  between sites)
		  --netns-launch  the old launcher (mpirun on the broker, orteds by ip netns
		                  exec): the launch benchmark's baseline only
		  PROGRAM         runs as given (an absolute path: every node shares the files)
		  \$QCG_MPIRUN_ARGS  extra mpirun options, e.g. "--mca btl_qcg_verbose 1"
	EOF
}

# ROOT_ENTER, the script of `sh -c "$ROOT_ENTER" sh ROOT STATE NODE HOSTS CMD...`
# run in a fresh mount and UTS namespace: host name NODE, then CMD chrooted in
# ROOT (another Debian's root) with proc, dev, sys, a /tmp and /run of its
# own, the lab's state directory STATE at its own path and, unless HOSTS is
# "", the file HOSTS on /etc/hosts.  The root itself is never written.
# shellcheck disable=SC2016 # expanded by that shell
ROOT_ENTER='r=$1 state=$2 node=$3 hosts=$4
shift 4
hostname "$node" &&
	mount -t proc proc "$r/proc" && mount --rbind /dev "$r/dev" &&
	mount -t tmpfs -o mode=1777 tmpfs "$r/dev/shm" && mount -t sysfs sysfs "$r/sys" &&
	mount -t tmpfs -o mode=1777 tmpfs "$r/tmp" && mount -t tmpfs -o mode=755 tmpfs "$r/run" &&
	mkdir -p "$r$state" && mount --bind "$state" "$r$state" &&
	{ [ -z "$hosts" ] || mount --bind "$hosts" "$r/etc/hosts"; } &&
	exec /usr/sbin/chroot "$r" "$@"'

# as_user NODE CMD...: CMD in NODE's namespace with NODE as host name, as the
# lab's user; the environment is passed on (secrets never on a command line),
# with the user's SHELL.
# It execs: run it in a subshell (or in the background, where $! is then CMD).
# At nice 10: on a real grid the ranks have cores of their own and the node's
# helper is never starved; here up to 80 ranks share two cores with every
# service, and at equal priority a helper's 5 s timer fired 1.3 s late,
# failing techniques that work (issue 15's closing note).
#
# With QCG_LAB_ROOT (another Debian's root, e.g. Debian 13's), CMD runs in
# that root (ROOT_ENTER).  What the user runs is staged from
# QCG_LAB_USER_BUILD, the tree built in that root.
as_user() {
	local node=$1
	shift
	if [ -n "${QCG_LAB_ROOT:-}" ]; then
		exec ip netns exec "$(node_ns "$node")" unshare --uts --mount --propagation private /bin/sh -c \
			"$ROOT_ENTER" sh "$QCG_LAB_ROOT" "$STATE" "$node" "" nice -n 10 \
			setpriv --reuid="$LAB_USER" --regid="$LAB_GROUP" --clear-groups env SHELL="$LAB_SHELL" "$@"
	fi
	exec ip netns exec "$(node_ns "$node")" unshare --uts /bin/sh -c 'hostname "$1" && shift && exec "$@"' \
		sh "$node" nice -n 10 setpriv --reuid="$LAB_USER" --regid="$LAB_GROUP" --clear-groups \
		env SHELL="$LAB_SHELL" "$@"
}

# user_can_run FILE: the lab's user may execute FILE where it is.
user_can_run() { setpriv --reuid="$LAB_USER" --regid="$LAB_GROUP" --clear-groups test -x "$1"; }

# stage FILE DIR: a copy of FILE in DIR unless it is there already, replaced by
# a rename (a running copy keeps its own; two stagings at once do not meet).
stage() {
	local dst
	dst=$2/$(basename "$1")
	cmp -s "$1" "$dst" && return 0
	install -m 755 "$1" "$dst.tmp.$$" && mv -f "$dst.tmp.$$" "$dst"
}

# What the lab's user runs, where it can reach it whatever the build directory's
# permissions: $USER_DIR/bin, lib (libqcgconn, libqcgcolour, the BTL, coll_qcg) and home.
stage_user_area() {
	local f from=${QCG_LAB_USER_BUILD:-$BUILD_DIR}
	mkdir -p "$USER_DIR/bin" "$USER_DIR/lib" "$USER_DIR/home"
	chmod 755 "$STATE" "$USER_DIR" "$USER_DIR/bin" "$USER_DIR/lib"
	chown "$LAB_USER:$LAB_GROUP" "$USER_DIR/home"
	chmod 700 "$USER_DIR/home"
	for f in launch/qcg-agent launch/qcg-launch launch/qcg-mpirun; do
		[ -x "$from/$f" ] || die "not built: $from/$f"
		stage "$from/$f" "$USER_DIR/bin"
	done
	for f in "$from"/libqcgconn/libqcgconn.so* "$from"/libqcgcolour/libqcgcolour.so*; do
		if [ -L "$f" ]; then
			local dst
			dst=$USER_DIR/lib/$(basename "$f")
			[ "$(readlink "$dst" 2>/dev/null)" = "$(readlink "$f")" ] && continue
			ln -s "$(readlink "$f")" "$dst.tmp.$$" && mv -fT "$dst.tmp.$$" "$dst"
			continue
		fi
		stage "$f" "$USER_DIR/lib"
	done
	# The BTL's help texts sit next to it (it adds its own directory to
	# show_help's path).
	[ ! -e "$from/btl_qcg/mca_btl_qcg.so" ] || stage "$from/btl_qcg/mca_btl_qcg.so" "$USER_DIR/lib"
	[ ! -e "$from/btl_qcg/help-mpi-btl-qcg.txt" ] ||
		stage "$from/btl_qcg/help-mpi-btl-qcg.txt" "$USER_DIR/lib"
	# The site-aware collectives, as the packages install them: every job of
	# several sites uses them (--mca coll ^qcg: Open MPI's own).
	[ ! -e "$from/coll_qcg/mca_coll_qcg.so" ] || stage "$from/coll_qcg/mca_coll_qcg.so" "$USER_DIR/lib"
}

# user_env: the environment of the lab's user (after stage_user_area): its
# home, the staged programs and libraries, and the staged BTL for the ranks
# mpirun starts (mpirun hands OMPI_MCA_* to them).  In a root (Open MPI 5),
# PMIx's own component path too: its mpirun hands the ranks' PMIx Open MPI's
# path when PMIx has none in the environment, and PMIx then prints "has bad
# prefix" for every file there not its own.
user_env() {
	local pmix
	export HOME=$USER_DIR/home PATH=$USER_DIR/bin:/usr/local/bin:/usr/bin:/bin
	export LD_LIBRARY_PATH=$USER_DIR/lib OMPI_MCA_mca_base_component_path
	OMPI_MCA_mca_base_component_path=$(component_path "$USER_DIR/lib")
	[ -n "${QCG_LAB_ROOT:-}" ] || return 0
	pmix=$(pmix_component_path)
	[ -z "$pmix" ] || export PMIX_MCA_mca_base_component_path=$pmix
}

# pmix_component_path: the component path of the root's PMIx, as its
# pmix-mca-params.conf sets it (Debian 13's: .../pmix2/lib/pmix).
pmix_component_path() {
	sed -n 's/^[[:space:]]*mca_base_component_path[[:space:]]*=[[:space:]]*//p' \
		"$QCG_LAB_ROOT"/usr/lib/*/pmix*/share/pmix-mca-params.conf 2>/dev/null | head -n 1
}

cmd_mpirun() {
	local sites=$MPI_SITES_DEFAULT ppn=1 tcp=no from=$MPI_FROM_DEFAULT netns=no s nodes=() btls
	local extra=()
	while [ $# -gt 0 ]; do
		case $1 in
		--sites) [ $# -ge 2 ] || die "--sites wants a list, e.g. --sites nata,open"
			sites=${2//,/ }; shift 2 ;;
		--ppn) [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]?$ ]] || die "--ppn wants 1..99"
			ppn=$2; shift 2 ;;
		--from) [ $# -ge 2 ] || die "--from wants a compute node, e.g. --from fw1"
			from=$2; shift 2 ;;
		--tcp) tcp=yes; shift ;;
		--btl) [ $# -ge 2 ] && [[ $2 =~ ^[a-z,]+$ ]] || die "--btl wants a list, e.g. self,vader,tcp,qcg"
			btls=$2; shift 2 ;;
		--netns-launch) netns=yes; shift ;;
		--) shift; break ;;
		-h | --help) mpirun_usage; return 0 ;;
		*) die "mpirun: unknown argument '$1' (the program goes after --)" ;;
		esac
	done
	[ $# -ge 1 ] || { mpirun_usage >&2; die "mpirun: no program given"; }
	need_root
	need_tools mpirun ompi_info unshare setpriv
	grep -qx 'SERVICES=yes' "$STATE/config" 2>/dev/null ||
		die "the lab is not up with its services ($PROG up)"
	for s in $sites; do
		[ -n "${SITE_KIND[$s]:-}" ] || die "mpirun: unknown site '$s' (sites: ${SITES[*]})"
		nodes+=("${s}1" "${s}2")
	done
	[ ${#nodes[@]} -gt 0 ] || die "mpirun: --sites is empty"
	is_compute_node "$from" || die "mpirun: --from $from is not a compute node (nodes: $(compute_nodes | tr '\n' ' '))"
	if [ "$tcp" = yes ]; then
		btls=self,vader,tcp
	elif [ -n "${btls:-}" ]; then
		[[ ,$btls, != *,qcg,* ]] || [ -e "$BUILD_DIR/btl_qcg/mca_btl_qcg.so" ] ||
			die "not built: $BUILD_DIR/btl_qcg/mca_btl_qcg.so (needs libopenmpi-dev)"
	else
		btls=self,vader,qcg
		[ -e "$BUILD_DIR/btl_qcg/mca_btl_qcg.so" ] ||
			die "not built: $BUILD_DIR/btl_qcg/mca_btl_qcg.so (needs libopenmpi-dev), or use --tcp"
	fi
	# shellcheck disable=SC2206 # split on purpose: a list of options
	[ -z "${QCG_MPIRUN_ARGS:-}" ] || extra=($QCG_MPIRUN_ARGS)
	mkdir -p "$STATE"
	if [ "$netns" = yes ]; then
		mpirun_netns "$ppn" "$btls" "${nodes[*]}" "${extra[@]}" -- "$@"
	else
		mpirun_agents "$ppn" "$btls" "$from" "${nodes[*]}" "${extra[@]}" -- "$@"
	fi
}

# mpirun_timed T0 CMD...: CMD (mpirun), then one line with its status and how
# long it ran from T0 (ms since the epoch; the launch benchmark reads it).
mpirun_timed() {
	local t0=$1 rc=0
	shift
	( "$@" ) || rc=$?
	say "mpirun: exit $rc after $(($(date +%s%3N) - t0)) ms" >&2
	return "$rc"
}

# The component path mpirun hands every daemon: the BTL's directory first.
component_path() {
	local ompi_dir
	if [ -n "${QCG_LAB_ROOT:-}" ]; then
		ompi_dir=$(chroot "$QCG_LAB_ROOT" ompi_info --path pkglibdir 2>/dev/null | sed -n 's/.*Pkglibdir: *//p')
	else
		ompi_dir=$(ompi_info --path pkglibdir 2>/dev/null | sed -n 's/.*Pkglibdir: *//p')
	fi
	echo "$1${ompi_dir:+:$ompi_dir}"
}

# mpirun_agents PPN BTLS FROM "NODES" [MPIRUN OPTIONS...] -- PROGRAM [ARGS...]
mpirun_agents() {
	local ppn=$1 btls=$2 from=$3 node dir rc=0 np i prog pids=() left shown
	local -a nodes opts=() ompi_opts
	read -ra nodes <<<"$4"
	shift 4
	while [ "$1" != -- ]; do opts+=("$1"); shift; done
	shift
	stage_user_area
	prog=$1
	shift
	# The program too, when the lab's user cannot reach it where it is (or
	# the root it runs in cannot).
	if [ -n "${QCG_LAB_ROOT:-}" ]; then
		[ -e "$QCG_LAB_ROOT$prog" ] || stage "$prog" "$USER_DIR/bin"
		[ -e "$QCG_LAB_ROOT$prog" ] || prog=$USER_DIR/bin/$(basename "$prog")
	elif [ -f "$prog" ] && ! user_can_run "$prog"; then
		stage "$prog" "$USER_DIR/bin"
		prog=$USER_DIR/bin/$(basename "$prog")
	fi
	[ "$btls" = self,vader,qcg ] || opts+=(--mca btl "$btls" --mca btl_tcp_if_include "$MPI_IF")
	dir=$(mktemp -d "$STATE/mpirun.XXXXXX")
	chmod 755 "$dir"
	# One line per rank, mapped in order (rmaps seq): mpirun's own node would
	# otherwise come first.  Each with its site: the ranks' colours.
	for node in "${nodes[@]}"; do
		for ((i = 0; i < ppn; i++)); do echo "$node site=${NODE_SITE[$node]}"; done
	done >"$dir/hosts"
	chmod 644 "$dir/hosts"
	np=$((${#nodes[@]} * ppn))
	# What qcg-mpirun's default is: Open MPI 5 (a root with PRRTE's prted)
	# calls the shared-memory BTL sm, 4.1 vader.
	shown=$btls
	[ "$btls" != self,vader,qcg ] || [ ! -x "${QCG_LAB_ROOT:-/nonexistent}/usr/bin/prted" ] || shown=self,sm,qcg
	# Open MPI 5's mpirun would hand --mca mca_base_component_path to PMIx
	# and PRRTE too (each warns about every file of the BTL's directory):
	# there, the ranks get it from user_env's OMPI_MCA_ variable only.  It
	# maps in host list order with --map-by seq (PRRTE takes no rmaps
	# variable).
	ompi_opts=(--mca mca_base_component_path "$(component_path "$USER_DIR/lib")" --mca rmaps seq)
	[ -z "${QCG_LAB_ROOT:-}" ] || ompi_opts=(--map-by seq)
	(
		# A fresh job for each run: its id and secret stay in the environment.
		eval "$("$USER_DIR/bin/qcg-mpirun" --new-job)"
		user_env
		for node in "${nodes[@]}"; do
			QCG_HELPER_SOCKET=$(helper_socket "$node") \
				as_user "$node" qcg-agent --idle-timeout 300 >"$dir/agent-$node.log" 2>&1 &
			echo "$!" >"$dir/agent-$node.pid"
		done
		for node in "${nodes[@]}"; do
			for ((i = 0; i < 150; i++)); do
				grep -q "ready: agent" "$dir/agent-$node.log" 2>/dev/null && break
				kill -0 "$(cat "$dir/agent-$node.pid")" 2>/dev/null || break
				sleep 0.1
			done
			grep -q "ready: agent" "$dir/agent-$node.log" 2>/dev/null || {
				sed 's/^/   | /' "$dir/agent-$node.log" >&2
				echo "$PROG: mpirun: the agent on $node did not start" >&2
				exit 1
			}
		done
		say "mpirun: $np ranks on ${nodes[*]} ($ppn per node), btl $shown, from $from, agents as $LAB_USER" >&2
		t0=$(date +%s%3N)
		QCG_HELPER_SOCKET=$(helper_socket "$from") \
			mpirun_timed "$t0" as_user "$from" qcg-mpirun --host-list "$dir/hosts" -np "$np" \
			--bind-to none --mca mpi_yield_when_idle 1 \
			"${ompi_opts[@]}" "${opts[@]}" "$prog" "$@"
	) || rc=$?
	# Agents end with their launch.  One that got none (mpirun's own node,
	# whose ranks mpirun starts itself, or a node mpirun never reached) would
	# wait for its idle timeout: it is stopped now, as a batch system ends
	# it with the allocation.
	for node in "${nodes[@]}"; do
		[ -r "$dir/agent-$node.pid" ] || continue
		if grep -q "connection from rank" "$dir/agent-$node.log" 2>/dev/null; then
			pids+=("$(cat "$dir/agent-$node.pid")")
		else
			kill "$(cat "$dir/agent-$node.pid")" 2>/dev/null || true
		fi
	done
	for ((i = 0; i < 100; i++)); do
		left=0
		for node in "${pids[@]}"; do kill -0 "$node" 2>/dev/null && left=1; done
		[ "$left" = 0 ] && break
		sleep 0.1
	done
	for node in "${pids[@]}"; do kill "$node" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [ -n "${QCG_LAB_AGENT_LOGS:-}" ]; then
		mkdir -p "$QCG_LAB_AGENT_LOGS" && cp "$dir"/agent-*.log "$QCG_LAB_AGENT_LOGS/" 2>/dev/null || true
	fi
	rm -rf "$dir"
	return "$rc"
}

# mpirun_netns PPN BTLS "NODES" [MPIRUN OPTIONS...] -- PROGRAM [ARGS...]: the
# old launcher (the launch benchmark's baseline).
mpirun_netns() {
	local ppn=$1 btls=$2 node dir np rc=0 cpath
	local -a nodes opts=()
	read -ra nodes <<<"$3"
	shift 3
	while [ "$1" != -- ]; do opts+=("$1"); shift; done
	shift
	cpath=$(component_path "$BUILD_DIR/btl_qcg")
	dir=$(mktemp -d "$STATE/mpirun.XXXXXX")
	for node in "${nodes[@]}"; do echo "${NODE_IP[$node]} slots=$ppn"; done >"$dir/hosts"
	cat >"$dir/agent" <<-EOF
		#!/bin/sh
		# mpirun's launch agent: HOST CMD... -> CMD in the namespace of the node at HOST.
		QCG_BUILD_DIR='$BUILD_DIR' QCG_LAB_DIR='$STATE' exec '$LAB_SRC/qcg-lab' _agent "\$@"
	EOF
	chmod 755 "$dir/agent"
	np=$((${#nodes[@]} * ppn))
	# The colours qcg-mpirun and the agents would give (launch/README.md).
	QCG_COLOURS_NODE=$(printf '%s\n' "${nodes[@]}" | LC_ALL=C sort -u | paste -sd, -)
	QCG_COLOURS_SITE=$(for node in "${nodes[@]}"; do echo "${NODE_SITE[$node]}"; done | LC_ALL=C sort -u | paste -sd, -)
	export QCG_COLOURS_NODE QCG_COLOURS_SITE
	say "mpirun (netns launcher): $np ranks on ${nodes[*]} ($ppn per node), btl $btls" >&2
	QCG_JOB=lab-netns-$$ QCG_JOB_SECRET=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n') \
		OMPI_MCA_mca_base_component_path=$cpath \
		mpirun_timed "$(date +%s%3N)" ip netns exec "$(node_ns broker)" mpirun --allow-run-as-root -np "$np" \
		--hostfile "$dir/hosts" --map-by slot --bind-to none \
		--mca plm_rsh_agent "$dir/agent" --mca routed direct \
		--mca oob_tcp_if_include "$MPI_IF" --mca btl_tcp_if_include "$MPI_IF" \
		--mca pml ob1 --mca btl "$btls" --mca mpi_yield_when_idle 1 \
		--mca mca_base_component_path "$cpath" -x QCG_JOB -x QCG_JOB_SECRET \
		-x QCG_COLOURS_NODE -x QCG_COLOURS_SITE \
		"${opts[@]}" "$@" || rc=$?
	rm -rf "$dir"
	return "$rc"
}

# _agent HOST CMD...: what the netns launcher's mpirun runs to start an orted on
# HOST (a compute node's address): CMD in that node's namespace, with its own
# host name, its helper's socket, its name in QCG_LAB_NODE and its colours
# (as an agent sets them); at nice 10, as as_user runs the agents' daemons
# and ranks: the launch benchmark compares the two launchers at the same
# priority (at nice 0, ten polling ranks compete with the nodes' helpers).
cmd_agent() {
	local host=${1:-} node="" n
	[ $# -ge 2 ] || die "usage: $PROG _agent HOST CMD..."
	shift
	for n in $(compute_nodes); do
		[ "${NODE_IP[$n]}" = "$host" ] && node=$n
	done
	[ -n "$node" ] || die "_agent: $host is the address of no compute node"
	QCG_HELPER_SOCKET=$(helper_socket "$node")
	export QCG_HELPER_SOCKET QCG_LAB_NODE=$node QCG_COLOUR_NODE=$node QCG_COLOUR_SITE=${NODE_SITE[$node]}
	exec ip netns exec "$(node_ns "$node")" nice -n 10 unshare --uts /bin/sh -c "hostname $node && $*"
}
