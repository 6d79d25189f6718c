# shellcheck shell=bash
# docker/dockerd.sh: start and stop a Docker daemon the safe way (sourced by
# docker/build-images and the tests in tests/docker).
#
# The daemon makes no bridge (no docker0), touches neither iptables nor
# ip_forward, allocates nothing outside 198.19.0.0/16 (part of 198.18.0.0/15;
# the lab's LANs are 198.18.x.0/24), and keeps all its state under one scratch
# directory, so stopping it and removing that directory leaves nothing behind.
# Only the "host" and "none" networks exist: every container, and every compose
# service, names one of them.
#
#   qcg_dockerd_start DIR    start dockerd with its state in DIR; sets DOCKER_HOST
#   qcg_dockerd_stop DIR     stop it (by its pid) and remove DIR
#
# Debian's client (/usr/bin/docker, 20.10) is used: it can build with BuildKit.

QCG_DOCKER=${QCG_DOCKER:-/usr/bin/docker}
QCG_DOCKERD=${QCG_DOCKERD:-/usr/sbin/dockerd}

qcg_dockerd_start() {
	local dir=$1 i
	mkdir -p "$dir/data" "$dir/exec"
	"$QCG_DOCKERD" --bridge=none --iptables=false --ip6tables=false \
		--ip-forward=false --ip-masq=false \
		--default-address-pool base=198.19.0.0/16,size=24 \
		--data-root "$dir/data" --exec-root "$dir/exec" -p "$dir/docker.pid" \
		-H "unix://$dir/docker.sock" >"$dir/dockerd.log" 2>&1 &
	echo $! >"$dir/dockerd.launch.pid"
	export DOCKER_HOST="unix://$dir/docker.sock"
	# Up to 30 s for the API to answer.
	for ((i = 0; i < 300; i++)); do
		if "$QCG_DOCKER" version >/dev/null 2>&1; then
			return 0
		fi
		if ! kill -0 "$(cat "$dir/dockerd.launch.pid")" 2>/dev/null; then
			break
		fi
		sleep 0.1
	done
	echo "dockerd did not start; its log ($dir/dockerd.log):" >&2
	tail -n 20 "$dir/dockerd.log" >&2
	return 1
}

qcg_dockerd_stop() {
	local dir=$1 pid i m
	[ -d "$dir" ] || return 0
	if [ -n "${DOCKER_HOST:-}" ] && [ -S "$dir/docker.sock" ]; then
		# Containers first (bounded), so no container outlives its daemon.
		local ids
		ids=$(timeout 10 "$QCG_DOCKER" ps -aq 2>/dev/null || true)
		[ -z "$ids" ] || timeout 30 "$QCG_DOCKER" rm -f $ids >/dev/null 2>&1 || true
	fi
	pid=$(cat "$dir/dockerd.launch.pid" 2>/dev/null || true)
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		# dockerd stops its containerd itself; 20 s, then SIGKILL.
		for ((i = 0; i < 200; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	# The containerd a killed dockerd may leave behind, by its own pid file.
	pid=$(cat "$dir/exec/containerd/containerd.pid" 2>/dev/null || true)
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null || true
	fi
	# Mounts under the state directory (exec/netns/default, overlays), deepest first.
	for m in $(awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r); do
		umount -l "$m" 2>/dev/null || true
	done
	rm -rf "$dir"
}
