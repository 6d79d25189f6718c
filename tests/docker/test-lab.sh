#!/usr/bin/env bash
# docker-lab: the images run a grid in the lab, and qcg-cat (the helper
# image's) connects across it both ways with the data intact.
#
#   broker ns:  [qcg-l-broker]  203.0.113.10:7700     proxy ns: [qcg-l-proxy] 203.0.113.20:7703
#                     ^ frontends connect out                  (the broker's proxy)
#   nata-head:  [qcg-l-frontend-nata] 198.18.1.10:7701    kind nat, public 203.0.113.66
#   nata1:      [qcg-l-helper-nata1]  198.18.1.11
#   open-head:  [qcg-l-frontend-open] 198.51.100.10:7701  kind open
#   open1:      [qcg-l-helper-open1]  198.51.100.11
#   fw-head:    [qcg-l-frontend-fw]   198.51.100.74:7701  kind firewalled
#   fw1:        [qcg-l-helper-fw1]    198.51.100.75
#
#   nata1 -> open1  direct      (the open node accepts)
#   open1 -> nata1  reversed    (the NATed node connects out)
#   nata1 -> fw1    traversing  (both helpers' packet engines, in their
#                                containers with NET_ADMIN and NET_RAW only)
#
# The lab is built with `qcg-lab up --no-services`.  Docker cannot start a
# container in a namespace it did not make (no --network ns:PATH), and a daemon
# started with --network none binds its address at once, before anyone could
# give it a link (the frontend then fails: "Cannot assign requested address").
# So each node gets a holder first, as a pod does: a `sleep` container with
# --network none, into whose namespace the node namespace's qcg-eth0 moves with
# its address, default route and port ranges.  The node's service container
# then joins it with --network container:HOLDER and finds its address there,
# as with network_mode: host on a real machine.  At the end every link goes
# back to its node, the containers and the dockerd go, and the lab is taken
# down.  One dockerd, the test's own, safe.
. "$(dirname "$0")/lib.sh"
require_docker
command -v ip >/dev/null && ip netns list >/dev/null 2>&1 || skip "no ip netns"
LAB=$REPO/lab/qcg-lab
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
lab_ours=
cleanup_last() {
	[ -n "$lab_ours" ] || return 0
	"$LAB" down >"$scratch/lab-down.log" 2>&1 || { cat "$scratch/lab-down.log" >&2; return 1; }
}

# The lab is one per machine: never take down one this test did not bring up.
[ "$("$LAB" status 2>/dev/null | head -n 1)" = "qcg-lab: down" ] ||
	fail "the lab is up (another test's?): run this with the lab down"
t0=$SECONDS
lab_ours=yes
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
	frontend:nata:198.18.1.10 frontend:open:198.51.100.10 frontend:fw:198.51.100.74 \
	helper:nata/nata1: helper:open/open1: helper:fw/fw1:
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
	addresses = 198.18.1.0/24
EOF
conf frontend-open frontend <<-EOF
	listen = 198.51.100.10
	ca = /etc/qcg/ca.crt
	cert = /etc/qcg/frontend-open.pem
	broker = https://203.0.113.10:7700/
	kind = open
	addresses = 198.51.100.0/26
EOF
conf frontend-fw frontend <<-EOF
	listen = 198.51.100.74
	ca = /etc/qcg/ca.crt
	cert = /etc/qcg/frontend-fw.pem
	broker = https://203.0.113.10:7700/
	kind = firewalled
	addresses = 198.51.100.64/26
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
conf helper-fw1 helper <<-EOF
	frontend = https://198.51.100.74:7701/
	ca = /etc/qcg/ca.crt
	cert = /etc/qcg/helper-fw-fw1.pem
	address = 198.51.100.75
	ports = 24000-24989
EOF

# hold NODE: a holder container (qcg-l-node-NODE) with NODE's link, address,
# default route and port ranges in its network namespace.
hold() {
	local node=$1 c=qcg-l-node-$1 pid cidr gw range reserved
	cidr=$(ip -n "qcg-$node" -4 -o addr show dev qcg-eth0 | awk '{print $4; exit}')
	gw=$(ip -n "qcg-$node" route show default | awk '{print $3; exit}')
	range=$(ip netns exec "qcg-$node" sysctl -n net.ipv4.ip_local_port_range | tr -s '\t ' ' ')
	reserved=$(ip netns exec "qcg-$node" sysctl -n net.ipv4.ip_local_reserved_ports)
	[ -n "$cidr" ] && [ -n "$gw" ] || fail "node $node has no address or route"
	drun --name "$c" --init --network none --read-only --no-healthcheck \
		--cap-drop ALL --user 65534 --entrypoint sleep "qcg-helper:$TAG" infinity
	pid=$(docker inspect -f '{{.State.Pid}}' "$c")
	[ "$pid" -gt 0 ] || fail "$c is not running"
	ip -n "qcg-$node" link set qcg-eth0 netns "$pid"
	placed+=("$node $pid $cidr $gw")
	nsenter -t "$pid" -n ip addr add "$cidr" dev qcg-eth0
	nsenter -t "$pid" -n ip link set qcg-eth0 up
	nsenter -t "$pid" -n ip route add default via "$gw"
	nsenter -t "$pid" -n sysctl -qw net.ipv4.ip_local_port_range="$range" \
		net.ipv4.ip_local_reserved_ports="$reserved"
}

# start NAME IMAGE NODE [docker run options]: a container of IMAGE as NODE,
# in NODE's holder.
health=(--health-interval 1s --health-timeout 10s --health-start-period 0s)
start() {
	local name=$1 image=$2 node=$3
	shift 3
	drun --name "qcg-l-$name" --init --network "container:qcg-l-node-$node" --read-only \
		"${health[@]}" -v "$scratch/etc-$name:/etc/qcg-connect:ro" -v "$certs:/etc/qcg:ro" \
		"$@" "qcg-$image:$TAG"
}
nodes=(broker proxy nata-head open-head fw-head nata1 open1 fw1)
for n in "${nodes[@]}"; do
	hold "$n"
done
say "${#nodes[@]} holders with their nodes' links at $((SECONDS - t0)) s"
start broker broker broker --cap-drop ALL
start proxy proxy proxy --cap-drop ALL
start frontend-nata frontend nata-head --cap-drop ALL
start frontend-open frontend open-head --cap-drop ALL
start frontend-fw frontend fw-head --cap-drop ALL
helpers=(nata1 open1 fw1)
for n in "${helpers[@]}"; do
	mkdir -p "$scratch/run-$n"
	start "helper-$n" helper "$n" --cap-drop ALL --cap-add NET_ADMIN --cap-add NET_RAW \
		-v "$scratch/run-$n:/run/qcg"
done
for c in broker proxy frontend-nata frontend-open frontend-fw "${helpers[@]/#/helper-}"; do
	wait_healthy "qcg-l-$c" 30
done
say "broker, proxy, 3 frontends, 3 helpers healthy at $((SECONDS - t0)) s"

# Helpers connected upstream (their frontends, hence the broker): 30 s at most.
# Each one's packet engine up (iptables in the image, NET_ADMIN and NET_RAW).
for n in "${helpers[@]}"; do
	for ((i = 0; i < 150; i++)); do
		st=$(docker exec "qcg-l-helper-$n" qcg-helper --status --json 2>/dev/null || true)
		grep -q '"upstream_connected":true' <<<"$st" && break
		sleep 0.2
	done
	[ $i -lt 150 ] || fail "helper on $n not connected to its frontend within 30 s"
	# (Never piped into grep -q or head: under pipefail, a writer cut short fails.)
	log=$(docker logs "qcg-l-helper-$n" 2>&1)
	grep -q 'traversing TCP ready' <<<"$log" || { echo "$log" >&2; fail "helper on $n: its packet engine did not start"; }
done

secret=$(openssl rand -hex 16)
head -c 4194304 /dev/urandom >"$scratch/in"
job=qcg-docker-lab-$$

# transfer FROM TO RANK_LISTEN RANK_CONNECT TECHNIQUE: qcg-cat in TO's helper
# container listens, qcg-cat in FROM's connects and sends 4 MiB: the same
# sha256 out as in, TECHNIQUE on the connecting side (and on the accepting
# side, which sees a traversed connection arrive like a direct one).
sum_in=$(sha256sum <"$scratch/in" | cut -d' ' -f1)
technique() { sed -n 's/.*"technique":"\([a-z]*\)".*/\1/p' | tail -n 1; }
transfer() {
	local from=$1 to=$2 rl=$3 rc=$4 want=$5 i pid json sum tech atech
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
	sum=$(sha256sum <"$scratch/out" | cut -d' ' -f1)
	[ "$sum" = "$sum_in" ] || fail "$from -> $to: sha256 $sum received, $sum_in sent ($(stat -c %s "$scratch/out") bytes)"
	tech=$(technique <<<"$json")
	[ "$tech" = "$want" ] || { echo "$json" >&2; fail "$from -> $to: the connecting side used '$tech', not $want"; }
	atech=$(technique <"$scratch/listen.err")
	[ "$atech" = "$want" ] || { [ "$want" = traversing ] && [ "$atech" = direct ]; } ||
		{ cat "$scratch/listen.err" >&2; fail "$from -> $to: the accepting side says '$atech', not $want"; }
	say "$from -> $to: 4 MiB, same sha256, $want: $(tail -n 1 <<<"$json")"
}
transfer nata1 open1 0 1 direct
transfer open1 nata1 3 2 reversed
transfer nata1 fw1 4 5 traversing

# qcg-probe from the helper image: towards fw, traversing is what a job gets
# and works; direct cannot, and says why.
probe=$(docker exec qcg-l-helper-nata1 qcg-probe --json --site fw --timeout 60) ||
	{ echo "$probe" >&2; fail "qcg-probe in the nata1 helper container"; }
python3 - "$probe" <<'PY' || { echo "$probe" >&2; fail "qcg-probe's answer from the nata1 container"; }
import json, sys
p = json.loads(sys.argv[1])
assert p["site"] == "nata" and p["node"] == "nata1", p["site"]
assert p["declared"]["kind"] == "nat", p["declared"]
[fw] = p["peers"]
assert fw["site"] == "fw" and fw["chosen"] == "traversing", fw
t = fw["techniques"]
assert t["traversing"]["works"] and t["proxy"]["works"], t
assert not t["direct"]["works"] and "firewalled" in t["direct"]["why"], t["direct"]
PY
say "qcg-probe in the nata1 container: towards fw, $(sed -n 's/.*"chosen":"\([a-z]*\)".*/\1/p' <<<"$probe")"
stats=$(docker exec qcg-l-broker qcg-broker --config /etc/qcg-connect/qcg-broker.conf --syslog=no --stats)
sed -n 's/^/  broker: /; 1,12p' <<<"$stats"
say "done in $((SECONDS - t0)) s"
