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

# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"

cat_bin=$build/tools/qcg-cat
many=$build/tests/libqcgconn/qcg-test-many
port_b=18001 port_f=18002 low=18050 high=18099

for f in "$cat_bin" "$many"; do
	[[ -x $f ]] || { echo "missing $f"; exit 1; }
done
need_built "$helper" "$frontend" "$broker" "$certs"
need_commands ss python3

grid_workdir qcgconn-cat

# --- the grid -------------------------------------------------------------
grid_one_node $port_b $port_f $low-$high
sock=$work/helper.sock

# --- qcg-cat's own interface --------------------------------------------------
if "$cat_bin" --help >"$out" 2>&1 && grep -q 'connect PEER' "$out"; then
	pass "--help exits 0 and shows the usage"
else fail "--help exits 0 and shows the usage"; fi

rc=0
QCG_JOB_SECRET=$TEST_SECRET "$cat_bin" --job j0 --rank 0 frobnicate >"$out" 2>&1 || rc=$?
if [[ $rc -eq 2 ]] && grep -q "unknown command" "$out"; then
	pass "an unknown subcommand: exit 2"
else echo "(exit $rc)" >>"$out"; fail "an unknown subcommand: exit 2"; fi

# A secret on the command line is readable by every user of the host (ps).
rc=0
"$cat_bin" --job j0 --rank 0 --secret "$TEST_SECRET" listen >"$out" 2>&1 || rc=$?
if [[ $rc -eq 2 ]] && [[ $(wc -l <"$out") -eq 1 ]] &&
	grep -q "never given on a command line: export QCG_JOB_SECRET" "$out"; then
	pass "--secret is refused: exit 2, one line saying to export QCG_JOB_SECRET"
else echo "(exit $rc)" >>"$out"; fail "--secret is refused: exit 2, one line saying to export QCG_JOB_SECRET"; fi

rc=0
QCG_JOB_SECRET=$TEST_SECRET "$cat_bin" --helper "$work/none.sock" --job j0 --rank 0 listen >"$out" 2>&1 || rc=$?
if [[ $rc -eq 1 ]] && [[ $(wc -l <"$out") -eq 1 ]] && grep -q "helper.*none.sock" "$out"; then
	pass "no helper: one line naming the socket, exit 1"
else echo "(exit $rc)" >>"$out"; fail "no helper: one line naming the socket, exit 1"; fi

# --- a 16 MiB transfer, with a wrong-secret connector in between ---------------
head -c $((16 * 1024 * 1024)) /dev/urandom >"$work/in"
QCG_JOB=j1 QCG_RANK=0 QCG_JOB_SECRET=$TEST_SECRET QCG_HELPER_SOCKET=$sock \
	"$cat_bin" --json --timeout 30 listen >"$work/recv" 2>"$work/listen.err" &
listener=$!
pids+=("$listener")
if wait_for "the listener's 'listening' line" 100 grep -q '"event":"listening"' "$work/listen.err"; then
	pass "listen: publishes and prints a listening line"
else cp "$work/listen.err" "$out"; fail "listen: publishes and prints a listening line"; fi

rc=0
QCG_JOB_SECRET=$TEST_SECRET_2 "$cat_bin" --helper "$sock" --job j1 --rank 1 --timeout 5 connect 0 \
	</dev/null >"$out" 2>&1 || rc=$?
if [[ $rc -eq 1 ]] && [[ $(wc -l <"$out") -eq 1 ]] &&
	grep -q "^qcg-cat: connect to rank 0: permission denied" "$out"; then
	pass "a wrong job secret: one 'permission denied' line, exit 1"
else echo "(exit $rc)" >>"$out"; fail "a wrong job secret: one 'permission denied' line, exit 1"; fi

rc=0
# Options after the subcommand.
QCG_JOB_SECRET=$TEST_SECRET "$cat_bin" connect 0 --json --helper "$sock" --job j1 --rank 1 --timeout 20 \
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

# --- encrypted (--encrypt always): a plain connector refused, 4 MiB intact --------
head -c $((4 * 1024 * 1024)) /dev/urandom >"$work/in4"
secret=0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0
QCG_JOB=j3 QCG_RANK=0 QCG_JOB_SECRET=$secret QCG_HELPER_SOCKET=$sock \
	"$cat_bin" --json --timeout 30 --encrypt always listen >"$work/recv4" 2>"$work/listen4.err" &
listener=$!
pids+=("$listener")
wait_for "the encrypted listener's 'listening' line" 100 \
	grep -q '"event":"listening"' "$work/listen4.err" || true
rc=0
QCG_JOB_SECRET=$secret "$cat_bin" --helper "$sock" --job j3 --rank 1 --timeout 5 --encrypt never \
	connect 0 </dev/null >"$out" 2>&1 || rc=$?
if [[ $rc -eq 1 ]] && grep -q "^qcg-cat: connect to rank 0: permission denied.*demands encryption" "$out"; then
	pass "a plain connector to an encrypt=always listener: refused, 'demands encryption'"
else echo "(exit $rc)" >>"$out"; fail "a plain connector to an encrypt=always listener: refused, 'demands encryption'"; fi
rc=0
QCG_JOB_SECRET=$secret "$cat_bin" --json --helper "$sock" --job j3 --rank 1 --timeout 20 \
	--encrypt always connect 0 <"$work/in4" >/dev/null 2>"$work/connect4.err" || rc=$?
wait_exit "$listener" 100 || true
cat "$work/connect4.err" "$work/listen4.err" >"$out"
if [[ $rc -eq 0 ]] && cmp -s "$work/in4" "$work/recv4"; then pass "encrypted: 4 MiB arrive intact"
else echo "(exit $rc)" >>"$out"; fail "encrypted: 4 MiB arrive intact"; fi
if tail -n 1 "$work/connect4.err" | grep -q '"encryption":"tls-' &&
	grep '"event":"accepted"' "$work/listen4.err" | grep -q '"encryption":"tls-'; then
	pass "encrypted: both ends' --json name a TLS path"
else fail "encrypted: both ends' --json name a TLS path"; fi
if tail -n 1 "$work/connect.err" | grep -q '"encryption":"plain"'; then
	pass "one cluster, default inter-site: plain"
else fail "one cluster, default inter-site: plain"; fi

# --- an unpublished rank: not found once its timeout has passed -----------------
rc=0
t0=$(ms)
QCG_JOB_SECRET=$TEST_SECRET "$cat_bin" --helper "$sock" --job j1 --rank 2 --timeout 2 connect 5 \
	</dev/null >"$out" 2>&1 || rc=$?
elapsed=$(($(ms) - t0))
echo "(exit $rc after $elapsed ms)" >>"$out"
if [[ $rc -eq 1 ]] && ((elapsed >= 2000 && elapsed < 5000)) &&
	grep -q "^qcg-cat: connect to rank 5: no such rank in this job: rank 5 not published within 2000 ms" "$out"; then
	pass "an unpublished rank: 'no such rank' after ~2 s, exit 1"
else fail "an unpublished rank: 'no such rank' after ~2 s, exit 1"; fi

# --- 20 concurrent non-blocking connects from one context ------------------------
if "$many" "$sock" j2 "$TEST_SECRET_2" 20 100 10000 >"$out" 2>&1; then
	pass "20 concurrent connects from one context to 20 listeners"
	sed 's/^/     /' "$out"
else fail "20 concurrent connects from one context to 20 listeners"; fi

echo "passed $passed, failed $failed"
((failed == 0))
