#!/usr/bin/env bash
#
# libqcgconn-ipv6: the grid on ::1 only, no IPv4 anywhere: the broker and the
# frontend listen on [::1], the helper reaches its frontend at
# https://[::1]:PORT/ (gSOAP, mutual TLS, the certificates' SAN ::1), the
# node's contact is ::1, and two ranks connect through it.
#
#   qcg-cat rank 0 (listen, ::1) <====== TCP over ::1, direct ======> qcg-cat rank 1
#        \                                                            /
#         `--unix--> qcg-helper c1/n1 (--address ::1) <----------unix-'
#                        | mTLS, https://[::1]:18802/
#                    qcg-frontend c1 [::1]:18802 --mTLS--> qcg-broker [::1]:18801
#
# Then the broker's per-address handshake limit (16) against connections
# from ::1 (counted as its /64), a broker on :: (both families), and the
# forms of IPv6 a config refuses.
# Ports 18801-18803, the node's range 18850-18899.  Needs ::1 (run it in a
# network namespace with lo up); skipped (77) when the host has no IPv6.
#
#   test-ipv6.sh BUILD_DIR SRC_DIR       exit 0 passed, 1 failed, 77 skipped

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)
grid_ip=::1

# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"

cat_bin=$build/tools/qcg-cat
port_b=18801 port_f=18802 low=18850 high=18899

need_built "$helper" "$frontend" "$broker" "$certs" "$cat_bin"
need_commands ss python3 ip
ip -6 addr show dev lo 2>/dev/null | grep -q 'inet6 ::1/128' || { echo "no ::1 on lo: skipping"; exit 77; }

grid_workdir qcgconn-ipv6

# --- the grid, on ::1 ------------------------------------------------------
grid_one_node $port_b $port_f $low-$high
sock=$work/helper.sock
pass "broker, frontend and helper up on ::1 (the helper registered through https://[::1]:$port_f/)"

# listens_on PORT: the listening sockets of PORT, one local address a line.
listens_on() { ss -Htln "sport = :$1" | awk '{print $4}'; }
listens_on $port_b >"$out"
listens_on $port_f >>"$out"
if [[ $(sort -u "$out") == "[::1]:$port_b"$'\n'"[::1]:$port_f" ]]; then
	pass "broker and frontend listen on [::1] only"
else fail "broker and frontend listen on [::1] only"; fi

if broker_stats >"$out" 2>&1 && grep -q '"clusters":1[,}]' "$out"; then
	pass "qcg-broker --stats --url https://[::1]:$port_b/ answers"
else fail "qcg-broker --stats --url https://[::1]:$port_b/ answers"; fi
rc=0
"$frontend" --stats --json --listen ::1 --port $port_f --ca "$ca/ca.crt" \
	--cert "$ca/frontend-c1.pem" >"$out" 2>&1 || rc=$?
if [[ $rc -eq 0 ]] && grep -q '"nodes":1[,}]' "$out"; then
	pass "qcg-frontend --stats with listen ::1 asks https://[::1]:$port_f/ by itself"
else echo "(exit $rc)" >>"$out"; fail "qcg-frontend --stats with listen ::1 asks https://[::1]:$port_f/ by itself"; fi

if "$helper" --status --json --socket "$sock" >"$out" 2>&1 &&
	grep -qF "\"frontend\":\"https://[::1]:$port_f/\"" "$out"; then
	pass "qcg-helper --status names its frontend https://[::1]:$port_f/"
else fail "qcg-helper --status names its frontend https://[::1]:$port_f/"; fi

# --- two ranks over ::1 ------------------------------------------------------
head -c $((1024 * 1024)) /dev/urandom >"$work/in"
QCG_JOB=j6 QCG_RANK=0 QCG_JOB_SECRET=$TEST_SECRET QCG_HELPER_SOCKET=$sock \
	"$cat_bin" --json --timeout 30 listen >"$work/recv" 2>"$work/listen.err" &
listener=$!
pids+=("$listener")
within "the listener publishes its ::1 contact" 100 grep -q '"event":"listening"' "$work/listen.err"
rc=0
QCG_JOB_SECRET=$TEST_SECRET "$cat_bin" --json --helper "$sock" --job j6 --rank 1 --timeout 20 \
	connect 0 <"$work/in" >/dev/null 2>"$work/connect.err" || rc=$?
cp "$work/connect.err" "$out"
if [[ $rc -eq 0 ]]; then pass "connect to rank 0 over ::1: exit 0"; else
	echo "(exit $rc)" >>"$out"; fail "connect to rank 0 over ::1: exit 0"; fi
wait_exit "$listener" 100 || true
if cmp -s "$work/in" "$work/recv"; then pass "1 MiB arrives intact over ::1"; else
	ls -l "$work/in" "$work/recv" >"$out"; fail "1 MiB arrives intact over ::1"; fi
if tail -n 1 "$work/connect.err" | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
assert d["peer"] == 0 and d["technique"] == "direct" and d["bytes"] == 1 << 20, d
'; then pass "connect --json: peer 0, direct, 1 MiB"
else fail "connect --json: peer 0, direct, 1 MiB"; fi
if logged "$work/frontend-c1.log" "job j6 rank 0 published from node n1 at [::1]:18"; then
	pass "the frontend logs the contact as [::1]:PORT"
else grep -h "published" "$work/frontend-c1.log" >"$out" || true; fail "the frontend logs the contact as [::1]:PORT"; fi
if logged "$work/helper.log" "::1" && ! grep -q "127.0.0.1" "$work"/*.log; then
	pass "no daemon's log names 127.0.0.1"
else grep -h "127.0.0.1" "$work"/*.log >"$out" || true; fail "no daemon's log names 127.0.0.1"; fi

# --- the per-address limit, from ::1 ----------------------------------------
# 24 connections from ::1 that never start TLS: the broker holds 16 in their
# handshake and refuses the rest as one address (::/64), and says so.
python3 - "$port_b" >"$work/hold.out" 2>&1 <<'EOF' &
import socket, sys, time
port = int(sys.argv[1])
held = []
for _ in range(24):
    s = socket.create_connection(("::1", port), timeout=5)
    held.append(s)
print("held", len(held), flush=True)
time.sleep(20)
EOF
holder=$!
pids+=("$holder")
refused_8() { broker_stats | grep -Eq '"handshakes_refused_address":([89]|[1-9][0-9])[,}]'; }
within "the broker refuses the connections from ::1 beyond 16 in handshake" 100 refused_8
if logged "$work/broker.log" "TLS handshakes in progress from ::/64"; then
	pass "the refusal names the source as its /64 (::/64)"
else tail -n 5 "$work/broker.log" >"$out"; fail "the refusal names the source as its /64 (::/64)"; fi
if grep -Eq "refused.*\[::1\]:[0-9]+" "$work/broker.log"; then
	pass "the refused peer is logged as [::1]:PORT"
else tail -n 5 "$work/broker.log" >"$out"; fail "the refused peer is logged as [::1]:PORT"; fi
kill "$holder" 2>/dev/null || true
wait_exit "$holder" 50 || true
within "after they go, the broker answers again" 100 clusters_are 1

# --- listen = ::, both families on one socket -----------------------------------
port_d=18803
"$broker" --listen :: --port $port_d --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" \
	>>"$work/broker-dual.log" 2>&1 &
pids+=("$!")
within "a broker with listen :: listens" 100 listening $port_d
if ss -Htlne "sport = :$port_d" | grep -q "v6only:0"; then
	pass "listen :: is one socket that takes IPv4 too (v6only 0)"
else ss -Htlne "sport = :$port_d" >"$out"; fail "listen :: is one socket that takes IPv4 too (v6only 0)"; fi
if python3 - "$port_d" >"$out" 2>&1 <<'EOF'
import socket, sys
for host in ("127.0.0.1", "::1"):
    socket.create_connection((host, int(sys.argv[1])), timeout=5).close()
EOF
then pass "listen ::, connections from 127.0.0.1 and from ::1 are accepted"
else fail "listen ::, connections from 127.0.0.1 and from ::1 are accepted"; fi
rc=0
"$broker" --stats --json --listen :: --port $port_d --ca "$ca/ca.crt" \
	--cert "$ca/broker-broker.pem" >"$out" 2>&1 || rc=$?
if [[ $rc -eq 0 ]] && grep -q '"clusters":0[,}]' "$out"; then
	pass "qcg-broker --stats with listen :: asks https://[::1]:$port_d/ by itself"
else echo "(exit $rc)" >>"$out"; fail "qcg-broker --stats with listen :: asks https://[::1]:$port_d/ by itself"; fi

# --- what a config refuses ---------------------------------------------------
# misconf DESC TEXT PROGRAM ARG...: exit 1 with one line holding TEXT.
misconf() {
	local desc=$1 text=$2 rc=0
	shift 2
	"$@" >"$out" 2>&1 || rc=$?
	if [[ $rc -ne 0 ]] && [[ $(wc -l <"$out") -eq 1 ]] && grep -qF -- "$text" "$out"; then
		pass "$desc"
	else echo "(exit $rc)" >>"$out"; fail "$desc"; fi
}
misconf "helper: a frontend URL with an IPv6 address without brackets" "in brackets" \
	"$helper" --socket "$work/x.sock" --frontend "https://::1:$port_f/" --cluster c1 --node n1 \
	--address ::1 --ports $low-$high --ca "$ca/ca.crt" --cert "$ca/helper-c1-n1.pem"
misconf "helper: a link-local address with a zone id" "is not an IPv4 or IPv6 literal" \
	"$helper" --socket "$work/x.sock" --frontend "https://[::1]:$port_f/" --cluster c1 --node n1 \
	--address "fe80::1%lo" --ports $low-$high --ca "$ca/ca.crt" --cert "$ca/helper-c1-n1.pem"
misconf "frontend: a broker URL with an IPv6 address without brackets" "in brackets" \
	"$frontend" --listen ::1 --port $port_f --broker "https://2001:db8::10:7700/" --kind open \
	--ca "$ca/ca.crt" --cert "$ca/frontend-c1.pem"
misconf "broker: a proxy at an IPv6 address without brackets" "in brackets" \
	"$broker" --listen ::1 --port $port_b --proxy "p1@2001:db8::20:7703" \
	--ca "$ca/ca.crt" --cert "$ca/broker-broker.pem"
misconf "broker: a zone id in metrics-listen" "zone ids" \
	"$broker" --listen ::1 --port $port_b --metrics-listen "[fe80::1%lo]:9700" \
	--ca "$ca/ca.crt" --cert "$ca/broker-broker.pem"

echo "libqcgconn-ipv6: $passed passed, $failed failed"
((failed == 0))
