#!/usr/bin/env bash
# Another uid on a node against the node's helper (issue 32, the review's
# fifth attack): an unprivileged local user (uid 65534, a job of its own)
# hammers the helper over its local socket while a legitimate rank pair of
# another uid (4242) connects COUNT times in a row (bench/local-flood: each
# connect a LOOKUP through the helper, the frontend and the broker, the TCP
# connect and the handshake).  The real daemons on loopback (the tests'
# loopback grid: broker, frontend c1, helper c1/n1), in a network namespace
# of their own.  Attacks, each round in this order, each after the same
# client with no attack:
#
#   requests   300 connections (more than max-clients-per-uid: some are
#              refused and made again at once), each keeping 8 requests in
#              flight without end: PUBLISH, LOOKUP of another of its ranks
#              (upstream every time), WITHDRAW
#   lookups    the same, every request a LOOKUP (of the ranks the attack
#              above left published: answered from the frontend's cache)
#   idle       256 connections that send half a header, then nothing
#              (renewed at once when cut), and 50 requesting ones
#   cpu        a control, not an attack on the helper: two busy loops of
#              uid 65534 that never touch it (what the attacks cost the
#              client through the machine's two cores alone)
#
#   root# bench/helper-uid.sh [ROUNDS] [COUNT]        (QCG_BUILD_DIR, default build/)
#
# QCG_UID_DAEMONS=DIR takes the daemons from another build (before/after);
# QCG_UID_WARMUP (15) seconds of attack before the client starts, so that
# any budget the attacker shares with it (the node's lookups at the
# frontend: bursts of 10 s worth) is spent by then.
# Prints per round and attack "MODE ok K/N p50 X ms p99 Y ms max Z ms", the
# attacker's counts, then the medians over the rounds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${QCG_BUILD_DIR:-$root/build}
rounds=${1:-3}
count=${2:-200}
if [ "${QCG_HELPER_UID_NETNS:-}" != 1 ]; then
	[ "$(id -u)" = 0 ] || { echo "helper-uid.sh: run as root (two uids, a network namespace)" >&2; exit 1; }
	exec unshare -n env QCG_HELPER_UID_NETNS=1 QCG_BUILD_DIR="$build" "$0" "$@"
fi
ip link set lo up
flood=$build/bench/local-flood
[[ -x $flood ]] || { echo "helper-uid.sh: $flood not built" >&2; exit 1; }
# shellcheck disable=SC2034 # read by loopback-grid.sh
src=$root
daemons=${QCG_UID_DAEMONS:-$build}
# shellcheck source=tests/lib/loopback-grid.sh
build=$daemons . "$root/tests/lib/loopback-grid.sh"
grid_workdir qcg-helper-uid
# Every process of uid 65534 the bench starts carries this tag in its
# environment: the end's check finds any left behind by it, and only those.
tag=helper-uid.$$
hogs= # the cpu control's process group while it runs
trap 'stop_hogs; grid_cleanup; no_leftovers' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
chmod 0755 "$work" # the socket's directory: both uids reach the socket (mode 0666)
grid_one_node 17701 17702 17750-17799 >"$work/grid.out" || { cat "$work/grid.out"; exit 1; }
sock=$work/helper.sock
as() { local uid=$1; shift; env QCG_BENCH_TAG="$tag" setpriv --reuid="$uid" --regid="$uid" --clear-groups "$@"; }

# victim LABEL: one series of connects by uid 4242, its line to stdout and $work/rows.
victim() {
	local line
	line=$(as 4242 "$flood" victim --socket "$sock" --count "$count" 2>>"$work/victim.err")
	awk -v l="$1" -v r="$r" '{ printf "%d %-16s ok %s/%s  p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms\n",
		r, l, $2, $4, $6 / 1000, $8 / 1000, $10 / 1000 }' <<<"$line" | tee -a "$work/rows"
}

# attack MODE ARGS...: uid 65534 runs local-flood attack ARGS while the victim measures.
attack() {
	local mode=$1
	shift
	rm -f "$work/ain"
	mkfifo "$work/ain"
	as 65534 "$flood" attack --socket "$sock" "$@" <"$work/ain" >"$work/attack.out" \
		2>"$work/attack.err" &
	local apid=$! arc=0
	exec 8>"$work/ain"
	for _ in $(seq 100); do grep -q ready "$work/attack.err" && break; sleep 0.05; done
	sleep "${QCG_UID_WARMUP:-15}"
	victim "$mode"
	exec 8>&-
	wait "$apid" || arc=$?
	[[ $arc -eq 0 ]] || echo "  attacker: exit status $arc: $(tail -n 3 "$work/attack.err")"
	echo "  attacker: $(cat "$work/attack.out"); helper: $(awk '/^(VmRSS|Threads):/ \
		{ printf "%s %s ", $1, $2 }' "/proc/$helper_pid/status")"
	echo "  frontend: $(fe_stats | tr -d '{}"' | tr ',' '\n' | grep -E '^(lookups_received|quota_waited|quota_refused):' | tr '\n' ' ')"
}
fe_stats() {
	"$frontend" --stats --json --url "https://127.0.0.1:17702/" --ca "$ca/ca.crt" \
		--cert "$ca/frontend-c1.pem"
}

# cpu: two busy loops of uid 65534 while the client measures.  They run in
# a process group of their own (setsid, exec'd: $! is its leader), so one
# kill reaches both, on every way out (the EXIT trap): killing the pid of
# `as ... &` alone killed a subshell and left the loops running.
cpu() {
	setsid env QCG_BENCH_TAG="$tag" setpriv --reuid=65534 --regid=65534 --clear-groups \
		sh -c 'while :; do :; done & while :; do :; done' &
	hogs=$!
	sleep 1
	victim cpu
	stop_hogs
}
stop_hogs() {
	[[ -n $hogs ]] || return 0
	kill -- "-$hogs" 2>/dev/null || true
	wait "$hogs" 2>/dev/null || true
	hogs=
}
# The processes of uid 65534 that carry the tag.
tagged() {
	local p
	for p in /proc/[0-9]*; do
		[[ $(stat -c %u "$p" 2>/dev/null) == 65534 ]] &&
			grep -qzxF "QCG_BENCH_TAG=$tag" "$p/environ" 2>/dev/null && echo "${p#/proc/}"
	done
	return 0
}
# At the end, whatever the way out: nothing of uid 65534 the bench started
# may remain; one that does is named, killed, and the exit status is 1.
no_leftovers() {
	local rc=$? left
	left=$(tagged)
	[[ -n $left ]] || return "$rc"
	echo "helper-uid.sh: processes of uid 65534 left running, killed:" >&2
	# shellcheck disable=SC2086 # one pid a word
	ps -o pid=,etime=,args= -p "$(tr '\n' ',' <<<"$left" | sed 's/,$//')" >&2 || true
	# shellcheck disable=SC2086
	kill -9 $left 2>/dev/null || true
	exit 1
}

for ((r = 1; r <= rounds; r++)); do
	victim idle-requests
	attack requests --conns 300 --depth 8
	victim idle-lookups
	attack lookups --lookups --conns 300 --depth 8
	victim idle-idle
	attack idle --conns 50 --depth 8 --idle 256
	victim idle-cpu
	cpu
done
kill -0 "$helper_pid" || { echo "helper-uid.sh: the helper died" >&2; exit 1; }

echo
echo "medians of $rounds rounds, $count connects each (ok: the fewest of a round):"
for mode in idle-requests requests idle-lookups lookups idle-idle idle idle-cpu cpu; do
	awk -v m="$mode" '$2 == m { split($4, k, "/"); if (!n || k[1] < lo) lo = k[1]; n++
		p50[n] = $6; p99[n] = $9; mx[n] = $12; tot = k[2] }
		function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
			if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }; return a[int((n + 1) / 2)] }
		END { if (n) printf "%-16s ok %d/%d  p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms\n",
			m, lo, tot, med(p50, n), med(p99, n), med(mx, n) }' "$work/rows"
done
