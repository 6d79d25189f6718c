# shellcheck shell=bash
# qcg-lab up --monitor (sourced by qcg-lab, after services.sh): a real
# Prometheus (Debian's prometheus) scraping every service of the lab every 5 s,
# with the alert rules of etc/qcg-alerts.yml loaded.
#
# It runs in its own namespace, qcg-mon, on a management network of its own
# (bridge qcg-mon-br, 198.19.255.0/24): each node that runs a service gets a
# second interface, qcg-mon0, at 198.19.255.(10 + its index), as a site's
# monitoring host reaches its nodes.  Every service's config then carries
#
#   metrics-listen = <its qcg-mon0 address>:<port>   broker 9700, frontend 9701,
#   metrics-allow  = 198.19.255.1                    helper 9702, proxy 9703, proxy2 9713
#
# so that Prometheus alone may scrape, and the lab's data paths are untouched
# (the network is a /24 of its own, no route leads there from a site).
# Prometheus's config, rules and database are in $STATE/monitor/ (nothing of
# the host's /etc or /var); its API is http://198.19.255.1:9090/ inside qcg-mon:
#
#   ip netns exec qcg-mon curl -s 'http://198.19.255.1:9090/api/v1/targets'
#
# `up` without --monitor stops it, removes the namespace and the lines again.

MON_NS=qcg-mon
MON_BRIDGE=qcg-mon-br
MON_NET=198.19.255
MON_PROM=$MON_NET.1
MON_PROM_PORT=9090
MON_DIR=$STATE/monitor
MON_PIDFILE=$STATE/run/prometheus.pid
MON_LOG=$STATE/log/prometheus.log
PROMETHEUS_BIN=${QCG_LAB_PROMETHEUS:-prometheus}

# Whether `up` runs the monitor: --monitor now, or the last up's.
monitor_on() { [ "${LAB_MONITOR:-no}" = yes ]; }

# The service's metrics port, and its node's management address.
monitor_port() {
	case $1 in
	broker) echo 9700 ;;
	frontend-*) echo 9701 ;;
	helper-*) echo 9702 ;;
	proxy) echo 9703 ;;
	proxy2) echo 9713 ;;
	esac
}

monitor_addr() {
	local i
	for i in "${!NODES[@]}"; do
		[ "${NODES[$i]}" = "$1" ] && echo "$MON_NET.$((10 + i))" && return 0
	done
	return 1
}

# The two lines svc_config adds for NAME when the monitor runs.
monitor_config_lines() {
	monitor_on || return 0
	echo "metrics-listen = $(monitor_addr "$(svc_node "$1")"):$(monitor_port "$1")"
	echo "metrics-allow = $MON_PROM"
}

monitor_check_tools() {
	command -v "$PROMETHEUS_BIN" >/dev/null ||
		die "--monitor needs prometheus (Debian package prometheus: scripts/install-deps)"
	need_tools curl
}

# The management network: qcg-mon with its bridge, a port per service node.
monitor_net() {
	local n ns
	make_ns "$MON_NS"
	bridge "$MON_NS" "$MON_BRIDGE"
	address "$MON_NS" "$MON_BRIDGE" "$MON_PROM/24"
	for n in $(services_list | while read -r s; do svc_node "$s"; done | sort -u); do
		ns=$(node_ns "$n")
		veth "$ns" qcg-mon0 "$MON_NS" "qcgm-$n"
		bridge_port "$MON_NS" "qcgm-$n" "$MON_BRIDGE"
		address "$ns" qcg-mon0 "$(monitor_addr "$n")/24"
	done
}

monitor_prometheus_yml() {
	local s
	cat <<-EOF
		# written by qcg-lab up --monitor
		global:
		  scrape_interval: 5s
		  scrape_timeout: 4s
		  evaluation_interval: 5s
		rule_files:
		  - $MON_DIR/qcg-alerts.yml
		scrape_configs:
	EOF
	for s in broker proxy frontend helper; do
		echo "  - job_name: qcg-$s"
		echo "    static_configs:"
		services_list | while read -r name; do
			case $name in "$s" | "$s"2 | "$s"-*) ;; *) continue ;; esac
			echo "      - targets: ['$(monitor_addr "$(svc_node "$name")"):$(monitor_port "$name")']"
			echo "        labels: {node: '$(svc_node "$name")'}"
		done
	done
}

monitor_pid() {
	local pid
	[ -r "$MON_PIDFILE" ] || return 1
	pid=$(cat "$MON_PIDFILE")
	pid_alive "$pid" && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = prometheus ] || return 1
	echo "$pid"
}

monitor_ready() {
	ip netns exec "$MON_NS" curl -fsS -m 2 "http://$MON_PROM:$MON_PROM_PORT/-/ready" >/dev/null 2>&1
}

monitor_up() {
	local pid
	monitor_net
	mkdir -p "$MON_DIR/data" "$STATE/run" "$STATE/log"
	cp "$REPO/etc/qcg-alerts.yml" "$MON_DIR/qcg-alerts.yml.new"
	monitor_prometheus_yml >"$MON_DIR/prometheus.yml.new"
	pid=$(monitor_pid) || pid=""
	if [ -n "$pid" ] && cmp -s "$MON_DIR/prometheus.yml.new" "$MON_DIR/prometheus.yml" &&
		cmp -s "$MON_DIR/qcg-alerts.yml.new" "$MON_DIR/qcg-alerts.yml"; then
		rm -f "$MON_DIR"/*.new
		return 0
	fi
	monitor_stop
	mv "$MON_DIR/prometheus.yml.new" "$MON_DIR/prometheus.yml"
	mv "$MON_DIR/qcg-alerts.yml.new" "$MON_DIR/qcg-alerts.yml"
	echo "=== $(date '+%F %T') qcg-lab starts prometheus" >>"$MON_LOG"
	# Its working directory is its own: no relative path reaches the host's.
	(cd "$MON_DIR" && exec ip netns exec "$MON_NS" setsid "$PROMETHEUS_BIN" \
		--config.file="$MON_DIR/prometheus.yml" --storage.tsdb.path="$MON_DIR/data" \
		--storage.tsdb.retention.time=1d \
		--web.listen-address="$MON_PROM:$MON_PROM_PORT" \
		--web.console.templates="$MON_DIR/consoles" --web.console.libraries="$MON_DIR/console_libraries" \
		</dev/null >>"$MON_LOG" 2>&1 9<&-) &
	echo "$!" >"$MON_PIDFILE"
	wait_until 20 "prometheus to answer on $MON_PROM:$MON_PROM_PORT" monitor_ready || {
		tail -n 15 "$MON_LOG" >&2
		die "prometheus did not start (log: $MON_LOG)"
	}
}

monitor_stop() {
	local pid i
	pid=$(monitor_pid) || { rm -f "$MON_PIDFILE"; return 0; }
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		pid_alive "$pid" || break
		sleep 0.05
	done
	pid_alive "$pid" && kill -KILL "$pid" 2>/dev/null
	rm -f "$MON_PIDFILE"
}

# Everything --monitor made: the process, the namespace (its veth peers in
# the nodes go with it), the state.
monitor_down() {
	local n
	ns_exists "$MON_NS" || [ -d "$MON_DIR" ] || [ -e "$MON_PIDFILE" ] || return 0
	monitor_stop
	if ns_exists "$MON_NS"; then
		kill_ns_processes "$MON_NS"
		ip netns del "$MON_NS" 2>/dev/null || true
	fi
	for n in "${NODES[@]}"; do
		ns_exists "$(node_ns "$n")" && ip -n "$(node_ns "$n")" link del qcg-mon0 2>/dev/null || true
	done
	rm -rf "$MON_DIR"
	return 0
}
