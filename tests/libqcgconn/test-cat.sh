#!/usr/bin/env bash
#
# libqcgconn-cat: qcg-cat and libqcgconn against the real daemons on loopback,
# with a throw-away CA.
#
#   qcg-cat rank 0 (listen) <=========== TCP, direct ===========> qcg-cat rank 1 (connect)
#        \                                                          /
#         `--unix--> qcg-helper c1/n1 <------------------------unix-'
#                        | mTLS
#                    qcg-frontend c1 127.0.0.1:18002 --mTLS--> qcg-broker 127.0.0.1:18001
#
# Ports 18000-18099 belong to libqcgconn's tests: broker 18001, frontend 18002,
# the node's listening range 18050-18099.  Every wait is bounded and waits on
# something observable (a port, a log line, the helper's status, an exit).
#
#   test-cat.sh BUILD_DIR SRC_DIR       exit 0 passed, 1 failed, 77 skipped

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)

cat_bin=$build/tools/qcg-cat
many=$build/tests/libqcgconn/qcg-test-many
helper=$build/helper/qcg-helper
frontend=$build/frontend/qcg-frontend
broker=$build/broker/qcg-broker
certs=$src/certs/qcg-certs
port_b=18001 port_f=18002 low=18050 high=18099

for f in "$cat_bin" "$many"; do
	[[ -x $f ]] || { echo "missing $f"; exit 1; }
done
for f in "$helper" "$frontend" "$broker" "$certs"; do
	[[ -x $f ]] || { echo "$f not built: skipping"; exit 77; }
done
command -v ss >/dev/null || { echo "ss missing: skipping"; exit 77; }
command -v python3 >/dev/null || { echo "python3 missing: skipping"; exit 77; }

passed=0
failed=0
work=$(mktemp -d "${TMPDIR:-/tmp}/qcgconn-cat.XXXXXX")
out=$work/out
pids=()

pass() { passed=$((passed + 1)); printf 'ok   %s\n' "$1"; }
fail() {
	failed=$((failed + 1))
	printf 'FAIL %s\n' "$1"
	if [[ -s $out ]]; then sed 's/^/     | /' "$out"; fi
}

cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if ((failed > 0)) || [[ -n ${QCG_TEST_LOGS:-} ]]; then
		for log in "$work"/*.log "$work"/*.err; do
			[[ -f $log ]] || continue
			echo "--- $log (last 40 lines)"
			tail -n 40 "$log"
		done
	fi
	rm -rf -- "$work"
}
trap cleanup EXIT

# wait_for DESC TRIES CMD...: runs CMD every 0.1 s until it succeeds, at most TRIES times.
wait_for() {
	local desc=$1 tries=$2
	shift 2
	for ((i = 0; i < tries; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	echo "timed out waiting for $desc" >&2
	return 1
}

# wait_exit PID TRIES: waits for a background process to end (bounded); its status in $rc.
wait_exit() {
	local pid=$1 tries=$2
	for ((i = 0; i < tries; i++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			rc=0
			wait "$pid" || rc=$?
			return 0
		fi
		sleep 0.1
	done
	kill "$pid" 2>/dev/null || true
	rc=124
	return 1
}

listening() { ss -Htln "sport = :$1" | grep -q .; }
connected() { "$helper" --status --json --socket "$sock" | grep -q '"upstream_connected":true'; }
ms() { date +%s%3N; }

# --- the grid -------------------------------------------------------------
ca=$work/ca
{
	"$certs" --dir "$ca" init
	"$certs" --dir "$ca" issue broker --san 127.0.0.1
	"$certs" --dir "$ca" issue frontend c1 --san 127.0.0.1
	"$certs" --dir "$ca" issue helper c1/n1
} >"$work/certs.log" 2>&1 || { cat "$work/certs.log"; exit 1; }

for p in $port_b $port_f; do
	if listening "$p"; then echo "port $p is taken: another test running?"; exit 1; fi
done

"$broker" --listen 127.0.0.1 --port $port_b --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" \
	>>"$work/broker.log" 2>&1 &
pids+=($!)
wait_for "the broker on port $port_b" 100 listening $port_b || exit 1
"$frontend" --listen 127.0.0.1 --port $port_f --broker "https://127.0.0.1:$port_b/" \
	--cluster c1 --kind open --public-address 127.0.0.1 --ca "$ca/ca.crt" \
	--cert "$ca/frontend-c1.pem" >>"$work/frontend.log" 2>&1 &
pids+=($!)
wait_for "the frontend on port $port_f" 100 listening $port_f || exit 1
sock=$work/helper.sock
"$helper" --socket "$sock" --frontend "https://127.0.0.1:$port_f/" --cluster c1 --node n1 \
	--address 127.0.0.1 --ports $low-$high --ca "$ca/ca.crt" --cert "$ca/helper-c1-n1.pem" \
	>>"$work/helper.log" 2>&1 &
pids+=($!)
wait_for "the helper's socket" 100 test -S "$sock" || exit 1
wait_for "the helper to register upstream" 100 connected || exit 1

# --- qcg-cat's own interface --------------------------------------------------
if "$cat_bin" --help >"$out" 2>&1 && grep -q 'connect PEER' "$out"; then
	pass "--help exits 0 and shows the usage"
else fail "--help exits 0 and shows the usage"; fi

rc=0
"$cat_bin" --job j0 --rank 0 --secret s frobnicate >"$out" 2>&1 || rc=$?
if [[ $rc -eq 2 ]] && grep -q "unknown command" "$out"; then
	pass "an unknown subcommand: exit 2"
else echo "(exit $rc)" >>"$out"; fail "an unknown subcommand: exit 2"; fi

rc=0
"$cat_bin" --helper "$work/none.sock" --job j0 --rank 0 --secret s listen >"$out" 2>&1 || rc=$?
if [[ $rc -eq 1 ]] && [[ $(wc -l <"$out") -eq 1 ]] && grep -q "helper.*none.sock" "$out"; then
	pass "no helper: one line naming the socket, exit 1"
else echo "(exit $rc)" >>"$out"; fail "no helper: one line naming the socket, exit 1"; fi

# --- a 16 MiB transfer, with a wrong-secret connector in between ---------------
head -c $((16 * 1024 * 1024)) /dev/urandom >"$work/in"
QCG_JOB=j1 QCG_RANK=0 QCG_JOB_SECRET=s1 QCG_HELPER_SOCKET=$sock \
	"$cat_bin" --json --timeout 30 listen >"$work/recv" 2>"$work/listen.err" &
listener=$!
pids+=($listener)
if wait_for "the listener's 'listening' line" 100 grep -q '"event":"listening"' "$work/listen.err"; then
	pass "listen: publishes and prints a listening line"
else cp "$work/listen.err" "$out"; fail "listen: publishes and prints a listening line"; fi

rc=0
"$cat_bin" --helper "$sock" --job j1 --rank 1 --secret wrong --timeout 5 connect 0 \
	</dev/null >"$out" 2>&1 || rc=$?
if [[ $rc -eq 1 ]] && [[ $(wc -l <"$out") -eq 1 ]] &&
	grep -q "^qcg-cat: connect to rank 0: permission denied" "$out"; then
	pass "a wrong job secret: one 'permission denied' line, exit 1"
else echo "(exit $rc)" >>"$out"; fail "a wrong job secret: one 'permission denied' line, exit 1"; fi

rc=0
# Options after the subcommand.
"$cat_bin" connect 0 --json --helper "$sock" --job j1 --rank 1 --secret s1 --timeout 20 \
	<"$work/in" >/dev/null 2>"$work/connect.err" || rc=$?
cp "$work/connect.err" "$out"
if [[ $rc -eq 0 ]]; then pass "connect: exit 0 after the peer closed"; else
	echo "(exit $rc)" >>"$out"; fail "connect: exit 0 after the peer closed"; fi
wait_exit "$listener" 100 || true
cp "$work/listen.err" "$out"
if [[ $rc -eq 0 ]]; then pass "listen: exit 0 after one connection"; else
	echo "(exit $rc)" >>"$out"; fail "listen: exit 0 after one connection"; fi
if cmp -s "$work/in" "$work/recv"; then pass "16 MiB arrive intact"; else
	ls -l "$work/in" "$work/recv" >"$out"; fail "16 MiB arrive intact"; fi

cp "$work/connect.err" "$out"
if tail -n 1 "$work/connect.err" | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
assert d["peer"] == 0 and d["technique"] == "direct", d
assert d["bytes"] == 16 * 1024 * 1024 and d["setup_us"] > 0, d
'; then pass "connect --json: last line says peer 0, direct, 16 MiB, setup_us"
else fail "connect --json: last line says peer 0, direct, 16 MiB, setup_us"; fi
cp "$work/listen.err" "$out"
if grep '"event":"accepted"' "$work/listen.err" | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
assert d["peer"] == 1 and d["technique"] == "direct", d
'; then pass "listen --json: accepted rank 1, direct"
else fail "listen --json: accepted rank 1, direct"; fi

# --- an unpublished rank times out within its timeout ---------------------------
rc=0
t0=$(ms)
"$cat_bin" --helper "$sock" --job j1 --rank 2 --secret s1 --timeout 2 connect 5 \
	</dev/null >"$out" 2>&1 || rc=$?
elapsed=$(($(ms) - t0))
echo "(exit $rc after $elapsed ms)" >>"$out"
if [[ $rc -eq 1 ]] && ((elapsed >= 2000 && elapsed < 5000)) &&
	grep -q "^qcg-cat: connect to rank 5: timed out: .*not published" "$out"; then
	pass "an unpublished rank: 'timed out' after ~2 s, exit 1"
else fail "an unpublished rank: 'timed out' after ~2 s, exit 1"; fi

# --- 20 concurrent non-blocking connects from one context ------------------------
if "$many" "$sock" j2 s2 20 100 10000 >"$out" 2>&1; then
	pass "20 concurrent connects from one context to 20 listeners"
	sed 's/^/     /' "$out"
else fail "20 concurrent connects from one context to 20 listeners"; fi

echo "passed $passed, failed $failed"
((failed == 0))
