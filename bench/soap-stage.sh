#!/usr/bin/env bash
# The broker's TLS handshake stage under an attack from many addresses
# (issue 32): new connections of a client at a known address (127.0.0.1,
# authenticated once before the attack: a registered frontend) and at
# unknown ones (127.0.5.N, a fresh address each time), each a TLS
# handshake with a frontend certificate and GET /?wsdl (curl), one after
# the other, while bench/slow-clients holds IDLE idle connections and 100
# trickling ClientHellos from ADDRS addresses (127.1.0.1/ADDRS), renewed
# 200 ms after the broker cuts or refuses one.  Also with no attack.
#
#   root# bench/soap-stage.sh [TRIALS] [ADDRS] [IDLE]      (QCG_BUILD_DIR, default build/)
#
# QCG_STAGE_DAEMONS=DIR takes qcg-broker from another build (before/after);
# QCG_STAGE_BROKER_ARGS adds options to its command line (--max-handshakes 1024).
# Prints per client: successes of TRIALS, p50 and p99 ms of the successes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${QCG_BUILD_DIR:-$root/build}
daemons=${QCG_STAGE_DAEMONS:-$build}
trials=${1:-40}
addrs=${2:-1000}
idle=${3:-1000}
if [ "${QCG_SOAP_STAGE_NETNS:-}" != 1 ]; then
	exec unshare -n env QCG_SOAP_STAGE_NETNS=1 QCG_BUILD_DIR="$build" QCG_STAGE_DAEMONS="$daemons" \
		"$0" "$@"
fi
ip link set lo up
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
port=17690
work=$(mktemp -d /tmp/soap-stage.XXXXXX)
keep=0 # 1: the broker died; its directory (log, core) is kept
cleanup() {
	jobs -p | xargs -r kill 2>/dev/null || true
	wait 2>/dev/null || true
	if [ "$keep" = 1 ]; then
		echo "soap-stage.sh: its log and certificates are kept in $work" >&2
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
ca=$work/ca
"$root/certs/qcg-certs" --dir "$ca" init >/dev/null
"$root/certs/qcg-certs" --dir "$ca" issue broker --san 127.0.0.1 >/dev/null
"$root/certs/qcg-certs" --dir "$ca" issue frontend f1 2>/dev/null >/dev/null
"$daemons/broker/qcg-broker" --listen 127.0.0.1 --port $port --ca "$ca/ca.crt" \
	--cert "$ca/broker-broker.pem" --log-level info ${QCG_STAGE_BROKER_ARGS:-} 2>"$work/broker.log" &
broker=$!
for _ in $(seq 100); do ss -ltnH "sport = :$port" | grep -q . && break; sleep 0.05; done

# one FROM: "TOTAL TCP TLS" ms of one connection (all of it, the TCP
# connect, the connect and the TLS handshake), or "-" when it failed.
one() {
	local t
	if t=$(curl -s -o /dev/null -w '%{http_code} %{time_total} %{time_connect} %{time_appconnect}' \
		--max-time 10 --interface "$1" --cacert "$ca/ca.crt" --cert "$ca/frontend-f1.pem" \
		"https://127.0.0.1:$port/?wsdl") && [[ $t == 200\ * ]]; then
		awk -v s="${t#* }" 'BEGIN { split(s, v, " ")
			printf "%.2f %.2f %.2f\n", v[1] * 1000, v[2] * 1000, v[3] * 1000 }'
	else
		echo -
	fi
}
# unknown N: the Nth unknown address, 127.0.5.1 on (250 per /24).
unknown() { echo "127.0.$((5 + ($1 - 1) / 250)).$((1 + ($1 - 1) % 250))"; }
report() { # LABEL FILE [COLUMN]
	local k
	k=$(grep -vc '^-$' "$2" || true)
	{ grep -v '^-$' "$2" || true; } | awk -v c="${3:-1}" '{ print $c }' | sort -g | awk -v l="$1" -v n="$trials" -v k="$k" '{ v[NR] = $1 } END {
		if (k) printf "%-30s %3d/%d  p50 %8.2f ms  p99 %8.2f ms\n", l, k, n,
			v[int((k + 1) / 2)], v[int((k * 99 + 99) / 100)]
		else printf "%-30s %3d/%d\n", l, 0, n }'
}
measure() { # MODE
	local i
	: >"$work/known" && : >"$work/unknown"
	for ((i = 1; i <= trials; i++)); do
		one 127.0.0.1 >>"$work/known"
		one "$(unknown $((i + ${2:-0})))" >>"$work/unknown"
	done
	report "$1 known 127.0.0.1" "$work/known"
	report "$1 unknown 127.0.5.N" "$work/unknown"
	# Where the known client's time went: its TCP connect (the listen queue,
	# the accepting thread), and the connect with the TLS handshake.
	report "  phase tcp known" "$work/known" 2
	report "  phase tcp+tls known" "$work/known" 3
}

[[ $(one 127.0.0.1) != - ]] || { echo "soap-stage.sh: the broker does not answer" >&2; exit 1; }
measure idle 0
unknown_used=$trials
mkfifo "$work/attack.fifo"
"$build/bench/slow-clients" --connect 127.0.0.1:$port --idle "$idle" --slow 100 --hello tls \
	--sources "127.1.0.1/$addrs" --byte-ms 100 --renew-ms 200 <"$work/attack.fifo" \
	>"$work/attack.out" 2>"$work/attack.err" &
exec 7>"$work/attack.fifo"
for _ in $(seq 200); do grep -q ready "$work/attack.err" && break; sleep 0.05; done
sleep 1
# The broker's CPU (user+system) while the clients are measured under the attack.
cpu() { awk '{ print $14 + $15 }' "/proc/$broker/stat"; }
cpu0=$(cpu) t0=$(date +%s.%N)
measure "attack $addrs addresses" "$unknown_used"
cpu1=$(cpu) t1=$(date +%s.%N)
kill -0 "$broker" 2>/dev/null || {
	rc=0
	wait "$broker" || rc=$?
	echo "soap-stage.sh: the broker died under the attack (exit status $rc); its log's end:"
	tail -n 20 "$work/broker.log"
	# Exit status 0 is a clean stop: a SIGTERM or SIGINT from somewhere
	# (the log's "stopping (SIGTERM from pid N (NAME), uid U)" names it).
	[ "$rc" != 0 ] || echo "soap-stage.sh: it was stopped: $(grep -o 'stopping (.*)' "$work/broker.log" | head -n 1)"
	keep=1
	exit 1
}
echo "broker under attack: $(awk '/^(VmRSS|Threads):/ { printf "%s %s ", $1, $2 }' "/proc/$broker/status")"
awk -v c="$cpu0 $cpu1" -v t="$t0 $t1" -v hz="$(getconf CLK_TCK)" 'BEGIN { split(c, a, " "); split(t, b, " ")
	printf "broker CPU under attack: %.2f s in %.1f s (%.0f%%)\n", (a[2] - a[1]) / hz, b[2] - b[1],
		100 * (a[2] - a[1]) / hz / (b[2] - b[1]) }'
exec 7>&-
wait %2 2>/dev/null || true
echo "attacker: $(cat "$work/attack.out")"
