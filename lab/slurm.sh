# shellcheck shell=bash
# qcg-lab up --batch slurm (sourced by qcg-lab, after the plan, services.sh and
# mpirun.sh): every site a Slurm cluster of its own, from Debian's packages
# (slurmctld, slurmd, slurm-client, munge), as a site's admin would run it:
#
#   <site>-head  munged (the site's key) and slurmctld: cluster <site>,
#                partition "batch" of <site>1, <site>2
#   <site>1, 2   slurmd, known to Slurm by its lab name and address
#
# Everything lives under $STATE/slurm/<site>/ (slurm.conf, munge key and
# socket, controller state, each node's spool) and $LOG_DIR; each daemon runs
# in its node's namespace with the node's host name and a private mount of
# $STATE/slurm/hosts on /etc/hosts (Slurm resolves node names; the lab has no
# DNS), so nothing of the host's /etc/slurm, /etc/munge or /run is read or
# written.  One munged per site: the nodes share the lab's filesystem, and the
# socket is the site's.  No accounting (accounting_storage/none), no cgroups
# (proctrack/linuxproc): the lab is a tenant of this machine's cgroups.
#
# Jobs run as the lab's user ($LAB_USER) with its staged programs; the site's
# TaskProlog, docs/admin.md's as written but for the socket's path, gives
# every task its node's helper socket (QCG_HELPER_SOCKET).  Users reach a site with
#
#   qcg-lab login SITE -- CMD [ARGS...]
#
# CMD as the lab's user on SITE's head (its login node), SLURM_CONF set.
#
# With QCG_LAB_ROOT (another Debian's root, e.g. Debian 13's: lab/debian13.sh),
# every Slurm and munge daemon, every command of `login` and with them every
# job runs chrooted in that root (mpirun.sh's ROOT_ENTER), configs, sockets
# and state at the same paths under $STATE; the user's programs are staged
# from QCG_LAB_USER_BUILD.  Both are recorded in $STATE/slurm/root: login
# and status use that Slurm without being told.  A Slurm that has
# CgroupPlugin=disabled (24.05 on) gets it in cgroup.conf: from 23.11 on,
# slurmd loads the cgroup plugin whatever ProctrackType and TaskPlugin say,
# and the lab makes no cgroup.

SLURM_DIR=$STATE/slurm
SLURM_WAIT=${QCG_LAB_SLURM_WAIT:-30}

slurm_site_dir() { echo "$SLURM_DIR/$1"; }
slurm_conf() { echo "$SLURM_DIR/$1/slurm.conf"; }
slurm_munge_socket() { echo "$SLURM_DIR/$1/munge/munge.sock"; }
slurm_enabled() { grep -qx 'BATCH=slurm' "$STATE/config" 2>/dev/null; }
# The root the lab's Slurm runs from ("" for this machine's), and the tree
# its users' programs are staged from: recorded by slurm_up.
# (No file: this machine's Slurm.)
slurm_root() { sed -n 's/^ROOT=//p' "$SLURM_DIR/root" 2>/dev/null || true; }
slurm_user_build() { sed -n 's/^USER_BUILD=//p' "$SLURM_DIR/root" 2>/dev/null || true; }

slurm_check_tools() {
	local t missing=() r=${QCG_LAB_ROOT:-}
	for t in slurmctld slurmd sbatch srun squeue sinfo scancel munged mungekey; do
		if [ -n "$r" ]; then
			[ -x "$r/usr/sbin/$t" ] || [ -x "$r/usr/bin/$t" ] || missing+=("$t")
		else
			command -v "$t" >/dev/null 2>&1 || missing+=("$t")
		fi
	done
	[ ${#missing[@]} -eq 0 ] || [ -z "$r" ] ||
		die "--batch slurm: missing ${missing[*]} in $r (lab/debian13.sh installs slurmctld, slurmd, slurm-client and munge)"
	[ ${#missing[@]} -eq 0 ] ||
		die "--batch slurm: missing ${missing[*]} (scripts/install-deps installs slurmctld, slurmd, slurm-client and munge)"
}

# slurm_run NODE CMD...: a daemon (or a command) as root in NODE's namespace,
# host name NODE, in a mount namespace of its own with the lab's hosts file on
# /etc/hosts; in the lab's Slurm root if it has one.  nsenter, not ip netns
# exec: Debian 12's slurmd's cgroup plugin wants the host's /sys/fs/cgroup
# mounted (it only looks; proctrack/linuxproc and task/none make no cgroup),
# which ip netns exec's fresh /sys lacks.  Without the lab's lock (fd 9).
slurm_run() {
	local node=$1 r
	shift
	r=$(slurm_root)
	if [ -n "$r" ]; then
		nsenter --net="/run/netns/$(node_ns "$node")" unshare --uts --mount --propagation private /bin/sh -c \
			"$ROOT_ENTER" sh "$r" "$STATE" "$node" "$SLURM_DIR/hosts" "$@" </dev/null 9<&-
		return
	fi
	nsenter --net="/run/netns/$(node_ns "$node")" unshare --uts --mount --propagation private /bin/sh -c \
		'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"' \
		sh "$SLURM_DIR/hosts" "$node" "$@" </dev/null 9<&-
}

# slurm_version_at_least MAJOR.MINOR: the lab's Slurm (slurmd -V, "slurm
# 24.11.5") is that release or a later one.
slurm_version_at_least() {
	local v
	v=$(slurm_run "${SITES[0]}-head" slurmd -V 2>/dev/null | awk '{ print $2 }')
	[ -n "$v" ] && [ "$(printf '%s\n%s\n' "$1" "$v" | sort -V | head -n 1)" = "$1" ]
}

slurm_write_site() {
	local s=$1 dir n nodes=()
	dir=$(slurm_site_dir "$s")
	mkdir -p "$dir/ctld" "$dir/munge" "$dir/spool"
	chmod 700 "$dir/ctld"
	chmod 755 "$dir/spool"
	# munged checks that no one else may write where its socket and key are.
	chmod 755 "$dir"
	chmod 755 "$dir/munge"
	[ -s "$dir/munge/munge.key" ] || slurm_run "$s-head" mungekey --create --keyfile="$dir/munge/munge.key" 2>/dev/null ||
		die "--batch slurm: mungekey failed for $s"
	chmod 600 "$dir/munge/munge.key"
	for n in "${s}1" "${s}2"; do
		nodes+=("$n")
		mkdir -p "$dir/spool/$n"
		chmod 755 "$dir/spool/$n"
	done
	{
		cat <<-EOF
			# qcg-lab: Slurm cluster of site $s (generated by qcg-lab up --batch slurm)
			ClusterName=$s
			SlurmctldHost=$s-head(${NODE_IP[$s-head]})
			SlurmUser=root
			AuthType=auth/munge
			CredType=cred/munge
			AuthInfo=socket=$(slurm_munge_socket "$s")
			StateSaveLocation=$dir/ctld
			SlurmdSpoolDir=$dir/spool/%n
			SlurmctldPidFile=$dir/slurmctld.pid
			SlurmdPidFile=$dir/slurmd-%n.pid
			SlurmctldLogFile=$LOG_DIR/slurmctld-$s.log
			SlurmdLogFile=$LOG_DIR/slurmd-%n.log
			ProctrackType=proctrack/linuxproc
			TaskPlugin=task/none
			TaskProlog=$SLURM_DIR/task-prolog
			JobAcctGatherType=jobacct_gather/none
			AccountingStorageType=accounting_storage/none
			JobCompType=jobcomp/none
			SelectType=select/linear
			MpiDefault=none
			ReturnToService=2
			KillWait=3
			MinJobAge=120
		EOF
		# An IPv6-only site (up --v6): Slurm speaks IPv4 only unless told.
		site_v4 "$s" || echo "CommunicationParameters=EnableIPv6,DisableIPv4"
		for n in "${nodes[@]}"; do
			echo "NodeName=$n NodeAddr=${NODE_IP[$n]} CPUs=$(nproc) State=UNKNOWN"
		done
		echo "PartitionName=batch Nodes=$(
			IFS=,
			echo "${nodes[*]}"
		) Default=YES MaxTime=INFINITE State=UP"
	} >"$dir/slurm.conf.new"
	chmod 644 "$dir/slurm.conf.new"
	mv -f "$dir/slurm.conf.new" "$dir/slurm.conf"
	if [ "$SLURM_NO_CGROUP" = yes ]; then
		printf '%s\n' "# qcg-lab: the lab makes no cgroup (its Slurm reads this file from $SLURM_DIR/$s)" \
			CgroupPlugin=disabled >"$dir/cgroup.conf"
		chmod 644 "$dir/cgroup.conf"
	fi
}

slurm_write_common() {
	local n
	mkdir -p "$SLURM_DIR" "$LOG_DIR"
	chmod 755 "$STATE" "$SLURM_DIR"
	{
		echo "127.0.0.1 localhost"
		for n in "${NODES[@]}"; do echo "${NODE_IP[$n]} $n"; done
	} >"$SLURM_DIR/hosts"
	chmod 644 "$SLURM_DIR/hosts"
	# The TaskProlog of docs/admin.md as written, but for its socket line:
	# each lab node's helper has a socket of its own.
	awk -v sock="sock=$NODE_DIR/\$SLURMD_NODENAME/helper.sock" '
		/^<!-- the lab.s TaskProlog -->$/ { on = 1; next }
		on && /^    / { line = substr($0, 5); if (line ~ /^sock=/) line = sock; print line; n++; next }
		on { exit }
		END { if (n < 2) exit 1 }' "$REPO/docs/admin.md" >"$SLURM_DIR/task-prolog" ||
		die "--batch slurm: no TaskProlog block in $REPO/docs/admin.md"
	grep -qx "sock=$NODE_DIR/\$SLURMD_NODENAME/helper.sock" "$SLURM_DIR/task-prolog" ||
		die "--batch slurm: the TaskProlog of $REPO/docs/admin.md has no sock= line"
	chmod 755 "$SLURM_DIR/task-prolog"
}

slurm_pid() {
	local pid
	pid=$(cat "$1" 2>/dev/null) || return 1
	pid_alive "$pid" && echo "$pid"
}

slurm_munge_pidfile() { echo "$SLURM_DIR/$1/munge/munged.pid"; }

slurm_node_ready() { [ "$(slurm_sinfo "$1" -h -o %t | sort -u)" = idle ]; }
# Ready, or its slurmctld wrote its pid and is gone (a fatal start).
slurm_ctld_dead() { local f; f=$(slurm_site_dir "$1")/slurmctld.pid; [ -s "$f" ] && ! slurm_pid "$f" >/dev/null; }
slurm_ready_or_dead() { slurm_ctld_dead "$1" || slurm_node_ready "$1"; }
slurm_sinfo() {
	local s=$1
	shift
	SLURM_CONF=$(slurm_conf "$s") slurm_run "$s-head" sinfo "$@" 2>/dev/null
}

# slurm_up: starts what is missing (idempotent), waits until every site's
# nodes are idle.
slurm_up() {
	local s n dir r=${QCG_LAB_ROOT:-}
	slurm_check_tools
	[ -z "$r" ] || r=$(realpath "$r")
	if [ -d "$SLURM_DIR" ] && [ "$(slurm_root)" != "$r" ]; then
		die "--batch slurm: the lab's Slurm runs from '$(slurm_root)', not '$r' ($PROG up without --batch first)"
	fi
	slurm_write_common
	# Absolute: login and status may run from anywhere.
	[ -z "$r" ] || printf 'ROOT=%s\nUSER_BUILD=%s\n' "$(realpath "$r")" \
		"$(realpath "${QCG_LAB_USER_BUILD:-$BUILD_DIR}")" >"$SLURM_DIR/root"
	SLURM_NO_CGROUP=no
	slurm_version_at_least 24.05 && SLURM_NO_CGROUP=yes
	stage_user_area
	for s in "${SITES[@]}"; do
		slurm_write_site "$s"
		dir=$(slurm_site_dir "$s")
		if ! slurm_pid "$(slurm_munge_pidfile "$s")" >/dev/null; then
			slurm_run "$s-head" munged --force --socket="$(slurm_munge_socket "$s")" \
				--key-file="$dir/munge/munge.key" --pid-file="$(slurm_munge_pidfile "$s")" \
				--seed-file="$dir/munge/munge.seed" --log-file="$LOG_DIR/munged-$s.log" ||
				die "--batch slurm: munged did not start on $s-head (see $LOG_DIR/munged-$s.log)"
		fi
		export SLURM_CONF
		SLURM_CONF=$(slurm_conf "$s")
		slurm_pid "$dir/slurmctld.pid" >/dev/null || slurm_run "$s-head" slurmctld ||
			die "--batch slurm: slurmctld did not start on $s-head (see $LOG_DIR/slurmctld-$s.log)"
		for n in "${s}1" "${s}2"; do
			slurm_pid "$dir/slurmd-$n.pid" >/dev/null || slurm_run "$n" slurmd -N "$n" ||
				die "--batch slurm: slurmd did not start on $n (see $LOG_DIR/slurmd-$n.log)"
		done
		unset SLURM_CONF
	done
	for s in "${SITES[@]}"; do
		# A slurmctld that died ends the wait: each sinfo to it takes seconds.
		wait_until "$SLURM_WAIT" "site $s's Slurm nodes to be idle" slurm_ready_or_dead "$s" &&
			! slurm_ctld_dead "$s" || {
			slurm_sinfo "$s" -N -l >&2 || true
			tail -n 5 "$LOG_DIR/slurmctld-$s.log" >&2 || true
			die "--batch slurm: site $s is not ready"
		}
	done
}

# slurm_down: stops every Slurm and munge daemon of the lab (down, or up
# without --batch); jobs end with their slurmd.
slurm_down() {
	local s n f pid uid pids=()
	[ -d "$SLURM_DIR" ] || return 0
	uid=$(id -u "$LAB_USER")
	# The jobs first (everything of the lab's user on a compute node): a
	# slurmd that stops leaves its jobs running.
	for s in $(compute_nodes); do
		for pid in $(ip netns pids "$(node_ns "$s")" 2>/dev/null); do
			[ "$(stat -c %u "/proc/$pid" 2>/dev/null)" != "$uid" ] || kill -KILL "$pid" 2>/dev/null || true
		done
	done
	for s in "${SITES[@]}"; do
		for f in "$SLURM_DIR/$s"/slurmd-*.pid "$SLURM_DIR/$s/slurmctld.pid" "$(slurm_munge_pidfile "$s")"; do
			pid=$(slurm_pid "$f") && pids+=("$pid")
		done
	done
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do
		wait_until 5 "Slurm daemon $pid to stop" pid_dead "$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
	done
	# What they leave (slurmstepd of a killed job, slurmscriptd).
	for s in "${SITES[@]}"; do
		for n in "$s-head" "${s}1" "${s}2"; do
			for pid in $(ip netns pids "$(node_ns "$n")" 2>/dev/null); do
				case $(cat "/proc/$pid/comm" 2>/dev/null) in slurm* | munged) kill -KILL "$pid" 2>/dev/null || true ;; esac
			done
		done
	done
	rm -rf "$SLURM_DIR"
}

slurm_status() {
	local s
	slurm_enabled || [ -d "$SLURM_DIR" ] || return 0
	echo
	echo "batch system: Slurm (configs in $SLURM_DIR/<site>/slurm.conf, logs in $LOG_DIR):"
	for s in "${SITES[@]}"; do
		if slurm_pid "$SLURM_DIR/$s/slurmctld.pid" >/dev/null; then
			slurm_sinfo "$s" -h -o "  $s: partition %P %a, %D nodes %t %N" || echo "  $s: slurmctld does not answer"
		else
			echo "  $s: slurmctld does not run"
		fi
	done
}

# login SITE -- CMD: CMD as the lab's user on SITE's head, its login node.
cmd_login() {
	local s=${1:-}
	[ $# -ge 1 ] && shift
	[ "${1:-}" = -- ] && shift
	[ -n "$s" ] && [ $# -ge 1 ] || die "usage: $PROG login SITE -- CMD [ARGS...]"
	[ -n "${SITE_KIND[$s]:-}" ] || die "login: unknown site '$s' (sites: ${SITES[*]})"
	need_root
	slurm_enabled || die "login: the lab runs no batch system ($PROG up --batch slurm)"
	# The Slurm's root and the programs built for it, as up recorded them.
	QCG_LAB_ROOT=$(slurm_root)
	[ -z "$QCG_LAB_ROOT" ] || QCG_LAB_USER_BUILD=$(slurm_user_build)
	stage_user_area
	user_env
	export SLURM_CONF
	SLURM_CONF=$(slurm_conf "$s")
	cd "$USER_DIR/home" || exit 1
	if [ -n "$QCG_LAB_ROOT" ]; then
		exec ip netns exec "$(node_ns "$s-head")" unshare --uts --mount --propagation private /bin/sh -c \
			"$ROOT_ENTER" sh "$QCG_LAB_ROOT" "$STATE" "$s-head" "$SLURM_DIR/hosts" \
			setpriv --reuid="$LAB_USER" --regid="$LAB_GROUP" --clear-groups env --chdir="$USER_DIR/home" "$@"
	fi
	exec ip netns exec "$(node_ns "$s-head")" unshare --uts /bin/sh -c 'hostname "$1" && shift && exec "$@"' \
		sh "$s-head" setpriv --reuid="$LAB_USER" --regid="$LAB_GROUP" --clear-groups "$@"
}
