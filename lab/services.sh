# shellcheck shell=bash
# The grid services in the lab (sourced by qcg-lab, after the plan):
#
#   qcg-broker    on broker       203.0.113.10:7700 and [2001:db8::10]:7700 (listen = ::)
#   qcg-proxy     on proxy        203.0.113.20:7703 (data), :7702 (control, stats), beating
#                 (and on 2001:db8::20: listen = ::)
#                 to the broker; with QCG_LAB_PROXIES=2 a second one, proxy2 (lab2),
#                 on :7713 (data), :7712 (control)
#   qcg-frontend  on <site>-head  <head address>:7701, --broker https://203.0.113.10:7700/
#   qcg-helper    on <site>1, <site>2, --frontend https://<head address>:7701/,
#                 socket $STATE/nodes/<node>/helper.sock
#
# Binaries come from $QCG_BUILD_DIR; certificates (certs/qcg-certs), one config file
# per service, logs, pid files and the lab's job secret live in the state dir:
#
#   certs/  ca.crt, broker-broker.pem, frontend-<site>.pem, helper-<site>-<node>.pem,
#           proxy-lab.pem, proxy-lab2.pem, proxy.key (the token key broker and proxy share, 0600),
#           crl.pem (every service loads it: crl =)
#   etc/    <service>.conf            log/  <service>.log, certs.log
#   run/    <service>.pid             nodes/<node>/helper.sock
#   job-secret (0600)
#
# Services are named broker, proxy, proxy2, frontend-<site>, helper-<node>.  `up` starts what is
# missing, restarts a service whose config changed or whose binary was rebuilt, and
# leaves the others alone; then it waits until every frontend and helper is
# connected upstream.

BROKER_BIN=$BUILD_DIR/broker/qcg-broker
PROXY_BIN=$BUILD_DIR/proxy/qcg-proxy
PROXY_CONTROL_PORT=7702
FRONTEND_BIN=$BUILD_DIR/frontend/qcg-frontend
HELPER_BIN=$BUILD_DIR/helper/qcg-helper
CAT_BIN=$BUILD_DIR/tools/qcg-cat
CERTS_TOOL=$REPO/certs/qcg-certs
BROKER_PORT=7700
FRONTEND_PORT=7701
LAB_PROXY_PORT=7703 # qcg-proxy's data port, named in the broker's `proxy` line
# The second proxy (QCG_LAB_PROXIES=2): the same node, other ports.  `up` without
# it stops proxy2 and names one proxy again.
LAB_PROXIES=${QCG_LAB_PROXIES:-1}
LAB_PROXY2_PORT=7713
PROXY2_CONTROL_PORT=7712
REFLECTOR_PORT=7704 # the broker's reflector (hole punching, qcg-probe)
BROKER_URL=https://${NODE_IP[broker]}:$BROKER_PORT/
# What the frontend of an IPv6-only site dials.
BROKER_URL6=https://[${NODE_IP6[broker]}]:$BROKER_PORT/
# Seconds `up` waits for the services to listen and connect upstream.
SVC_WAIT=${QCG_LAB_SERVICE_WAIT:-20}
SVC_LOG_LEVEL=${QCG_LAB_LOG_LEVEL:-info}
# Deliberate deviations, for tests: QCG_LAB_DECLARE="sym=nat ..." makes a site's
# frontend declare another kind than its router has; QCG_LAB_UNPRIVILEGED="fw ..."
# runs a site's helpers without CAP_NET_ADMIN and CAP_NET_RAW.  `up` without them
# puts everything back.
LAB_DECLARE=${QCG_LAB_DECLARE:-}
LAB_UNPRIVILEGED=${QCG_LAB_UNPRIVILEGED:-}

CERT_DIR=$STATE/certs
ETC_DIR=$STATE/etc
LOG_DIR=$STATE/log
RUN_DIR=$STATE/run
NODE_DIR=$STATE/nodes
SECRET_FILE=$STATE/job-secret

compute_nodes() {
	local s
	for s in "${SITES[@]}"; do echo "${s}1" "${s}2"; done
}

is_compute_node() {
	local s=${NODE_SITE[$1]:-}
	[ -n "$s" ] && { [ "$1" = "${s}1" ] || [ "$1" = "${s}2" ]; }
}

# Start order; stop in reverse (a helper withdraws through its frontend).
services_list() {
	local s n
	echo broker
	echo proxy
	if [ "$LAB_PROXIES" = 2 ] || [ -e "$ETC_DIR/proxy2.conf" ]; then echo proxy2; fi
	for s in "${SITES[@]}"; do echo "frontend-$s"; done
	for n in $(compute_nodes); do echo "helper-$n"; done
}

svc_node() {
	case $1 in
	broker) echo broker ;;
	proxy | proxy2) echo proxy ;;
	frontend-*) echo "${1#frontend-}-head" ;;
	helper-*) echo "${1#helper-}" ;;
	esac
}

svc_bin() {
	case $1 in
	broker) echo "$BROKER_BIN" ;;
	proxy | proxy2) echo "$PROXY_BIN" ;;
	frontend-*) echo "$FRONTEND_BIN" ;;
	helper-*) echo "$HELPER_BIN" ;;
	esac
}

svc_conf() { echo "$ETC_DIR/$1.conf"; }
svc_log() { echo "$LOG_DIR/$1.log"; }
svc_pidfile() { echo "$RUN_DIR/$1.pid"; }
helper_socket() { echo "$NODE_DIR/$1/helper.sock"; }
frontend_url() {
	local a=${NODE_IP[$1-head]}
	[[ $a == *:* ]] && a="[$a]"
	echo "https://$a:$FRONTEND_PORT/"
}

# The frontend's name for what the site's router does (or QCG_LAB_DECLARE's).
frontend_kind() {
	local d
	for d in $LAB_DECLARE; do
		[ "${d%%=*}" = "$1" ] && echo "${d#*=}" && return 0
	done
	case ${SITE_KIND[$1]} in
	symmetric-nat) echo symnat ;;
	*) echo "${SITE_KIND[$1]}" ;;
	esac
}

# A helper's address line: the node's address, and its IPv6 one beside it.
helper_address() {
	local a=${NODE_IP[$1]} a6=${NODE_IP6[$1]:-}
	[ -n "$a6" ] && [ "$a6" != "$a" ] && a+=", $a6"
	echo "$a"
}

# The node's range minus the ports kept for verify (and from automatic assignment).
helper_ports() { echo "$(port_first "$1")-$(($(port_last "$1") - VERIFY_PORTS))"; }

# The pid of a running service ("" and 1 when it does not run).
svc_pid() {
	local f pid
	f=$(svc_pidfile "$1")
	[ -r "$f" ] || return 1
	pid=$(cat "$f")
	pid_alive "$pid" && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$(basename "$(svc_bin "$1")")" ] ||
		return 1
	echo "$pid"
}

# Processes of the service's program in its namespace that no pid file knows (left
# by an `up` killed between starting one and writing its pid file).
svc_strays() {
	local name=$1 ns comm known pid
	ns=$(node_ns "$(svc_node "$name")")
	ns_exists "$ns" || return 0
	comm=$(basename "$(svc_bin "$name")")
	known=$(svc_pid "$name") || known=""
	# The two proxies share a node: neither is the other's stray.
	case $name in proxy | proxy2) known+=" $(svc_pid proxy || true) $(svc_pid proxy2 || true)" ;; esac
	for pid in $(ip netns pids "$ns" 2>/dev/null); do
		[[ " $known " == *" $pid "* ]] && continue
		[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ] && pid_alive "$pid" && echo "$pid"
	done
	return 0
}

# The binary was rebuilt (or QCG_BUILD_DIR changed) since the service started.
svc_binary_changed() {
	local exe
	exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 0
	[ "$exe" != "$(readlink -f "$2")" ]
}

# ---------------------------------------------------------------------------------
# Certificates, configs, secret

# Binaries and tools `up` needs for the services; dies before anything is made.
services_check_tools() {
	local f missing=()
	for f in "$BROKER_BIN" "$PROXY_BIN" "$FRONTEND_BIN" "$HELPER_BIN" "$CAT_BIN"; do
		[ -x "$f" ] || missing+=("$f")
	done
	[ ${#missing[@]} -eq 0 ] ||
		die "not built: ${missing[*]}; build first (cmake -S $REPO -B $BUILD_DIR && cmake --build $BUILD_DIR), set QCG_BUILD_DIR, or use up --no-services"
	[ -x "$CERTS_TOOL" ] || die "missing $CERTS_TOOL"
	need_tools openssl setsid ss
}

# The token key the broker shares with qcg-proxy (its config's proxy-key), made
# the way the proxy's side makes it, only when missing.
broker_proxy_key_ensure() {
	[ -s "$CERT_DIR/proxy.key" ] && return 0
	(umask 077 && openssl rand -hex 32 >"$CERT_DIR/proxy.key.tmp") &&
		mv "$CERT_DIR/proxy.key.tmp" "$CERT_DIR/proxy.key"
}

secret_ensure() {
	[ -s "$SECRET_FILE" ] && return 0
	(umask 077 && od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$SECRET_FILE.tmp") &&
		mv "$SECRET_FILE.tmp" "$SECRET_FILE"
}

CERTS_ISSUED=0
CERT_JOBS=()

# cert_issue FILE ROLE NAME [--san ADDR]: issues FILE unless it exists, in the
# background (each run has its own temporary directory); cert_wait collects them.
# --force replaces what a killed run may have left half-made (a .crt, no .pem).
cert_issue() {
	local file=$1
	shift
	[ -s "$CERT_DIR/$file" ] && return 0
	"$CERTS_TOOL" --dir "$CERT_DIR" issue "$@" --force >"$LOG_DIR/certs-$file.log" 2>&1 9<&- &
	CERT_JOBS+=("$!:$file")
	CERTS_ISSUED=1
}

cert_wait() {
	local job failed=()
	for job in "${CERT_JOBS[@]}"; do
		wait "${job%%:*}" || failed+=("${job#*:}")
		cat "$LOG_DIR/certs-${job#*:}.log" >>"$LOG_DIR/certs.log" 2>/dev/null || true
		rm -f "$LOG_DIR/certs-${job#*:}.log"
	done
	CERT_JOBS=()
	[ ${#failed[@]} -eq 0 ] || die "qcg-certs could not issue ${failed[*]}: $(tail -n 3 "$LOG_DIR/certs.log")"
}

certs_ensure() {
	local s n
	if [ ! -s "$CERT_DIR/ca.crt" ] || [ ! -s "$CERT_DIR/ca.key" ]; then
		# A new CA: whatever was issued before no longer verifies.
		rm -rf "$CERT_DIR"
		"$CERTS_TOOL" --dir "$CERT_DIR" init >>"$LOG_DIR/certs.log" 2>&1 ||
			die "qcg-certs init failed: $(tail -n 3 "$LOG_DIR/certs.log")"
		CERTS_ISSUED=1
	fi
	cert_issue broker-broker.pem broker --san "${NODE_IP[broker]},${NODE_IP6[broker]}"
	cert_issue proxy-lab.pem proxy lab --san "${NODE_IP[proxy]},${NODE_IP6[proxy]}"
	cert_issue proxy-lab2.pem proxy lab2 --san "${NODE_IP[proxy]},${NODE_IP6[proxy]}"
	for s in "${SITES[@]}"; do
		cert_issue "frontend-$s.pem" frontend "$s" --san "${NODE_IP[$s-head]}"
	done
	for n in $(compute_nodes); do
		cert_issue "helper-${NODE_SITE[$n]}-$n.pem" helper "${NODE_SITE[$n]}/$n"
	done
	cert_wait
	# A lab made before init wrote one: every service loads the list.
	if [ ! -s "$CERT_DIR/crl.pem" ]; then
		"$CERTS_TOOL" --dir "$CERT_DIR" crl >>"$LOG_DIR/certs.log" 2>&1 ||
			die "qcg-certs crl failed: $(tail -n 3 "$LOG_DIR/certs.log")"
	fi
}

# A proxy service's certificate name and ports.
proxy_name() { [ "$1" = proxy2 ] && echo lab2 || echo lab; }
proxy_port() { [ "$1" = proxy2 ] && echo "$LAB_PROXY2_PORT" || echo "$LAB_PROXY_PORT"; }
proxy_control_port() { [ "$1" = proxy2 ] && echo "$PROXY2_CONTROL_PORT" || echo "$PROXY_CONTROL_PORT"; }

# The broker's `proxy` line: NAME@ADDRESS:PORT of each proxy of the lab, once
# per family (IPv4 first: dual-stack nodes keep reaching it over IPv4; an
# IPv6-only node is given the IPv6 address, and the proxy bridges it).
lab_proxies() {
	local line="lab@${NODE_IP[proxy]}:$LAB_PROXY_PORT,lab@[${NODE_IP6[proxy]}]:$LAB_PROXY_PORT"
	[ "$LAB_PROXIES" = 2 ] &&
		line+=",lab2@${NODE_IP[proxy]}:$LAB_PROXY2_PORT,lab2@[${NODE_IP6[proxy]}]:$LAB_PROXY2_PORT"
	echo "$line"
}

# The config file of a service, on stdout.
svc_config() {
	local name=$1 s n
	echo "# $name: written by qcg-lab up (rewritten, and the service restarted, when it changes)"
	case $name in
	broker)
		# Both families on one socket.
		cat <<-EOF
			listen = ::
			port = $BROKER_PORT
			ca = $CERT_DIR/ca.crt
			cert = $CERT_DIR/broker-broker.pem
			crl = $CERT_DIR/crl.pem
			log-level = $SVC_LOG_LEVEL
			proxy = $(lab_proxies)
			proxy-key = $CERT_DIR/proxy.key
			reflector = ${NODE_IP[broker]}:$REFLECTOR_PORT, [${NODE_IP6[broker]}]:$REFLECTOR_PORT
		EOF
		;;
	proxy | proxy2)
		cat <<-EOF
			listen = ::
			port = $(proxy_port "$name")
			control-port = $(proxy_control_port "$name")
			ca = $CERT_DIR/ca.crt
			cert = $CERT_DIR/proxy-$(proxy_name "$name").pem
			crl = $CERT_DIR/crl.pem
			key-file = $CERT_DIR/proxy.key
			broker = $BROKER_URL
			log-level = $SVC_LOG_LEVEL
		EOF
		;;
	frontend-*)
		s=${name#frontend-}
		cat <<-EOF
			listen = ${NODE_IP[$s-head]}
			port = $FRONTEND_PORT
			broker = $(site_v4 "$s" && echo "$BROKER_URL" || echo "$BROKER_URL6")
			kind = $(frontend_kind "$s")
			ca = $CERT_DIR/ca.crt
			cert = $CERT_DIR/frontend-$s.pem
			crl = $CERT_DIR/crl.pem
			log-level = $SVC_LOG_LEVEL
		EOF
		# The site's LAN: its nodes' addresses.  Open and firewalled sites' nodes
		# are public themselves; NATed ones appear from the router's WAN address.
		# An IPv6 prefix beside it (the site's whole prefix), and the range its
		# IPv6 firewall lets in.
		if ! site_v4 "$s"; then
			echo "addresses = ${SITE_LAN6[$s]}"
		else
			echo "addresses = ${SITE_LAN[$s]}${SITE_LAN6[$s]:+, ${SITE_LAN6[$s]}}"
		fi
		[ -z "${SITE_OPEN6[$s]}" ] || echo "open-addresses = ${SITE_OPEN6[$s]}"
		case ${SITE_KIND[$s]} in
		nat | symmetric-nat) echo "public-address = $(wan_router_ip "$s")" ;;
		esac
		;;
	helper-*)
		n=${name#helper-}
		cat <<-EOF
			socket = $(helper_socket "$n")
			frontend = $(frontend_url "${NODE_SITE[$n]}")
			address = $(helper_address "$n")
			ports = $(helper_ports "$n")
			ca = $CERT_DIR/ca.crt
			cert = $CERT_DIR/helper-${NODE_SITE[$n]}-$n.pem
			crl = $CERT_DIR/crl.pem
			log-level = $SVC_LOG_LEVEL
		EOF
		if helper_unprivileged "$n"; then
			echo "# unprivileged: started without CAP_NET_ADMIN and CAP_NET_RAW"
		fi
		;;
	esac
	monitor_config_lines "$name"
}

# ---------------------------------------------------------------------------------
# Start, stop, readiness

# Whether node N's helper runs without privileges (QCG_LAB_UNPRIVILEGED names its site).
helper_unprivileged() {
	local s
	for s in $LAB_UNPRIVILEGED; do [ "$s" = "${NODE_SITE[$1]}" ] && return 0; done
	return 1
}

svc_start() {
	local name=$1 ns bin pid drop=()
	ns=$(node_ns "$(svc_node "$name")")
	bin=$(svc_bin "$name")
	echo "=== $(date '+%F %T') qcg-lab starts $name" >>"$(svc_log "$name")"
	# Root without the two capabilities: they leave the bounding set before exec.
	if [[ $name == helper-* ]] && helper_unprivileged "${name#helper-}"; then
		# shellcheck disable=SC2054 # the commas are setpriv's list syntax
		drop=(setpriv --bounding-set=-net_admin,-net_raw --inh-caps=-net_admin,-net_raw)
	fi
	# setsid: a daemon, not part of the caller's terminal job; fd 9 is the lab lock.
	ip netns exec "$ns" setsid "${drop[@]}" "$bin" --config "$(svc_conf "$name")" \
		</dev/null >>"$(svc_log "$name")" 2>&1 9<&- &
	pid=$!
	echo "$pid" >"$(svc_pidfile "$name")"
	# Until it is the service (not yet ip or setsid): svc_pid knows it by name.
	local i comm
	comm=$(basename "$bin")
	for ((i = 0; i < 250; i++)); do
		[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ] && return 0
		pid_alive "$pid" || return 0 # svc_wait reports it, with its log
		sleep 0.02
	done
	return 0
}

# svc_stop NAME...: SIGTERM to all at once, a bounded wait, then SIGKILL.
svc_stop() {
	local name pid pids=() i
	for name in "$@"; do
		pid=$(svc_pid "$name") && pids+=("$pid")
		for pid in $(svc_strays "$name"); do pids+=("$pid"); done
		rm -f "$(svc_pidfile "$name")"
	done
	[ ${#pids[@]} -gt 0 ] || return 0
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for ((i = 0; i < 100; i++)); do
		all_dead "${pids[@]}" && return 0
		sleep 0.05
	done
	for pid in "${pids[@]}"; do pid_alive "$pid" && kill -KILL "$pid" 2>/dev/null; done
	for ((i = 0; i < 40; i++)); do
		all_dead "${pids[@]}" && return 0
		sleep 0.05
	done
	return 0
}

all_dead() {
	local pid
	for pid in "$@"; do pid_alive "$pid" && return 1; done
	return 0
}

# Stops every service: helpers first (they withdraw through their frontend), then
# frontends and broker together (each takes up to a second to see the stop).
services_stop() {
	local helpers others
	mapfile -t helpers < <(services_list | grep '^helper-')
	mapfile -t others < <(services_list | grep -v '^helper-')
	svc_stop "${helpers[@]}"
	svc_stop "${others[@]}"
}

# One value of a flat JSON object on stdin: json_value KEY.
json_value() { sed -n "s/.*\"$1\":\(\"[^\"]*\"\|[^,}]*\).*/\1/p" | tr -d '"'; }

broker_stats_json() {
	ip netns exec "$(node_ns broker)" "$BROKER_BIN" --config "$(svc_conf broker)" \
		--stats --json --url "$BROKER_URL" 2>/dev/null
}

# proxy_stats_json [proxy|proxy2]
proxy_stats_json() {
	local name=${1:-proxy}
	ip netns exec "$(node_ns proxy)" "$PROXY_BIN" --config "$(svc_conf "$name")" --stats --json \
		--url "https://${NODE_IP[proxy]}:$(proxy_control_port "$name")/" 2>/dev/null
}

frontend_stats_json() {
	ip netns exec "$(node_ns "$1-head")" "$FRONTEND_BIN" --config "$(svc_conf "frontend-$1")" \
		--stats --json 2>/dev/null
}

helper_status_json() {
	ip netns exec "$(node_ns "$1")" "$HELPER_BIN" --status --json --socket "$(helper_socket "$1")" \
		2>/dev/null
}

svc_listening() {
	ip netns exec "$(node_ns "$1")" ss -ltnH "sport = :$2" 2>/dev/null | grep -q .
}

# Ready: the broker listens; a frontend listens and is connected to the broker; a
# helper answers on its socket and is connected to its frontend.
svc_ready() {
	case $1 in
	broker) svc_listening broker "$BROKER_PORT" ;;
	proxy | proxy2)
		svc_listening proxy "$(proxy_port "$1")" && svc_listening proxy "$(proxy_control_port "$1")" ;;
	frontend-*)
		svc_listening "$(svc_node "$1")" "$FRONTEND_PORT" &&
			[ "$(frontend_stats_json "${1#frontend-}" | json_value upstream_connected)" = 1 ] ;;
	helper-*) [ "$(helper_status_json "${1#helper-}" | json_value upstream_connected)" = true ] ;;
	esac
}

# svc_wait SECONDS NAME...: until every one is ready; dies naming the first that
# died or is still not ready, with the tail of its log.
svc_wait() {
	local secs=$1 name pending=() left=() t_end
	shift
	pending=("$@")
	t_end=$(($(date +%s%N) / 1000000 + secs * 1000))
	while [ ${#pending[@]} -gt 0 ]; do
		left=()
		for name in "${pending[@]}"; do
			if ! svc_pid "$name" >/dev/null; then
				svc_failed "$name" "exited"
			fi
			svc_ready "$name" || left+=("$name")
		done
		pending=("${left[@]}")
		[ ${#pending[@]} -eq 0 ] && return 0
		[ "$(($(date +%s%N) / 1000000))" -lt "$t_end" ] || svc_failed "${pending[0]}" \
			"not ready after ${secs}s (not ready: ${pending[*]})"
		sleep 0.1
	done
}

svc_failed() {
	echo "$PROG: $1 on $(svc_node "$1") $2; its log since it was started ($(svc_log "$1")):" >&2
	awk '/^=== .* qcg-lab starts / { n = 0 } { line[n++] = $0 }
		END { for (i = (n > 15 ? n - 15 : 0); i < n; i++) print "    " line[i] }' \
		"$(svc_log "$1")" >&2 2>/dev/null || true
	die "services not up (logs in $LOG_DIR; $PROG down removes everything)"
}

# services_up: certificates, configs, then each tier started and waited for.
services_up() {
	local name tier started=() all
	mkdir -p "$ETC_DIR" "$LOG_DIR" "$RUN_DIR" "$NODE_DIR"
	secret_ensure
	certs_ensure
	broker_proxy_key_ensure
	if [ "$LAB_PROXIES" != 2 ] && [ -e "$ETC_DIR/proxy2.conf" ]; then
		svc_stop proxy2
		rm -f "$ETC_DIR/proxy2.conf"
	fi
	mapfile -t all < <(services_list)
	for tier in broker proxy frontend- helper-; do
		started=()
		for name in "${all[@]}"; do
			case $name in "$tier"*) ;; *) continue ;; esac
			svc_config "$name" >"$(svc_conf "$name").new"
			local pid=""
			pid=$(svc_pid "$name") || pid=""
			if [ -n "$pid" ] && [ "$CERTS_ISSUED" = 0 ] &&
				cmp -s "$(svc_conf "$name").new" "$(svc_conf "$name")" &&
				! svc_binary_changed "$pid" "$(svc_bin "$name")"; then
				rm -f "$(svc_conf "$name").new"
				continue
			fi
			svc_stop "$name"
			mv "$(svc_conf "$name").new" "$(svc_conf "$name")"
			svc_start "$name"
			started+=("$name")
		done
		[ ${#started[@]} -gt 0 ] && svc_wait "$SVC_WAIT" "${started[@]}"
	done
	# Also those left running: a frontend or helper may be reconnecting.
	svc_wait "$SVC_WAIT" "${all[@]:1}" # broker first in the list, and ready above
}

# ---------------------------------------------------------------------------------
# status

# One line per service: where, pid, upstream, and its counters.
services_status() {
	local name pid node js up detail ok=0
	printf '%-15s %-10s %-9s %-9s %s\n' service node pid upstream counters
	for name in $(services_list); do
		node=$(svc_node "$name")
		pid=$(svc_pid "$name") || { pid="-" ok=1; }
		up="-" detail=""
		if [ "$pid" != - ]; then
			case $name in
			broker)
				js=$(broker_stats_json) || js=""
				up="n/a"
				detail=$(stats_line "$js" clusters nodes jobs contacts lookups publishes faults) ;;
			proxy | proxy2)
				js=$(proxy_stats_json "$name") || js=""
				up="n/a"
				detail=$(stats_line "$js" pairs_active pairs_total bytes_relayed refused_bad_token refused_replay refused_expired unpaired_timeouts) ;;
			frontend-*)
				js=$(frontend_stats_json "${name#frontend-}") || js=""
				up=$(yes_no "$(echo "$js" | json_value upstream_connected)")
				detail=$(stats_line "$js" nodes contacts lookups_received lookups_from_cache lookups_forwarded denied) ;;
			helper-*)
				js=$(helper_status_json "$node") || js=""
				up=$(yes_no "$(echo "$js" | json_value upstream_connected)")
				detail=$(stats_line "$js" contacts clients lookups) ;;
			esac
			[ -n "$js" ] || detail="(no answer)"
		fi
		printf '%-15s %-10s %-9s %-9s %s\n' "$name" "$node" "$pid" "$up" "$detail"
	done
	return $ok
}

yes_no() {
	case $1 in 1 | true) echo yes ;; 0 | false) echo no ;; *) echo "?" ;; esac
}

# stats_line JSON KEY...: "key value, key value".
stats_line() {
	local js=$1 k out=""
	shift
	[ -n "$js" ] || return 0
	for k in "$@"; do out+="${out:+, }$k $(echo "$js" | json_value "$k")"; done
	echo "$out"
}

# ---------------------------------------------------------------------------------
# exec

# The environment a command run in NODE needs to use the grid.
services_env() {
	local node=$1
	export PATH="$BUILD_DIR/tools:$BUILD_DIR/broker:$BUILD_DIR/proxy:$BUILD_DIR/frontend:$BUILD_DIR/helper:$PATH"
	if [ -r "$SECRET_FILE" ]; then
		QCG_JOB_SECRET=$(cat "$SECRET_FILE")
		export QCG_JOB_SECRET
	fi
	if is_compute_node "$node"; then
		QCG_HELPER_SOCKET=$(helper_socket "$node")
		export QCG_HELPER_SOCKET
	fi
	# CMake sets a run path to libqcgconn; a build without one needs this.
	if [ -x "$CAT_BIN" ] && ldd "$CAT_BIN" 2>/dev/null | grep -q 'libqcgconn.*not found'; then
		export LD_LIBRARY_PATH="$BUILD_DIR/libqcgconn${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	fi
	return 0
}
