#!/usr/bin/env bash
#
# launch-resume: a launch connection that breaks mid-job is resumed, and
# nothing the daemon sends or receives is lost, doubled or reordered.
#
#   qcg-launch --verbose a1 orted ... ==qcg-connect==> qcg-agent --node a1 --orted fake-orted
#     |  (stdout: the daemon's lines)                        `- fake-orted: "line K" on stdout,
#     `- runtime connection --> fake-mpirun (echo)              chunk K on its runtime connection,
#                                                               checks the echo
#
# While the daemon runs (about 30 s) the launch connection is cut twice
# (ss -K: both ends see it end, as when a proxy dies) and stalled once (its
# packets dropped by iptables: nothing ends, as when a NAT forgets the
# mapping).  Each time qcg-launch must connect again and resume; at the end
# its stdout holds every line once, in order, the fake mpirun got every
# runtime byte in order, the daemon got every echoed byte back, and
# qcg-launch exits with the daemon's status (0).  On a build without resuming
# qcg-launch exits 255 at the first cut.  That launch is encrypted (agent:
# QCG_ENCRYPT=always, launcher: --encrypt always): every connection of it is
# TLS (both ends say tls-user), and a capture of the launch connections
# (tcpdump on lo) holds none of the daemon's lines nor of its runtime
# chunks (issue 17).  Then a second launch goes to an agent in another
# cluster (c2, its own frontend and helper): encrypted by default
# (inter-site, neither end told); its agent is killed: qcg-launch must give
# up within 45 s, naming the host.
#
# Ports 18760-18799: broker 18761, frontends 18762 (c1) and 18763 (c2), the
# helpers 18770-18799 (c1) and 18764-18769 (c2).
# Needs root for ss -K and iptables (in a network namespace of its own: run
# it in unshare -n, as ctest's non-lab tests are).
#
#   test-launch-resume.sh BUILD_DIR SRC_DIR      exit 0 passed, 1 failed, 77 skipped

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)
fail_lines=40 log_lines=40
# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"

qcg_agent=$build/launch/qcg-agent
qcg_launch=$build/launch/qcg-launch
port_b=18761 port_f=18762 low=18770 high=18799
lines=600 chunk=4096

need_built "$qcg_agent" "$qcg_launch" "$helper" "$frontend" "$broker" "$certs"
need_commands python3 ss iptables tcpdump
[[ $(id -u) -eq 0 ]] || { echo "needs root (ss -K, iptables): skipping"; exit 77; }

grid_workdir qcg-resume
declare -a rules=()
resume_cleanup() {
	local r
	for r in "${rules[@]}"; do
		# shellcheck disable=SC2086 # a rule's words
		iptables -D $r 2>/dev/null || true
	done
	grid_cleanup
}
trap resume_cleanup EXIT

# The daemon: its lines on stdout, numbered chunks on its runtime connection
# (orte_hnp_uri, which the agent points at its loopback port), the echo checked.
cat >"$work/fake-orted" <<'EOF'
#!/usr/bin/env python3
import re, socket, sys, time
uri = sys.argv[sys.argv.index("orte_hnp_uri") + 1]
port = int(re.search(r":(\d+)$", uri).group(1))
def mca(n): return sys.argv[sys.argv.index(n) + 1]
lines, chunk = int(mca("qcgtest_lines")), int(mca("qcgtest_chunk"))
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(120)
def block(k): return (b"%08d" % k) * (chunk // 8)
got = b""; want = 0; bad = 0
for k in range(1, lines + 1):
    print("line %d" % k, flush=True)
    s.sendall(block(k))
    time.sleep(0.05)
    s.setblocking(False)
    try:
        while True:
            d = s.recv(65536)
            if not d: break
            got += d
    except BlockingIOError:
        pass
    s.settimeout(120)
    while len(got) >= chunk:
        want += 1
        bad += got[:chunk] != block(want)
        got = got[chunk:]
# Every echo in before our end: the agent closes the runtime connection
# (both ways) at our FIN, so an echo still on its way would be lost.
while want < lines:
    d = s.recv(65536)
    if not d: break
    got += d
    while len(got) >= chunk:
        want += 1
        bad += got[:chunk] != block(want)
        got = got[chunk:]
s.shutdown(socket.SHUT_WR)
print("orted: %d chunks echoed, %d wrong" % (want, bad), file=sys.stderr, flush=True)
sys.exit(0 if want == lines and bad == 0 and not got else 3)
EOF
# mpirun's runtime port: echoes, checks the chunks' order, writes the verdict.
cat >"$work/fake-mpirun" <<'EOF'
#!/usr/bin/env python3
import socket, sys
lines, chunk, portfile, result = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(4)
open(portfile + ".tmp", "w").write(str(l.getsockname()[1])); __import__("os").rename(portfile + ".tmp", portfile)
c, _ = l.accept()
got = b""; n = 0; bad = 0
while True:
    d = c.recv(65536)
    if not d: break
    c.sendall(d)
    got += d
    while len(got) >= chunk:
        n += 1
        bad += got[:chunk] != (b"%08d" % n) * (chunk // 8)
        got = got[chunk:]
c.close()
open(result, "w").write("chunks %d wrong %d left %d\n" % (n, bad, len(got)))
EOF
chmod +x "$work/fake-orted" "$work/fake-mpirun"

grid_one_node $port_b $port_f $low-$high
export QCG_HELPER_SOCKET=$work/helper.sock QCG_JOB=resume-$$ QCG_JOB_SECRET=$TEST_SECRET
root_opt=()
if [[ $(id -u) -eq 0 ]]; then root_opt=(--allow-root); fi
QCG_ENCRYPT=always "$qcg_agent" --node a1 --orted "$work/fake-orted" --log-level debug \
	"${root_opt[@]}" >>"$work/agent.log" 2>&1 &
pids+=($!)
wait_for "the agent" 100 grep -q "ready: agent of job $QCG_JOB for node a1" "$work/agent.log" ||
	{ fail "the agent comes up"; exit 1; }
agent_port=$(sed -n 's/.*ready: agent of job .* port \([0-9]*\)).*/\1/p' "$work/agent.log" | head -1)
[[ -n $agent_port ]] || { fail "the agent's port is in its log"; exit 1; }

"$work/fake-mpirun" $lines $chunk "$work/mpirun.port" "$work/mpirun.result" 2>>"$work/mpirun.log" &
pids+=($!)
wait_for "the fake mpirun's port" 50 test -s "$work/mpirun.port" || { fail "fake mpirun listens"; exit 1; }
mport=$(cat "$work/mpirun.port")

# Every launch connection (each goes to the agent's port) captured, from
# before the first.
tcpdump -Z root -i lo -n -U -s 0 -B 16384 -w "$work/launch.pcap" "tcp port $agent_port" \
	2>"$work/tcpdump.err" &
capture_pid=$!
pids+=("$capture_pid")
wait_for "tcpdump listening" 100 grep -q "listening on" "$work/tcpdump.err" ||
	{ fail "tcpdump starts ($(cat "$work/tcpdump.err"))"; exit 1; }

"$qcg_launch" --verbose --encrypt always a1 orted -mca orte_hnp_uri "\"4242.0;tcp://127.0.0.1:$mport\"" \
	-mca qcgtest_lines $lines -mca qcgtest_chunk $chunk \
	>"$work/launch.out" 2>"$work/launch.err" &
launch_pid=$!
pids+=("$launch_pid")

# The launch connection's launcher side: the local port of the connection to the agent.
launch_conn() { ss -Htn state established "dport = :$agent_port" | awk '{ split($3, a, ":"); print a[2] }' | head -1; }
# at_line N: the launcher has printed line N.
at_line() { grep -qx "line $1" "$work/launch.out"; }
resumed_count() { grep -c "resumed over a new connection" "$work/launch.err" || true; }
# resumed_more N: more than N resumes so far.
resumed_more() { [[ $(resumed_count) -gt $1 ]]; }

out=$work/launch.err
# Two cuts: both ends see the connection end.
for at in 60 160; do
	wait_for "line $at" 300 at_line $at || { fail "the daemon's line $at arrives"; exit 1; }
	before=$(resumed_count)
	ss -K -tn state established "( dport = :$agent_port or sport = :$agent_port )" >/dev/null 2>&1
	if wait_for "a resume" 300 resumed_more "$before"; then
		pass "cut at line $at: qcg-launch resumed ($(grep "resumed over" "$work/launch.err" | tail -1 | sed 's/.*(\(.*\))/\1/'))"
	else fail "cut at line $at: qcg-launch resumes"; fi
done
# A silent stall: the launch connection's packets dropped both ways.
wait_for "line 260" 300 at_line 260 || { fail "the daemon's line 260 arrives"; exit 1; }
cport=$(launch_conn)
before=$(resumed_count)
if [[ -n $cport ]] && iptables -I INPUT -p tcp --sport "$cport" -j DROP 2>>"$work/iptables.log" &&
	rules+=("INPUT -p tcp --sport $cport -j DROP") &&
	iptables -I INPUT -p tcp --dport "$cport" -j DROP 2>>"$work/iptables.log"; then
	rules+=("INPUT -p tcp --dport $cport -j DROP")
	if wait_for "a resume after the stall" 400 resumed_more "$before"; then
		pass "stalled (packets dropped) at line 260: seen and resumed ($(grep "broke" "$work/launch.err" | tail -1 | sed 's/.*broke (\(.*\)).*/\1/'))"
	else fail "stalled at line 260: qcg-launch sees the stall and resumes"; fi
else
	echo "iptables unusable here: the stall is not tried ($(cat "$work/iptables.log" 2>/dev/null))"
fi

rc=0
wait_exit "$launch_pid" 900 || true
out=$work/launch.err
if [[ $rc -eq 0 ]]; then pass "qcg-launch exits with the daemon's status, 0"
else echo "(exit $rc)" >>"$out"; fail "qcg-launch exits with the daemon's status, 0"; fi
seq 1 $lines | sed 's/^/line /' >"$work/want.out"
out=$work/launch.out
if cmp -s "$work/want.out" "$work/launch.out"; then
	pass "the daemon's $lines lines arrive once each, in order"
else
	diff "$work/want.out" "$work/launch.out" | head -20 >"$work/diff"
	out=$work/diff
	fail "the daemon's $lines lines arrive once each, in order"
fi
out=$work/launch.err
if grep -qx "orted: $lines chunks echoed, 0 wrong" "$work/launch.err" &&
	wait_for "fake mpirun's verdict" 100 test -s "$work/mpirun.result" &&
	grep -qx "chunks $lines wrong 0 left 0" "$work/mpirun.result"; then
	pass "the runtime connection's $lines chunks of $chunk bytes arrive in order both ways"
else
	cat "$work/mpirun.result" >>"$out" 2>/dev/null || true
	fail "the runtime connection's $lines chunks of $chunk bytes arrive in order both ways"
fi
kill -INT "$capture_pid" 2>/dev/null || true
wait_exit "$capture_pid" 100 || true
out=$work/launch.err
# Every connection of the launch (the first and each resume) encrypted, on
# both ends.
conns=$(grep -c "connected to its agent" "$work/launch.err" || true)
if [[ $conns -ge 3 && $(grep -c "connected to its agent (direct, tls-user," "$work/launch.err") -eq $conns ]] &&
	[[ $(grep -c "connection from rank [0-9]* (direct, tls-user," "$work/agent.log") -ge $conns ]]; then
	pass "--encrypt always: all $conns launch connections are TLS on both ends (tls-user)"
else
	grep "connection from rank" "$work/agent.log" >>"$out" || true
	fail "--encrypt always: every launch connection is TLS on both ends (tls-user)"
fi
# The capture holds the launch's traffic (at least the 600 chunks one way;
# tcpdump may drop packets on a loaded machine)
# but no plaintext of it: neither a daemon's line nor a run of a chunk.
out=$work/tcpdump.err
cap_size=$(stat -c %s "$work/launch.pcap" 2>/dev/null || echo 0)
if ((cap_size > lines * chunk)) && ! grep -aqF "line 300" "$work/launch.pcap" &&
	! grep -aqF "0000030000000300" "$work/launch.pcap"; then
	pass "the capture of the launch connections ($cap_size bytes) holds no plaintext of the daemon's lines or chunks"
else
	echo "(capture $cap_size bytes)" >>"$out"
	fail "the capture of the launch connections holds more than the chunks, and no plaintext of them"
fi

out=$work/agent.log
if [[ $(grep -c "launch 1: resumed by rank" "$work/agent.log") -ge 2 ]]; then
	pass "the agent moved launch 1 onto each new connection ($(grep -c "launch 1: resumed by rank" "$work/agent.log") times)"
else fail "the agent moved launch 1 onto each new connection"; fi

# The agent itself killed: no resume can work; qcg-launch gives up once the
# agent is not published any more (two tries of 10 s), well before the 60 s
# it tries a live one, naming the host.
grid_certs "frontend c2" "helper c2/n2"
grid_frontend c2 18763 --kind open --public-address 127.0.0.1 || { fail "c2's frontend comes up"; exit 1; }
grid_helper helper2 c2/n2 18763 18764-18769 || { fail "c2's helper comes up"; exit 1; }
QCG_HELPER_SOCKET=$work/helper2.sock "$qcg_agent" --node a1 --orted "$work/fake-orted" "${root_opt[@]}" \
	>>"$work/agent2.log" 2>&1 &
agent2=$!
pids+=("$agent2")
wait_for "the second agent" 100 grep -q "ready: agent of job" "$work/agent2.log" ||
	{ fail "the second agent comes up"; exit 1; }
rm -f "$work/mpirun.port"
"$work/fake-mpirun" $lines $chunk "$work/mpirun.port" "$work/mpirun2.result" 2>>"$work/mpirun.log" &
pids+=($!)
wait_for "the fake mpirun's port" 50 test -s "$work/mpirun.port" || { fail "fake mpirun listens"; exit 1; }
mport=$(cat "$work/mpirun.port")
"$qcg_launch" --verbose a1 orted -mca orte_hnp_uri "\"4242.0;tcp://127.0.0.1:$mport\"" \
	-mca qcgtest_lines $lines -mca qcgtest_chunk $chunk >"$work/launch2.out" 2>"$work/launch2.err" &
launch2=$!
pids+=("$launch2")
wait_for "line 20" 300 grep -qx "line 20" "$work/launch2.out" || { fail "the second launch runs"; exit 1; }
out=$work/launch2.err
if grep -q "connected to its agent ([a-z]*, tls-user," "$work/launch2.err" &&
	grep -q "connection from rank [0-9]* ([a-z]*, tls-user," "$work/agent2.log"; then
	pass "by default (inter-site) a launch connection to another cluster is TLS on both ends"
else
	cat "$work/agent2.log" >>"$out"
	fail "by default (inter-site) a launch connection to another cluster is TLS on both ends"
fi
t0=$(ms)
kill -9 "$agent2"
rc=0
wait_exit "$launch2" 600 || true
out=$work/launch2.err
if [[ $rc -eq 255 ]] && grep -q "^qcg-launch: a1: lost the connection to its agent (.*), and the agent is gone: " "$work/launch2.err" &&
	(($(ms) - t0 < 45000)); then
	pass "the agent killed: qcg-launch exits 255 after $(($(ms) - t0)) ms, 'lost the connection to its agent ..., and the agent is gone'"
else echo "(exit $rc after $(($(ms) - t0)) ms)" >>"$out"; fail "the agent killed: qcg-launch exits 255 within 45 s naming the host"; fi

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
