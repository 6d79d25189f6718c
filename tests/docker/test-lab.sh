#!/usr/bin/env bash
# docker-lab: the images run a grid in the lab, and qcg-cat (the helper
# image's) connects across it both ways with the data intact.
#
#   broker ns:  [qcg-l-broker]  203.0.113.10:7700     proxy ns: [qcg-l-proxy] 203.0.113.20:7703
#                     ^ frontends connect out                  (the broker's proxy)
#   nata-head:  [qcg-l-frontend-nata] 198.18.1.10:7701 kind nat, public 203.0.113.66
#   nata1:      [qcg-l-helper-nata1]  198.18.1.11      qcg-cat rank 1 / rank 3
#   open-head:  [qcg-l-frontend-open] 198.51.100.10:7701 kind open
#   open1:      [qcg-l-helper-open1]  198.51.100.11    qcg-cat rank 0 / rank 2
#
# The lab is built with `qcg-lab up --no-services`; each container starts with
# --network none and is then given its node's link: the node namespace's
# qcg-eth0 moves into the container's namespace with its address, route and
# port range (the way notes/docker.md describes, with the lab's own veth), so
# the container *is* the node, as with network_mode: host on a real machine.
# At the end every link goes back to its node, the containers and the dockerd
# go, and the lab is taken down.  One dockerd, the test's own, safe.
. "$(dirname "$0")/lib.sh"
require_docker
command -v ip >/dev/null && ip netns list >/dev/null 2>&1 || skip "no ip netns"
LAB=$REPO/tests/lab/qcg-lab
export QCG_BUILD_DIR=$BUILD

scratch_begin docker-lab
placed=() # "node pid cidr gw"

# Every link back to its node before the containers (and their namespaces) go.
cleanup_first() {
	local e node pid cidr gw
	for e in "${placed[@]}"; do
		read -r node pid cidr gw <<<"$e"
		nsenter -t "$pid" -n ip link set qcg-eth0 netns "qcg-$node" 2>/dev/null || continue
		ip -n "qcg-$node" addr add "$cidr" dev qcg-eth0 2>/dev/null || true
		ip -n "qcg-$node" link set qcg-eth0 up 2>/dev/null || true
		ip -n "qcg-$node" route add default via "$gw" 2>/dev/null || true
	done
	placed=()
}
cleanup_last() {
	"$LAB" down >"$scratch/lab-down.log" 2>&1 || { cat "$scratch/lab-down.log" >&2; return 1; }
}

t0=$SECONDS
"$LAB" up --no-services >"$scratch/lab-up.log" 2>&1 || { cat "$scratch/lab-up.log" >&2; fail "qcg-lab up --no-services"; }
say "lab up (no services) in $((SECONDS - t0)) s"
qcg_dockerd_start "$scratch/dockerd"
"$REPO/docker/build-images" --build-dir "$BUILD" --tag "$TAG" >"$scratch/build-images.log" 2>&1 ||
	{ cat "$scratch/build-images.log" >&2; fail "build-images"; }
say "images ready at $((SECONDS - t0)) s"

# Certificates: servers name the address they are dialled at (and 127.0.0.1
# for the health check of broker and proxy).
certs=$scratch/qcg
make_certs "$certs" broker:broker:203.0.113.10,127.0.0.1 proxy:lab:203.0.113.20,127.0.0.1 \
	frontend:nata:198.18.1.10 frontend:open:198.51.100.10 helper:nata/nata1: helper:open/open1:
# One config directory per container, mounted at /etc/qcg-connect.
conf() { mkdir -p "$scratch/etc-$1" && cat >"$scratch/etc-$1/qcg-$2.conf"; }
conf broker broker <<-EOF
	ca = /etc/qcg/ca.crt
	cert = /etc/qcg/broker-broker.pem
	proxy = lab@203.0.113.20:7703
	proxy-key = /etc/qcg/proxy.key
EOF
conf proxy proxy <<-EOF
	ca = /etc/qcg/ca.crt
	cert = /etc/qcg/proxy-lab.pem
	key-file = /etc/qcg/proxy.key
EOF
conf frontend-nata frontend <<-EOF
	listen = 198.18.1.10
	ca = /etc/qcg/ca.crt
	cert = /etc/qcg/frontend-nata.pem
	broker = https://203.0.113.10:7700/
	kind = nat
	public-address = 203.0.113.66
EOF
conf frontend-open frontend <<-EOF
	listen = 198.51.100.10
	ca = /etc/qcg/ca.crt
	cert = /etc/qcg/frontend-open.pem
	broker = https://203.0.113.10:7700/
	kind = open
EOF
conf helper-nata1 helper <<-EOF
	frontend = https://198.18.1.10:7701/
	ca = /etc/qcg/ca.crt
	cert = /etc/qcg/helper-nata-nata1.pem
	address = 198.18.1.11
	ports = 27000-27989
EOF
conf helper-open1 helper <<-EOF
	frontend = https://198.51.100.10:7701/
	ca = /etc/qcg/ca.crt
	cert = /etc/qcg/helper-open-open1.pem
	address = 198.51.100.11
	ports = 21000-21989
EOF

# place CONTAINER NODE: NODE's link, address, default route and port range
# into CONTAINER's network namespace.
place() {
	local c=$1 node=$2 pid cidr gw range
	pid=$(docker inspect -f '{{.State.Pid}}' "$c")
	[ "$pid" -gt 0 ] || fail "$c is not running"
	cidr=$(ip -n "qcg-$node" -4 -o addr show dev qcg-eth0 | awk '{print $4; exit}')
	gw=$(ip -n "qcg-$node" route show default | awk '{print $3; exit}')
	range=$(ip netns exec "qcg-$node" sysctl -n net.ipv4.ip_local_port_range | tr -s '\t ' ' ')
	[ -n "$cidr" ] && [ -n "$gw" ] || fail "node $node has no address or route"
	ip -n "qcg-$node" link set qcg-eth0 netns "$pid"
	placed+=("$node $pid $cidr $gw")
	nsenter -t "$pid" -n ip addr add "$cidr" dev qcg-eth0
	nsenter -t "$pid" -n ip link set qcg-eth0 up
	nsenter -t "$pid" -n ip route add default via "$gw"
	nsenter -t "$pid" -n sysctl -qw net.ipv4.ip_local_port_range="$range"
}

# start NAME IMAGE NODE [docker run options]: a container of IMAGE as NODE.
health=(--health-interval 1s --health-timeout 10s --health-start-period 0s)
start() {
	local name=$1 image=$2 node=$3
	shift 3
	drun --name "qcg-l-$name" --init --network none --read-only "${health[@]}" \
		-v "$scratch/etc-$name:/etc/qcg-connect:ro" -v "$certs:/etc/qcg:ro" "$@" \
		"qcg-$image:$TAG"
	place "qcg-l-$name" "$node"
}
start broker broker broker --cap-drop ALL
start proxy proxy proxy --cap-drop ALL
start frontend-nata frontend nata-head --cap-drop ALL
start frontend-open frontend open-head --cap-drop ALL
for n in nata1 open1; do
	mkdir -p "$scratch/run-$n"
	start "helper-$n" helper "$n" --cap-drop ALL --cap-add NET_ADMIN --cap-add NET_RAW \
		-v "$scratch/run-$n:/run/qcg"
done
for c in broker proxy frontend-nata frontend-open helper-nata1 helper-open1; do
	wait_healthy "qcg-l-$c" 30
done
say "six containers healthy at $((SECONDS - t0)) s"

# Helpers connected upstream (their frontends, hence the broker): 30 s at most.
for n in nata1 open1; do
	for ((i = 0; i < 150; i++)); do
		docker exec "qcg-l-helper-$n" qcg-helper --status --json 2>/dev/null |
			grep -q '"upstream_connected":true' && break
		sleep 0.2
	done
	[ $i -lt 150 ] || fail "helper on $n not connected to its frontend within 30 s"
done

secret=$(openssl rand -hex 16)
head -c 4194304 /dev/urandom >"$scratch/in"
job=qcg-docker-lab-$$

# transfer FROM TO RANK_LISTEN RANK_CONNECT TECHNIQUE: qcg-cat in TO's helper
# container listens, qcg-cat in FROM's connects and sends 4 MiB.
transfer() {
	local from=$1 to=$2 rl=$3 rc=$4 want=$5 i pid json
	: >"$scratch/listen.err"
	docker exec -i -e "QCG_JOB_SECRET=$secret" "qcg-l-helper-$to" \
		timeout 60 qcg-cat --job "$job" --rank "$rl" --timeout 60 --json listen \
		>"$scratch/out" 2>"$scratch/listen.err" </dev/null &
	pid=$!
	for ((i = 0; i < 100; i++)); do
		grep -q listening "$scratch/listen.err" && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	grep -q listening "$scratch/listen.err" || { cat "$scratch/listen.err" >&2; fail "$to: qcg-cat listen did not start"; }
	json=$(docker exec -i -e "QCG_JOB_SECRET=$secret" "qcg-l-helper-$from" \
		timeout 60 qcg-cat --job "$job" --rank "$rc" --timeout 30 --json connect "$rl" \
		<"$scratch/in" 2>&1 >/dev/null) || { echo "$json" >&2; fail "$from -> $to: qcg-cat connect"; }
	wait "$pid" || { cat "$scratch/listen.err" >&2; fail "$from -> $to: qcg-cat listen"; }
	cmp -s "$scratch/in" "$scratch/out" || fail "$from -> $to: data differ"
	grep -q "\"technique\":\"$want\"" <<<"$json" ||
		{ echo "$json" >&2; fail "$from -> $to: technique is not $want"; }
	say "$from -> $to: 4 MiB intact, $want: $(tail -n 1 <<<"$json")"
}
transfer nata1 open1 0 1 direct
transfer open1 nata1 3 2 reversed
docker exec qcg-l-broker qcg-broker --config /etc/qcg-connect/qcg-broker.conf --syslog=no --stats |
	sed 's/^/  broker: /' | head -n 12
say "done in $((SECONDS - t0)) s"
