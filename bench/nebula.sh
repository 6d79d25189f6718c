#!/usr/bin/env bash
# Issue 17: Nebula's overlay against qcg-connect's encrypted connection on this
# machine, in the same run, over the same link.  Two network namespaces,
# qcg-nb-a and qcg-nb-b, joined by a veth pair (198.18.200.1 and .2); each
# round alternates, from b to a:
#   (a) plain TCP over the veth (tcp-stream),
#   (b) TCP over a Nebula overlay between the two (198.19.200.1 and .2; one
#       nebula in each namespace, a is its lighthouse; cipher: aes, i.e.
#       Noise's AESGCM: AES-256-GCM, the AEAD ours uses with 128-bit keys),
#   (c) one libqcgconn connection (tls-bench) plain and encrypted (TLS 1.3,
#       AES-128-GCM): the real broker, frontend and helper n1 in a, helper n2
#       in b, both nodes of one open cluster c1, so the ranks connect directly
#       over the veth.
# Each is a stream of SECONDS and COUNT 8-byte round trips; medians of ROUNDS
# with the spread (min-max), each end's CPU seconds per GB (and the two
# nebula daemons'), the CPU pressure line, nproc and the kernel.
#
#   flock -o -w 1800 /tmp/qcg-lab.lock bench/nebula.sh [SECONDS] [COUNT] [ROUNDS]
#       (root; QCG_BUILD_DIR, default build/; NEBULA_MTU: the overlay's, default
#       1300 as nebula's; VETH_MTU: the link's, default 1500: with 9000 and
#       NEBULA_MTU 8900, nebula's best case, its packets cost per byte less)
#
# It makes and removes the namespaces (also on failure or ^C), hence the lab lock.
set -euo pipefail
export LC_ALL=C
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${QCG_BUILD_DIR:-$src/build}" && pwd)
SECS=${1:-3}
COUNT=${2:-5000}
ROUNDS=${3:-5}
MTU=${NEBULA_MTU:-1300}
VETH_MTU=${VETH_MTU:-1500}
# shellcheck source=../tests/lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"
tcp=$build/bench/tcp-stream
bench=$build/bench/tls-bench
need_built "$helper" "$frontend" "$broker" "$certs" "$tcp" "$bench"
need_commands ip ss
if ! command -v nebula >/dev/null || ! command -v nebula-cert >/dev/null; then
	echo "nebula and nebula-cert missing: install Debian's package (apt-get install -y nebula)"
	exit 1
fi
((EUID == 0)) || { echo "needs root (network namespaces, nebula's tun device)"; exit 1; }
[[ -c /dev/net/tun ]] || { echo "no /dev/net/tun: nebula cannot make its device"; exit 1; }

NA=qcg-nb-a NB=qcg-nb-b
A=198.18.200.1 B=198.18.200.2
OA=198.19.200.1 OB=198.19.200.2
TCP_PORT=18800
for ns in $NA $NB; do
	if ip netns list | grep -qw "$ns"; then
		echo "namespace $ns exists (left by a killed run?): ip netns del $ns"
		exit 1
	fi
done

# in_ns NS CMD...: CMD in NS (background processes call ip netns exec
# themselves, so that $! is the program's pid: ip netns exec execs it).
in_ns() {
	local ns=$1
	shift
	ip netns exec "$ns" "$@"
}
die() {
	failed=1
	echo "nebula.sh: $*" >&2
	exit 1
}
cleanup() {
	local rc=$?
	grid_cleanup
	ip netns del $NA 2>/dev/null || true
	ip netns del $NB 2>/dev/null || true
	exit "$rc"
}
grid_workdir qcg-nebula
trap cleanup EXIT
trap 'exit 130' INT TERM

# The link: a veth pair made straight into the two namespaces.
ip netns add $NA
ip netns add $NB
ip link add qcg-nb-a0 netns $NA type veth peer name qcg-nb-b0 netns $NB
in_ns $NA ip addr add $A/24 dev qcg-nb-a0
in_ns $NB ip addr add $B/24 dev qcg-nb-b0
for ns in $NA $NB; do
	in_ns "$ns" ip link set lo up
	in_ns "$ns" ip link set "qcg-nb-${ns#qcg-nb-}0" mtu "$VETH_MTU" up
done
wait_for "the veth pair" 50 in_ns $NB ping -c1 -W1 $A || die "no ping over the veth"

# The overlay: a CA and two hosts from nebula-cert, a is the lighthouse.
neb=$work/nebula
mkdir "$neb"
nebula-cert ca -name qcg-nb -out-crt "$neb/ca.crt" -out-key "$neb/ca.key" >>"$work/certs.log" 2>&1
# nebula_conf NAME OVERLAY UNDERLAY PEER_OVERLAY PEER_UNDERLAY LIGHTHOUSE(true|false)
nebula_conf() {
	nebula-cert sign -ca-crt "$neb/ca.crt" -ca-key "$neb/ca.key" -name "$1" -ip "$2/24" \
		-out-crt "$neb/$1.crt" -out-key "$neb/$1.key" >>"$work/certs.log" 2>&1
	local hosts="[\"$4\"]"
	[[ $6 == true ]] && hosts="[]"
	cat >"$neb/$1.yml" <<-EOF
		pki:
		  ca: $neb/ca.crt
		  cert: $neb/$1.crt
		  key: $neb/$1.key
		static_host_map:
		  "$4": ["$5:4242"]
		lighthouse:
		  am_lighthouse: $6
		  hosts: $hosts
		listen:
		  host: $3
		  port: 4242
		punchy:
		  punch: false
		# AES-GCM, the AEAD qcg-connect uses (the default is chachapoly)
		cipher: aes
		tun:
		  dev: qcgnb0
		  mtu: $MTU
		logging:
		  level: info
		firewall:
		  outbound:
		    - port: any
		      proto: any
		      host: any
		  inbound:
		    - port: any
		      proto: any
		      host: any
	EOF
}
nebula_conf a $OA $A $OB $B true
nebula_conf b $OB $B $OA $A false
ip netns exec $NA nebula -config "$neb/a.yml" >>"$work/nebula-a.log" 2>&1 &
neb_a=$!
pids+=("$neb_a")
ip netns exec $NB nebula -config "$neb/b.yml" >>"$work/nebula-b.log" 2>&1 &
neb_b=$!
pids+=("$neb_b")
wait_for "the nebula overlay" 100 in_ns $NB ping -c1 -W1 $OA || die "no ping over nebula"

# The grid: broker, frontend and n1's helper in a, n2's helper in b.
ca=$work/ca
"$certs" --dir "$ca" init >>"$work/certs.log" 2>&1 || die "qcg-certs init failed"
grid_certs "broker --san $A" "frontend c1 --san $A" "helper c1/n1" "helper c1/n2"
ip netns exec $NA "$broker" --listen $A --port 18901 --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" \
	>>"$work/broker.log" 2>&1 &
pids+=("$!")
wait_for "the broker" 100 in_ns $NA ss -Htln "sport = :18901" || die "no broker"
ip netns exec $NA "$frontend" --listen $A --port 18902 --broker "https://$A:18901/" --cluster c1 \
	--kind open --public-address $A --addresses 198.18.200.0/24 --ca "$ca/ca.crt" --cert "$ca/frontend-c1.pem" \
	>>"$work/frontend.log" 2>&1 &
pids+=("$!")
wait_for "the frontend" 100 in_ns $NA ss -Htln "sport = :18902" || die "no frontend"
# node NS NAME ADDRESS: NAME's helper in NS, socket $work/NAME.sock.
node() {
	ip netns exec "$1" "$helper" --socket "$work/$2.sock" --frontend "https://$A:18902/" --cluster c1 \
		--node "$2" --address "$3" --ports 18950-18999 --intercept=no --ca "$ca/ca.crt" \
		--cert "$ca/helper-c1-$2.pem" >>"$work/helper-$2.log" 2>&1 &
	pids+=("$!")
	wait_for "helper $2's socket" 100 test -S "$work/$2.sock" || die "helper $2 has no socket"
	wait_for "helper $2 to register" 100 connected "$work/$2.sock" || die "helper $2 not registered"
}
node $NA n1 $A
node $NB n2 $B

export QCG_JOB=nebula-bench-$$
QCG_JOB_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export QCG_JOB_SECRET
QCG_HELPER_SOCKET=$work/n1.sock QCG_RANK=0 ip netns exec $NA "$bench" serve $((ROUNDS * 4)) \
	>"$work/serve.out" 2>>"$work/serve.err" &
pids+=("$!")
ip netns exec $NA "$tcp" --listen $TCP_PORT --count $((ROUNDS * 4)) 2>>"$work/tcp-serve.err" &
tcp_srv=$!
pids+=("$tcp_srv")
wait_for "tls-bench's listening line" 100 grep -q listening "$work/serve.out" || die "no tls-bench server"
wait_for "tcp-stream's listener" 100 in_ns $NA ss -Htln "sport = :$TCP_PORT" || die "no tcp-stream server"

psi() { awk '/^some/ {sub("avg10=", "", $2); print $2}' /proc/pressure/cpu 2>/dev/null || echo "?"; }
# ticks PID...: CPU clock ticks (user + system) the processes have used.
ticks() {
	local p t=0
	for p in "$@"; do
		t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
	done
	echo "$t"
}
hz=$(getconf CLK_TCK)
TIMEFORMAT='%U %S'
# tcp_run PATH HOST: one stream and one ping-pong from b to HOST's tcp-stream;
# the stream's line gets each end's and the nebula daemons' CPU s/GB.
tcp_run() {
	local s0 n0 line cpu
	s0=$(ticks "$tcp_srv")
	n0=$(ticks "$neb_a" "$neb_b")
	cpu=$({ time in_ns $NB "$tcp" --connect "$2:$TCP_PORT" --seconds "$SECS" \
		>"$work/line" 2>>"$work/tcp.err"; } 2>&1) || die "tcp-stream to $2 failed"
	line=$(cat "$work/line")
	awk -v c="$cpu" -v s="$(($(ticks "$tcp_srv") - s0))" -v n="$(($(ticks "$neb_a" "$neb_b") - n0))" \
		-v hz="$hz" -v l="$line" 'BEGIN {split(l, f); split(c, u); gb = f[4] / 1e9;
			printf "gbps %s send_s_per_gb %.3f recv_s_per_gb %.3f nebula_s_per_gb %.3f\n",
				f[2], (u[1] + u[2]) / gb, s / hz / gb, n / hz / gb}' >>"$work/stream-$1"
	in_ns $NB "$tcp" --connect "$2:$TCP_PORT" --pingpong "$COUNT" >>"$work/rtt-$1" 2>>"$work/tcp.err" ||
		die "tcp-stream ping-pong to $2 failed"
}

psi_start=$(psi)
rank=1
for _ in $(seq 1 "$ROUNDS"); do
	tcp_run tcp $A
	tcp_run nebula $OA
	for mode in never always; do
		QCG_HELPER_SOCKET=$work/n2.sock QCG_RANK=$rank in_ns $NB "$bench" stream 0 "$SECS" "$mode" \
			>>"$work/stream-$mode" 2>>"$work/bench.err" || die "tls-bench stream $mode failed"
		QCG_HELPER_SOCKET=$work/n2.sock QCG_RANK=$((rank + 1)) in_ns $NB "$bench" pingpong 0 "$COUNT" \
			"$mode" >>"$work/rtt-$mode" 2>>"$work/bench.err" || die "tls-bench pingpong $mode failed"
		rank=$((rank + 2))
	done
done
psi_end=$(psi)

# stats FILE FIELD [DIGITS]: "median (min-max)" of the FIELD-th word of FILE's lines.
stats() {
	awk -v f="$2" '{print $f}' "$1" | sort -g | awk -v d="${3:-3}" '{v[NR] = $1} END {
		printf "%.*f (%s-%s)", d, (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], v[NR]}'
}
med() { stats "$1" "$2" | cut -d' ' -f1; }
echo "nebula.sh: $ROUNDS rounds, ${SECS} s streams, $COUNT round trips; $(nproc) CPUs, $(uname -r)"
echo "CPU pressure (some, avg10 %): $psi_start at the start, $psi_end at the end"
echo "link: veth $NB -> $NA (MTU $VETH_MTU); nebula $(nebula -version | awk '{print $2}'), cipher aes" \
	"(Noise AESGCM: AES-256-GCM), tun MTU $MTU; qcg-connect: TLS 1.3 AES-128-GCM ($(awk '{print $NF; exit}' \
	"$work/stream-always"))"
printf '%-28s %-25s %-15s %-15s %-15s %s\n' path "Gbit/s" "send CPU s/GB" "recv CPU s/GB" \
	"nebula s/GB" "rtt_us median"
row() {
	printf '%-28s %-25s %-15s %-15s %-15s %s\n' "$1" "$(stats "$work/stream-$2" 2)" \
		"$(med "$work/stream-$2" "$3")" "$(med "$work/stream-$2" "$4")" "${5:-"-"}" "$(stats "$work/rtt-$2" 3 1)"
}
row "(a) TCP over the veth" tcp 4 6
row "(b) TCP over nebula" nebula 4 6 "$(med "$work/stream-nebula" 8)"
row "(c) qcg-connect plain" never 6 8
row "(c) qcg-connect encrypted" always 6 8
awk -v t="$(med "$work/stream-tcp" 2)" -v n="$(med "$work/stream-nebula" 2)" \
	-v p="$(med "$work/stream-never" 2)" -v e="$(med "$work/stream-always" 2)" \
	-v rn="$(med "$work/rtt-nebula" 3)" -v rt="$(med "$work/rtt-tcp" 3)" \
	-v re="$(med "$work/rtt-always" 3)" -v rp="$(med "$work/rtt-never" 3)" \
	'BEGIN {printf "encrypted/plain (qcg) %.2f (>= 0.5 asked); encrypted/nebula %.2f (>= 5 asked); nebula/TCP %.2f; qcg plain/TCP %.2f\n", e / p, e / n, n / t, p / t
		printf "round trip added: nebula %.1f us over TCP, encryption %.1f us over qcg plain\n", rn - rt, re - rp}'
