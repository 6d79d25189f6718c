#!/usr/bin/env bash
#
# libqcgconn-dualstack: contacts with several addresses and direct plans
# per family, on loopback (127.0.0.1 and ::1 of one network namespace).
#
#   cluster c1 (open, no declared ranges: its frontend's loopback, both families)
#     n1  address "::1, 127.0.0.1"   dual-stack: rank 0 listens on both
#     n2  address 127.0.0.1          IPv4 only
#     n3  address 127.0.0.1, ::1     dual-stack: rank 1 connects from here
#   cluster c2 (open, addresses 198.18.7.0/24, 2001:db8:7::/64): nodes that
#     register or are refused by the address of each family
#   cluster c3 (nat)
#     n6  address ::1                IPv6 only
#
# - n1's contact carries 127.0.0.1 first and ::1 beside it (frontend log);
# - n3 (dual) -> rank 0: direct over IPv6, the connection from ::1;
# - n2 (IPv4 only) -> rank 0: direct over IPv4, from 127.0.0.1;
# - ip6tables rejects ::1 to rank 0's port: n3 -> rank 0 falls back to
#   IPv4 within the same connect, and its helper logs why; the same when
#   ::1 leads to a stranger that takes the connection and closes it, or
#   says nothing (the handshake fails, or stalls for 2 s);
# - n3 -> rank 4 on n6 (NATed, IPv6 only): reversed, and n6's helper calls
#   back rank 5's IPv6 address;
# - a c2 node with an IPv6 address outside c2's IPv6 range is refused,
#   one inside both ranges registers; an open range outside the node
#   ranges stops a frontend at start.
# Ports 18901-18905, nodes' ranges 18910-18979, in a network namespace of
# its own (no other test sees them, nor its ip6tables rule).  Needs ::1 and
# root; skipped (77) else.
#
#   test-dualstack.sh BUILD_DIR SRC_DIR       exit 0 passed, 1 failed, 77 skipped

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)

# A network namespace of our own: the ip6tables rule below must touch no
# one else's ports.  Entered once, with lo up.
# shellcheck source=../lib/own_netns.sh
. "$src/tests/lib/own_netns.sh"
own_netns QCG_DUALSTACK_NETNS "$build" "$src"

grid_ip=127.0.0.1
# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"

cat_bin=$build/tools/qcg-cat
port_b=18901 port_f=18902 port_f2=18903 port_f3=18905

need_built "$helper" "$frontend" "$broker" "$certs" "$cat_bin"
need_commands ss python3 ip ip6tables
ip -6 addr show dev lo 2>/dev/null | grep -q 'inet6 ::1/128' || { echo "no ::1 on lo: skipping"; exit 77; }
ip6tables -L INPUT -n >/dev/null 2>&1 || { echo "ip6tables does not work here: skipping"; exit 77; }

grid_workdir qcgconn-dualstack
grid_ca "frontend c1" "frontend c2" "frontend c3" "helper c1/n1" "helper c1/n2" \
	"helper c1/n3" "helper c2/n4" "helper c2/n5" "helper c3/n6"
grid_ports_free $port_b $port_f $port_f2 $port_f3
grid_broker $port_b --log-level debug || exit 1
grid_frontend c1 $port_f --kind open --public-address 127.0.0.1 || exit 1
grid_helper n1 c1/n1 $port_f 18910-18929 --address "::1, 127.0.0.1" || exit 1
grid_helper n2 c1/n2 $port_f 18930-18939 || exit 1
grid_helper n3 c1/n3 $port_f 18940-18949 --address "127.0.0.1,::1" || exit 1
pass "three nodes registered: n1 and n3 with 127.0.0.1 and ::1, n2 with 127.0.0.1"

if logged "$work/frontend-c1.log" "node n1 registered: 127.0.0.1 and ::1 ports"; then
	pass "the frontend holds n1 at 127.0.0.1 and ::1 (IPv4 first, as an older peer reads it)"
else grep -h "registered" "$work/frontend-c1.log" >"$out" || true; fail "the frontend holds n1 at 127.0.0.1 and ::1 (IPv4 first, as an older peer reads it)"; fi

# listen_rank RANK SOCK NAME: qcg-cat RANK listens through SOCK (one
# connection), pid in $listener, JSON on $work/NAME.err.
listen_rank() {
	QCG_JOB=jd QCG_RANK=$1 QCG_JOB_SECRET=$TEST_SECRET QCG_HELPER_SOCKET=$2 \
		"$cat_bin" --json --timeout 30 listen >"$work/$3.recv" 2>"$work/$3.err" &
	listener=$!
	pids+=("$listener")
	within "rank $1 publishes its contact" 100 grep -q '"event":"listening"' "$work/$3.err"
}

# connect_from SOCK RANK NAME [TO]: qcg-cat RANK connects to rank TO (0)
# through SOCK and sends 64 KiB; its JSON on $work/NAME.err, exit status in $rc.
connect_from() {
	rc=0
	QCG_JOB_SECRET=$TEST_SECRET "$cat_bin" --json --helper "$1" --job jd --rank "$2" --timeout 20 \
		connect "${4:-0}" <"$work/in" >/dev/null 2>"$work/$3.err" || rc=$?
}

# json_is FILE PYTHON-EXPR: the last JSON line of FILE (as d) makes EXPR true.
json_is() {
	tail -n 1 "$1" | python3 -c "
import json, sys
d = json.loads(sys.stdin.read())
assert $2, d
" >"$out" 2>&1
}

head -c 65536 /dev/urandom >"$work/in"

# --- a dual-stack rank reached over IPv6 --------------------------------------
listen_rank 0 "$work/n1.sock" l1
# port_of NAME: the port the listener of NAME published.
port_of() { sed -n 's/.*"event":"listening".*"port":\([0-9]*\).*/\1/p' "$work/$1.err" | head -n 1; }
port=$(port_of l1)
if ss -Htlne "sport = :$port" | grep -q "v6only:0"; then
	pass "rank 0's listener takes both families on one socket (port $port, v6only 0)"
else ss -Htlne >"$out"; fail "rank 0's listener takes both families on one socket (port $port, v6only 0)"; fi
if logged "$work/frontend-c1.log" "job jd rank 0 published from node n1 at 127.0.0.1:$port and [::1]:$port"; then
	pass "its contact carries 127.0.0.1:$port and [::1]:$port"
else grep -h "published" "$work/frontend-c1.log" >"$out" || true; fail "its contact carries 127.0.0.1:$port and [::1]:$port"; fi

connect_from "$work/n3.sock" 1 c1
cp "$work/c1.err" "$out"
if [[ $rc -eq 0 ]]; then pass "dual-stack n3 -> rank 0: exit 0"; else fail "dual-stack n3 -> rank 0: exit 0"; fi
wait_exit "$listener" 100 || true
if json_is "$work/l1.err" 'd["event"] == "done" and d["technique"] == "direct" and d["address"].startswith("[::1]:")'; then
	pass "dual-stack -> dual-stack: direct over IPv6 (rank 0 saw the connection from [::1])"
else fail "dual-stack -> dual-stack: direct over IPv6 (rank 0 saw the connection from [::1])" "$work/l1.err"; fi
if logged "$work/broker.log" "over IPv6 first, IPv4 behind it"; then
	pass "the broker's plan says IPv6 first, IPv4 behind it"
else grep -h "jd" "$work/broker.log" >"$out" || true; fail "the broker's plan says IPv6 first, IPv4 behind it"; fi

# --- an IPv4-only rank reaches the dual-stack one over IPv4 -------------------
listen_rank 0 "$work/n1.sock" l2
connect_from "$work/n2.sock" 2 c2
cp "$work/c2.err" "$out"
if [[ $rc -eq 0 ]]; then pass "IPv4-only n2 -> rank 0: exit 0"; else fail "IPv4-only n2 -> rank 0: exit 0"; fi
wait_exit "$listener" 100 || true
if json_is "$work/l2.err" 'd["event"] == "done" and d["address"].startswith("127.0.0.1:")'; then
	pass "IPv4-only -> dual-stack: direct over IPv4 (from 127.0.0.1)"
else fail "IPv4-only -> dual-stack: direct over IPv4 (from 127.0.0.1)" "$work/l2.err"; fi

# --- IPv6 refused: the same connect goes on over IPv4 --------------------------
listen_rank 0 "$work/n1.sock" l3
port=$(port_of l3)
ip6tables -I INPUT -p tcp -d ::1 --dport "$port" -j REJECT --reject-with tcp-reset
connect_from "$work/n3.sock" 3 c3
cp "$work/c3.err" "$out"
if [[ $rc -eq 0 ]]; then pass "n3 -> rank 0 with IPv6 rejected: exit 0"; else fail "n3 -> rank 0 with IPv6 rejected: exit 0"; fi
wait_exit "$listener" 100 || true
ip6tables -D INPUT -p tcp -d ::1 --dport "$port" -j REJECT --reject-with tcp-reset
if json_is "$work/l3.err" 'd["event"] == "done" and d["technique"] == "direct" and d["address"].startswith("127.0.0.1:")'; then
	pass "IPv6 rejected: direct over IPv4 in the same connect"
else fail "IPv6 rejected: direct over IPv4 in the same connect" "$work/l3.err"; fi
if logged "$work/n3.log" "rank 3 -> rank 0: direct connected after: IPv6 direct to rank 0 failed: connect to ::1 port $port: Connection refused; IPv4 direct to 127.0.0.1 port $port"; then
	pass "n3's helper logs why: IPv6 direct failed, then IPv4 direct"
else grep -h "connected after" "$work/n3.log" >"$out" || true; fail "n3's helper logs why: IPv6 direct failed, then IPv4 direct"; fi
if grep -q "\"direct\".*\"failed\":[1-9]" <(broker_grid); then
	broker_grid >"$out"; fail "the fallback is no failure of direct at the broker"
else pass "the fallback is no failure of direct at the broker"; fi

# --- IPv6 reaches something else: the handshake fails or stalls, IPv4 follows -------
# ip6tables sends ::1 to rank 0's port on to a stranger at port 18904 that
# takes the TCP connection and then closes it, or says nothing: the same
# connect goes on over IPv4, after the handshake's failure or its silence
# (2 s: a direct attempt over IPv6 with IPv4 behind it).
stranger_port=18904
stranger() {
	python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_INET6)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("::1", int(sys.argv[1])))
s.listen(8)
end = time.time() + 40
while time.time() < end:
    c, _ = s.accept()
    if sys.argv[2] == "close":
        c.close()
    else:
        time.sleep(30)
' "$stranger_port" "$1" &
	pids+=("$!")
	within "the stranger at [::1]:$stranger_port listens" 50 \
		bash -c "ss -Htln 'sport = :$stranger_port' | grep -q ."
}
for how in close silent; do
	listen_rank 0 "$work/n1.sock" "l3$how"
	port=$(port_of "l3$how")
	stranger "$how"
	ip6tables -t nat -I OUTPUT -p tcp -d ::1 --dport "$port" -j REDIRECT --to-ports $stranger_port
	connect_from "$work/n3.sock" 3 "c3$how"
	ip6tables -t nat -D OUTPUT -p tcp -d ::1 --dport "$port" -j REDIRECT --to-ports $stranger_port
	kill "${pids[-1]}" 2>/dev/null || true
	wait_exit "$listener" 100 || true
	if [[ $rc -eq 0 ]] && json_is "$work/l3$how.err" \
		'd["event"] == "done" and d["technique"] == "direct" and d["address"].startswith("127.0.0.1:")'; then
		pass "IPv6 to a stranger that takes the connection and is $how: direct over IPv4 in the same connect"
	else
		cat "$work/c3$how.err" >>"$out"
		fail "IPv6 to a stranger that takes the connection and is $how: direct over IPv4 in the same connect" "$work/l3$how.err"
	fi
	if grep -qE "rank 3 -> rank 0: direct connected after: IPv6 direct to rank 0 failed: handshake with rank 0 at ::1 port $port: .+; IPv4 direct to 127\.0\.0\.1 port $port" "$work/n3.log"; then
		pass "... n3's helper logs the IPv6 handshake's failure, then IPv4 direct"
	else grep -h "connected after" "$work/n3.log" >"$out" || true; fail "... n3's helper logs the IPv6 handshake's failure, then IPv4 direct"; fi
done

# --- reversed into an IPv6-only node: the call back goes to our IPv6 address --------
grid_frontend c3 $port_f3 --kind nat --public-address 127.0.0.1 || exit 1
grid_helper n6 c3/n6 $port_f3 18970-18979 --address ::1 || exit 1
listen_rank 4 "$work/n6.sock" l4
connect_from "$work/n3.sock" 5 c4 4
cp "$work/c4.err" "$out"
if [[ $rc -eq 0 ]]; then pass "dual-stack n3 -> rank 4 on IPv6-only n6 behind a NAT: exit 0"
else fail "dual-stack n3 -> rank 4 on IPv6-only n6 behind a NAT: exit 0"; fi
wait_exit "$listener" 100 || true
if json_is "$work/c4.err" 'd["technique"] == "reversed" and d["address"].startswith("[::1]:")'; then
	pass "reversed: n6's helper called back rank 5's IPv6 address"
else fail "reversed: n6's helper called back rank 5's IPv6 address" "$work/c4.err"; fi

# --- addresses of each family against the site's declared ranges -----------------
grid_frontend c2 $port_f2 --kind open --addresses "198.18.7.0/24, 2001:db8:7::/64" || exit 1
"$helper" --socket "$work/n4.sock" --frontend "https://127.0.0.1:$port_f2/" --cluster c2 --node n4 \
	--address "198.18.7.4, 2001:db8:8::4" --ports 18950-18959 --ca "$ca/ca.crt" \
	--cert "$ca/helper-c2-n4.pem" >>"$work/n4.log" 2>&1 &
pids+=("$!")
within "a node with an IPv6 address outside c2's IPv6 range is refused" 100 \
	logged "$work/broker.log" "address 2001:db8:8::4 of node n4 is outside the node ranges cluster c2 declared"
within "... and its helper says why" 100 logged "$work/n4.log" "2001:db8:8::4 of node n4 is outside"
grid_helper n5 c2/n5 $port_f2 18960-18969 --address "2001:db8:7::5, 198.18.7.5" || exit 1
if logged "$work/broker.log" "node c2/n5 registered: 198.18.7.5 and 2001:db8:7::5"; then
	pass "a node inside both of c2's ranges registers, IPv4 first"
else grep -h "registered" "$work/broker.log" >"$out" || true; fail "a node inside both of c2's ranges registers, IPv4 first"; fi

# An open range must be one of the site's own: qcg-frontend stops at start,
# with one line saying so.
rc=0
"$frontend" --listen 127.0.0.1 --port 18904 --broker "$broker_url" --kind nat \
	--public-address 203.0.113.9 --addresses "198.18.9.0/24, 2001:db8:9::/48" \
	--open-addresses 2001:db8:10::/64 --ca "$ca/ca.crt" --cert "$ca/frontend-c2.pem" >"$out" 2>&1 || rc=$?
if [[ $rc -ne 0 ]] && [[ $(wc -l <"$out") -eq 1 ]] &&
	grep -qF "open-addresses: 2001:db8:10::/64 lies in none of the ranges of addresses" "$out"; then
	pass "frontend: an open range outside the site's node ranges is refused at start"
else echo "(exit $rc)" >>"$out"; fail "frontend: an open range outside the site's node ranges is refused at start"; fi

echo "libqcgconn-dualstack: $passed passed, $failed failed"
((failed == 0))
