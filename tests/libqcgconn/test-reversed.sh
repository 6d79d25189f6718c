#!/usr/bin/env bash
#
# libqcgconn-reversed: reversed and proxied connections, and the fallback
# between them, through the real daemons on loopback with a throw-away CA.
# Everything runs on 127.0.0.1 (or on ::1, IPv6 only, with grid_ip=::1 in
# the environment; by hand, not in ctest: it takes as long again); the
# clusters differ by what their frontends declare, which is all the
# broker's plans go by.
#
#   cluster pub (open)    helper pub/p1  ports 18520-18529   frontend :18511
#   cluster nat (nat)     helper nat/n1  ports 18530-18539   frontend :18512
#   cluster sym (symnat)  helper sym/s1  ports 18540-18549   frontend :18513
#   qcg-broker :18501 (proxy lo@ADDR:18503)           qcg-proxy data :18503, control :18502
#
#   pub -> nat   reversed: n1's helper connects to the pub process's listener
#   sym -> nat   proxy: both sides connect out to qcg-proxy
#
# Ports 18500-18599 belong to these tests.  Every wait is bounded and waits
# on something observable (a port, a log line, the helper's status, an exit).
#
#   test-reversed.sh BUILD_DIR SRC_DIR       exit 0 passed, 1 failed, 77 skipped

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)

# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"

cat_bin=$build/tools/qcg-cat
proxy=$build/proxy/qcg-proxy
port_b=18501 port_pc=18502 port_pd=18503

[[ -x $cat_bin ]] || { echo "missing $cat_bin"; exit 1; }
need_built "$helper" "$frontend" "$broker" "$proxy" "$certs"
need_commands ss python3 openssl prlimit

grid_workdir qcg-reversed

size_of() { stat -c %s "$1" 2>/dev/null || echo 0; }
at_least() { (($(size_of "$1") >= $2)); }

# --- the grid -------------------------------------------------------------
grid_ca "proxy lo" "frontend pub" "frontend nat" "frontend sym" \
	"helper pub/p1" "helper nat/n1" "helper sym/s1"
openssl rand -hex 32 >"$work/proxy.key"
chmod 0600 "$work/proxy.key"

grid_ports_free $port_b $port_pc $port_pd 18511 18512 18513

expiry=1 # s, the broker's memory of a failed technique
grid_broker $port_b --outcome-expiry $expiry --proxy "lo@$grid_host:$port_pd" \
	--proxy-key "$work/proxy.key" || exit 1

# forgotten FROM TO: the broker's grid holds no failure against a technique
# from cluster FROM to TO (a last attempt that failed less than the expiry ago).
forgotten() {
	"$broker" --grid --json --url "$broker_url" --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" |
		python3 -c '
import json, sys
held = [o["technique"] for o in json.load(sys.stdin)["outcomes"]
        if (o["from"], o["to"]) == (sys.argv[1], sys.argv[2]) and not o["last_ok"]
        and o["age_s"] < int(sys.argv[3])]
sys.exit(1 if held else 0)
' "$1" "$2" $expiry
}

start_proxy() {
	"$proxy" --listen "$grid_ip" --port $port_pd --control-port $port_pc --ca "$ca/ca.crt" \
		--cert "$ca/proxy-lo.pem" --key-file "$work/proxy.key" --pair-timeout 30 \
		>>"$work/proxy.log" 2>&1 &
	proxy_pid=$!
	pids+=("$proxy_pid")
	wait_for "the proxy on port $port_pd" 100 listening $port_pd
}
start_proxy || exit 1

declare -A fport=([pub]=18511 [nat]=18512 [sym]=18513)
declare -A kind=([pub]="--kind open" [nat]="--kind nat --public-address $grid_ip"
	[sym]="--kind symnat --public-address $grid_ip")
declare -A node=([pub]=p1 [nat]=n1 [sym]=s1)
declare -A range=([pub]=18520-18529 [nat]=18530-18539 [sym]=18540-18549)
declare -A hpid
for c in pub nat sym; do
	# shellcheck disable=SC2086
	grid_frontend $c "${fport[$c]}" ${kind[$c]} || exit 1
done

# start_helper CLUSTER: the node's helper, socket helper-CLUSTER.sock, its pid in hpid[CLUSTER].
start_helper() {
	local c=$1
	grid_helper "helper-$c" "$c/${node[$c]}" "${fport[$c]}" "${range[$c]}" --log-level debug || return 1
	hpid[$c]=$helper_pid
}
for c in pub nat sym; do start_helper $c || exit 1; done

# listener CLUSTER JOB RANK OUT ERR [TIMEOUT]: qcg-cat listen in the background, pid in $lpid.
listener() {
	QCG_HELPER_SOCKET=$work/helper-$1.sock QCG_JOB=$2 QCG_RANK=$3 QCG_JOB_SECRET=$TEST_SECRET \
		"$cat_bin" --json --timeout "${6:-20}" listen >"$4" 2>"$5" &
	lpid=$!
	pids+=("$lpid")
	wait_for "rank $3 listening" 100 grep -q '"event":"listening"' "$5"
}

# connector CLUSTER JOB RANK PEER TIMEOUT: qcg-cat connect (stdin from the caller).
connector() {
	QCG_HELPER_SOCKET=$work/helper-$1.sock QCG_JOB=$2 QCG_RANK=$3 QCG_JOB_SECRET=$TEST_SECRET \
		"$cat_bin" --json --timeout "$5" connect "$4"
}

# json_is FILE LINE-EVENT KEY VALUE: the --json line of EVENT has KEY == VALUE.
json_is() {
	grep "\"event\":\"$2\"" "$1" | tail -n 1 | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
want = sys.argv[2]
got = str(d[sys.argv[1]])
assert got == want, (sys.argv[1], got, want, d)
' "$3" "$4"
}

head -c $((16 * 1024 * 1024)) /dev/urandom >"$work/in"

# --- reversed: pub -> nat ----------------------------------------------------
listener nat j1 1 "$work/recv1" "$work/listen1.err" || exit 1
t0=$(ms)
rc=0
connector pub j1 0 1 20 <"$work/in" >/dev/null 2>"$work/connect1.err" || rc=$?
wait_exit "$lpid" 100 || true
cp "$work/connect1.err" "$out"
[[ $rc -eq 0 ]] && cmp -s "$work/in" "$work/recv1" &&
	pass "pub -> nat: 16 MiB arrive intact ($(($(ms) - t0)) ms)" ||
	fail "pub -> nat: 16 MiB arrive intact (exit $rc)"
json_is "$work/connect1.err" sent technique reversed >"$out" 2>&1 &&
	pass "pub -> nat: the connecting side reports reversed" ||
	fail "pub -> nat: the connecting side reports reversed"
{ json_is "$work/listen1.err" accepted technique reversed &&
	json_is "$work/listen1.err" accepted peer 0; } >"$out" 2>&1 &&
	pass "pub -> nat: the target accepts rank 0's connection, reversed" ||
	fail "pub -> nat: the target accepts rank 0's connection, reversed"
grep -q "connect-back for job j1 rank 1 (initiator rank 0): connected to $grid_ip port 1852[0-9] in [0-9]* ms, handed to pid $lpid" \
	"$work/helper-nat.log" && pass "n1's helper made the connection and handed it to the target" ||
	{ grep connect-back "$work/helper-nat.log" >"$out"; fail "n1's helper made the connection and handed it to the target"; }

# --- proxy: sym -> nat, and nat -> sym ----------------------------------------
for dir in "sym nat 2 3" "nat sym 4 5"; do
	read -r from to r_from r_to <<<"$dir"
	listener "$to" j2 "$r_to" "$work/recv2" "$work/listen2.err" || exit 1
	rc=0
	connector "$from" j2 "$r_from" "$r_to" 20 <"$work/in" >/dev/null 2>"$work/connect2.err" || rc=$?
	wait_exit "$lpid" 100 || true
	cat "$work/connect2.err" "$work/listen2.err" >"$out"
	[[ $rc -eq 0 ]] && cmp -s "$work/in" "$work/recv2" &&
		pass "$from -> $to: 16 MiB arrive intact through the proxy" ||
		fail "$from -> $to: 16 MiB arrive intact through the proxy (exit $rc)"
	{ json_is "$work/connect2.err" sent technique proxy &&
		json_is "$work/listen2.err" accepted technique proxy &&
		json_is "$work/listen2.err" accepted peer "$r_from"; } >"$out" 2>&1 &&
		pass "$from -> $to: both sides report proxy" || fail "$from -> $to: both sides report proxy"
done
grep -q "proxy-connect for job j2 rank 3 (initiator rank 2): connected to $grid_ip port $port_pd" \
	"$work/helper-nat.log" && pass "n1's helper paired at the proxy for the target" ||
	fail "n1's helper paired at the proxy for the target"

# --- the target's helper is short of descriptors for a moment ------------------
# Under a storm a node's ports towards the proxy's one address run out; the
# helper's proxy-connect then failed at once (EADDRNOTAVAIL) and was dropped,
# and the initiator waited at the proxy for a side that never came.  Here the
# helper's soft RLIMIT_NOFILE is lowered below its open descriptors until
# its connect has failed (EMFILE, the same kind of shortage), then put back:
# the order is tried again and pairs.
listener nat j6 13 "$work/recv6" "$work/listen6.err" 60 || exit 1
nofile=$(prlimit --pid "${hpid[nat]}" --nofile --output SOFT --noheadings | tr -d ' ')
prlimit --pid "${hpid[nat]}" --nofile=3:
connector sym j6 12 13 20 <"$work/in" >/dev/null 2>"$work/connect6.err" &
cpid=$!
pids+=("$cpid")
short="proxy-connect for job j6 rank 13 (initiator rank 12): connect to $grid_ip port $port_pd: Too many open files"
if wait_for "the helper's connect to the proxy to lack a descriptor" 150 grep -qF "$short" "$work/helper-nat.log"; then
	pass "nat's helper could not open its socket to the proxy (RLIMIT_NOFILE 3)"
else
	fail "nat's helper could not open its socket to the proxy (RLIMIT_NOFILE 3)"
fi
prlimit --pid "${hpid[nat]}" --nofile="$nofile":
wait_exit "$cpid" 300 || true
crc=$rc
wait_exit "$lpid" 100 || true
cat "$work/connect6.err" "$work/listen6.err" >"$out"
grep "j6" "$work/helper-nat.log" >>"$out" || true
[[ $crc -eq 0 ]] && cmp -s "$work/in" "$work/recv6" && json_is "$work/connect6.err" sent technique proxy &&
	json_is "$work/listen6.err" accepted technique proxy &&
	pass "the order waits for its descriptor: the pair meets at the proxy, 16 MiB intact" ||
	fail "the order waits for its descriptor: the pair meets at the proxy, 16 MiB intact (exit $crc)"

# --- the proxy stops during a transfer: both ends fail within seconds ----------
listener nat j3 7 "$work/recv3" "$work/listen3.err" 60 || exit 1
# The input stays open after 4 MiB: the sender idles on stdin, as an
# application between messages does.
mkfifo "$work/feed"
{ head -c $((4 * 1024 * 1024)) "$work/in"; exec sleep 60; } >"$work/feed" &
feeder=$!
pids+=("$feeder")
connector sym j3 6 7 20 <"$work/feed" >/dev/null 2>"$work/connect3.err" &
cpid=$!
pids+=("$cpid")
if wait_for "4 MiB through the proxy" 150 at_least "$work/recv3" $((4 * 1024 * 1024)); then
	t0=$(ms)
	kill -TERM "$proxy_pid"
	wait_exit "$lpid" 100 || true
	lrc=$rc
	wait_exit "$cpid" 100 || true
	crc=$rc
	elapsed=$(($(ms) - t0))
	cat "$work/connect3.err" "$work/listen3.err" >"$out"
	echo "(listen exit $lrc, connect exit $crc, $elapsed ms)" >>"$out"
	# Seconds, not the 20 s of the connect's timeout, even on a loaded machine.
	if [[ $lrc -eq 1 && $crc -eq 1 ]] && ((elapsed < 8000)) &&
		grep -q "connection broke\|connection was closed" "$work/connect3.err" &&
		grep -q "listen: connection from rank 6: read:" "$work/listen3.err"; then
		pass "proxy stopped mid-transfer: both qcg-cat ends fail within seconds ($elapsed ms)"
	else
		fail "proxy stopped mid-transfer: both qcg-cat ends fail within seconds"
	fi
else
	cp "$work/listen3.err" "$out"
	fail "proxy stopped mid-transfer: the transfer did not start"
fi
kill "$feeder" 2>/dev/null || true
wait_exit "$proxy_pid" 50 || true
start_proxy || { fail "the proxy starts again"; exit 1; }

# --- fallback: the target's helper is frozen past the reversed attempt ---------
# Its orders wait in its socket: when it resumes, the stale connect-back is
# refused by the initiator (no connect waits for its token any more) and the
# proxy-connect pairs.
listener nat j4 9 "$work/recv4" "$work/listen4.err" 60 || exit 1
kill -STOP "${hpid[nat]}"
t0=$(ms)
connector pub j4 8 9 20 <"$work/in" >/dev/null 2>"$work/connect4.err" &
cpid=$!
pids+=("$cpid")
if wait_for "the fallback lookup" 100 grep -q "j4 rank 8 (pub) -> rank 9 (nat/n1): proxy; proxy-connect ordered to nat (seq [0-9]*), tried before: reversed" \
	"$work/broker.log"; then
	pass "after 5 s without a connection back the broker is asked again and plans the proxy ($(($(ms) - t0)) ms)"
else
	grep "j4" "$work/broker.log" >"$out" || true
	fail "after 5 s without a connection back the broker is asked again and plans the proxy"
fi
kill -CONT "${hpid[nat]}"
wait_exit "$cpid" 200 || true
crc=$rc
wait_exit "$lpid" 100 || true
cat "$work/connect4.err" "$work/listen4.err" >"$out"
[[ $crc -eq 0 ]] && cmp -s "$work/in" "$work/recv4" && json_is "$work/connect4.err" sent technique proxy &&
	json_is "$work/listen4.err" accepted technique proxy &&
	pass "fallback: the connect succeeds through the proxy, 16 MiB intact, both sides say proxy" ||
	fail "fallback: the connect succeeds through the proxy, 16 MiB intact, both sides say proxy"

# --- the target's helper is gone: one error naming both techniques -------------
# The broker remembers the reversed failure above for its outcome expiry.
wait_for "the broker to forget pub -> nat's failed reversed attempt" 50 forgotten pub nat ||
	fail "the broker forgets pub -> nat's failed reversed attempt after $expiry s (its grid)"
listener nat j5 11 "$work/recv5" "$work/listen5.err" 60 || exit 1
kill -KILL "${hpid[nat]}"
wait "${hpid[nat]}" 2>/dev/null || true
wait_exit "$lpid" 100 || true
t0=$(ms)
rc=0
connector pub j5 10 11 12 </dev/null >/dev/null 2>"$work/connect5.err" || rc=$?
elapsed=$(($(ms) - t0))
cp "$work/connect5.err" "$out"
echo "(exit $rc after $elapsed ms)" >>"$out"
# The 12 s timeout bounds silence (libqcgconn/README.md): reversed has no
# answer for 5 s, then the proxy's pairing has none for 12 s from its
# preamble: about 17 s, well within the cap of 36 s.
if [[ $rc -eq 1 ]] && ((elapsed >= 16000 && elapsed < 24000)) &&
	grep -q "^qcg-cat: connect to rank 11: timed out: reversed: rank 11 did not connect back within 5000 ms.*; proxy: rank 11 did not come to the proxy at .* for 12000 ms since its last progress" \
		"$work/connect5.err"; then
	pass "target helper killed: one 'timed out' error naming reversed and proxy, 12 s after the proxy's preamble ($elapsed ms)"
else
	fail "target helper killed: one 'timed out' error naming reversed and proxy, 12 s after the proxy's preamble"
fi
start_helper nat || { fail "the helper of nat starts again"; exit 1; }

# --- no leak of tokens into logs ---------------------------------------------
token_re='[0-9a-f]{84}|[0-9a-f]{32}'
if grep -Eq "$token_re" "$work"/broker.log "$work"/frontend-*.log "$work"/helper-*.log; then
	grep -Eh "$token_re" "$work"/broker.log "$work"/frontend-*.log "$work"/helper-*.log | head -3 >"$out"
	fail "no token appears in the daemons' logs"
else
	pass "no token appears in the daemons' logs"
fi
if grep -Eq "ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:" "$work"/*.log "$work"/*.err; then
	grep -h -A5 "Sanitizer\|runtime error" "$work"/*.log "$work"/*.err | head -30 >"$out"
	fail "no sanitizer report"
fi

echo "passed $passed, failed $failed"
((failed == 0))
