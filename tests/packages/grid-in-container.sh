#!/usr/bin/env bash
# Run by test-packages.sh inside a Debian 12 container where the packages,
# and nothing else of qcg-connect, are installed: checks them as an admin
# would, then a grid set up as docs/admin.md says, from the blocks
# test-packages.sh extracted into /doc with tests/docs/doc_blocks.py: §3's
# CA block run as pasted, every config block written to its file, and each
# daemon started by the ExecStart, User and directories of its installed
# unit (no systemd in the container).  Then, through that grid, one qcg-cat
# transfer and an MPI job (/mpi/qcg-mpi-pairs, 2 ranks, btl self,qcg) run by
# an ordinary user with no environment variable pointing Open MPI anywhere.
#
#   one container, its own loopback (no other network):
#     lo: 127.0.0.1; qcg0 (a veth, peer qcg1): the addresses the guide's
#         blocks name (/doc/addresses: broker 203.0.113.10, proxy 203.0.113.20,
#         head node 198.18.1.10, node01 198.18.1.11)
#     /etc/hosts: the guide's host names (/doc/hosts)
set -euo pipefail
fail() { echo "FAIL: $*" >&2; for f in /tmp/*.log /tmp/units/*.log; do [ -e "$f" ] && tail -n 15 "$f" | sed "s|^|$f: |" >&2; done; exit 1; }
say() { printf '== %s\n' "$*"; }
btl=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_btl_qcg.so

# What the packages installed.
getent passwd qcg | grep -q ':/usr/sbin/nologin$' || fail "no qcg system user with nologin: $(getent passwd qcg)"
getent group qcg >/dev/null || fail "no qcg group"
for s in broker proxy frontend helper; do
	[ -f "/lib/systemd/system/qcg-$s.service" ] || fail "qcg-$s.service not installed"
	grep -qx "ExecStart=/usr/sbin/qcg-$s --config /etc/qcg-connect/qcg-$s.conf" "/lib/systemd/system/qcg-$s.service" ||
		fail "qcg-$s.service does not run /usr/sbin/qcg-$s with /etc/qcg-connect/qcg-$s.conf"
	! compgen -G "/etc/systemd/system/*.wants/qcg-$s.service" >/dev/null ||
		fail "qcg-$s.service enabled before it is configured"
done
for pc in broker:broker broker:proxy frontend:frontend helper:helper; do
	dpkg-query -W -f='${Conffiles}\n' "qcg-connect-${pc%%:*}" | grep -q " /etc/qcg-connect/qcg-${pc#*:}.conf " ||
		fail "/etc/qcg-connect/qcg-${pc#*:}.conf is not a conffile of qcg-connect-${pc%%:*}"
done
[ -f /usr/lib/x86_64-linux-gnu/pkgconfig/qcgconn.pc ] && [ -f /usr/include/qcgconn.h ] ||
	fail "libqcgconn-dev: no qcgconn.pc or qcgconn.h"
[ -f /usr/lib/x86_64-linux-gnu/pkgconfig/qcgcolour.pc ] && [ -f /usr/include/qcgcolour.h ] &&
	[ -e /usr/lib/x86_64-linux-gnu/libqcgcolour.so.0 ] ||
	fail "libqcgcolour0, libqcgcolour-dev: no libqcgcolour.so.0, qcgcolour.pc or qcgcolour.h"
for f in /usr/sbin/qcg-* /usr/bin/qcg-cat /usr/bin/qcg-probe /usr/bin/qcg-agent /usr/bin/qcg-launch "$btl"; do
	[ -e "$f" ] || fail "$f not installed"
	! ldd "$f" | grep 'not found' || fail "$f: a library not found"
done
for f in /usr/sbin/qcg-* /usr/bin/qcg-*; do
	"$f" --version >/dev/null || fail "$f --version"
done
for page in man8/qcg-broker.8 man5/qcg-helper.conf.5 man1/qcg-cat.1; do
	[ -f "/usr/share/man/$page.gz" ] || fail "man page $page not installed"
done
# Open MPI finds the component with no setting at all.
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root ompi_info 2>&1 | grep -q 'MCA btl: qcg' ||
	fail "ompi_info (no environment) does not list btl qcg"
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root ompi_info 2>&1 | grep -q 'MCA coll: qcg' ||
	fail "ompi_info (no environment) does not list coll qcg"
# What a daemon needs without systemd (no systemd-tmpfiles here): the
# broker's state directory and the helper's socket directory, the qcg
# user's (issue 36), and the tmpfiles.d file that makes them at boot.
[ "$(stat -c %U:%G:%a /var/lib/qcg-connect 2>&1)" = qcg:qcg:700 ] ||
	fail "/var/lib/qcg-connect: $(stat -c %U:%G:%a /var/lib/qcg-connect 2>&1), not qcg:qcg:700"
[ "$(stat -c %U:%G:%a /run/qcg 2>&1)" = qcg:qcg:755 ] ||
	fail "/run/qcg: $(stat -c %U:%G:%a /run/qcg 2>&1), not qcg:qcg:755"
grep -q '^d /run/qcg 0755 qcg qcg' /usr/lib/tmpfiles.d/qcg-connect.conf ||
	fail "no tmpfiles.d/qcg-connect.conf making /run/qcg"
say "packages: qcg user, units not enabled, conffiles, libraries, --version, man pages, ompi_info lists btl qcg, /var/lib/qcg-connect and /run/qcg made"

# The network the guide's blocks name, as tests/docs does it: its addresses
# on the host, its host names in /etc/hosts.  The addresses go on a NIC (a
# veth pair inside the container), as on a node, not on lo: with other
# addresses on lo, mpirun finds "No network interfaces ... for out-of-band
# communications".
ip link set lo up
ip link add qcg0 type veth peer name qcg1
ip link set qcg0 up
ip link set qcg1 up
while read -r a; do ip addr add "$a/32" dev qcg0; done </doc/addresses
cat /doc/hosts >>/etc/hosts

# §3: the CA block(s), the run blocks before the first config block, as
# pasted; then the copy into /etc/qcg it asks for (tests/docs/lib.sh's
# doc_deploy, this container being the host), with its table's owners.
blocks=/doc/blocks
while IFS=$'\t' read -r n where kind file role _; do
	[ "$kind" != config ] || break
	[ "$kind" = run ] || continue
	bash -e -o pipefail "$blocks/$n.txt" >"/tmp/block-$n.log" 2>&1 || fail "$where ($role) does not run"
done <"$blocks/index"
export QCG_DOCTEST_ROOT=
# shellcheck source=tests/docs/lib.sh
. /doc/lib.sh
doc_deploy
chgrp qcg /etc/qcg/*.pem
chown qcg /etc/qcg/proxy.key

# Every config block into its file, over the packages' example (conffiles).
configs=()
while IFS=$'\t' read -r n _ kind file _; do
	[ "$kind" = config ] || continue
	cp "$blocks/$n.txt" "$file"
	configs+=("$file")
done <"$blocks/index"
((${#configs[@]} == 4)) || fail "admin.md has ${#configs[@]} config blocks, not the 4 daemons'"

# unit_start FILE: the installed unit whose ExecStart reads config FILE,
# started as systemd would: its User and Group, its StateDirectory and
# RuntimeDirectory made with their modes, its ExecStart word for word; then
# waited for until it listens (TCP, or the helper's socket).
mkdir -p /tmp/units
unit_start() {
	local unit key val user group pid i
	unit=$(grep -lE "^ExecStart=.* --config $1( |\$)" /lib/systemd/system/qcg-*.service) ||
		fail "no installed unit reads $1"
	declare -A u=([RuntimeDirectoryMode]=0755 [StateDirectoryMode]=0755)
	while IFS='=' read -r key val; do u[$key]=$val; done < <(grep -E '^[A-Za-z]+=' "$unit")
	user=${u[User]:-root} group=${u[Group]:-root}
	[ -z "${u[StateDirectory]:-}" ] ||
		install -d -o "$user" -g "$group" -m "${u[StateDirectoryMode]}" "/var/lib/${u[StateDirectory]}"
	[ -z "${u[RuntimeDirectory]:-}" ] ||
		install -d -o "$user" -g "$group" -m "${u[RuntimeDirectoryMode]}" "/run/${u[RuntimeDirectory]}"
	unit=$(basename "$unit" .service)
	# setpriv execs (no process in between): $! is the daemon.  The helper
	# goes without its unit's two capabilities (no iptables here; the unit's
	# comment says it serves every other technique so); the others get their
	# unit's AmbientCapabilities (the broker's setuid and setgid, with which
	# its reflector becomes qcg-reflector).
	local caps=() set="" c
	if [ "$unit" != qcg-helper ] && [ -n "${u[AmbientCapabilities]:-}" ]; then
		for c in ${u[AmbientCapabilities]}; do
			c=${c#CAP_}
			set+=",+${c,,}"
		done
		caps=(--inh-caps "-all$set" --ambient-caps "-all$set" --bounding-set "-all$set")
	fi
	# shellcheck disable=SC2086 # ExecStart's words
	setpriv --reuid "$user" --regid "$group" --init-groups "${caps[@]}" -- ${u[ExecStart]} \
		</dev/null >"/tmp/units/$unit.log" 2>&1 &
	pid=$!
	for ((i = 0; i < 300; i++)); do
		ss -Hlntxp | grep -q "pid=$pid," && return 0
		kill -0 "$pid" 2>/dev/null || fail "$unit (${u[ExecStart]}) exited at start"
		sleep 0.1
	done
	fail "$unit does not listen within 30 s"
}
for c in "${configs[@]}"; do unit_start "$c"; done
for ((i = 0; i < 300; i++)); do
	qcg-helper --config /etc/qcg-connect/qcg-helper.conf --status --json 2>/dev/null |
		grep -q '"upstream_connected":true' && break
	sleep 0.1
done
((i < 300)) || fail "the helper did not connect to its frontend within 30 s"
say "grid from admin.md's blocks (${configs[*]##*/}), each daemon started as its unit says, up"

export QCG_JOB=qcg-packages-1 QCG_JOB_SECRET=5f0c6b1e9a2d4f7380c1b5e6d7a8f9021436587a9bcdef0123456789abcdef01
head -c 1048576 /dev/urandom >/tmp/in
timeout 60 qcg-cat --rank 0 --timeout 30 --json listen >/tmp/out 2>/tmp/listen.log </dev/null &
listen=$!
for ((i = 0; i < 300; i++)); do
	grep -q listening /tmp/listen.log && break
	kill -0 "$listen" 2>/dev/null || break
	sleep 0.1
done
grep -q listening /tmp/listen.log || fail "qcg-cat listen did not start"
timeout 60 qcg-cat --rank 1 --timeout 30 --json connect 0 </tmp/in 2>/tmp/connect.log >/dev/null ||
	fail "qcg-cat connect"
wait "$listen" || fail "qcg-cat listen"
cmp -s /tmp/in /tmp/out || fail "qcg-cat: $(stat -c %s /tmp/out) bytes received, not the 1 MiB sent"
say "qcg-cat: 1 MiB from rank 1 to rank 0 through the packaged grid, intact"

# An MPI job as a user runs it: an ordinary account, its job id and secret
# the only variables (env -i), no component path in Open MPI's parameter
# files; ob1 and no vader, as docs/user.md runs it but with btl_qcg
# carrying the two ranks' traffic, and its verbose lines say which
# connections it made.
! grep -rsE "^[[:space:]]*mca_base_component_path" /etc/openmpi || fail "a component path set in /etc/openmpi"
useradd -m alice
cp /mpi/qcg-mpi-pairs /home/alice/
rc=0
runuser -u alice -- env -i PATH=/usr/bin:/bin HOME=/home/alice QCG_JOB=qcg-packages-mpi \
	QCG_JOB_SECRET=$QCG_JOB_SECRET timeout -k 5 120 mpirun -np 2 --oversubscribe \
	--mca pml ob1 --mca btl self,qcg --mca btl_qcg_verbose 1 -x QCG_JOB -x QCG_JOB_SECRET \
	/home/alice/qcg-mpi-pairs >/tmp/mpirun.log 2>&1 || rc=$?
sed 's/^/   | /' /tmp/mpirun.log
((rc == 0)) || fail "mpirun exit $rc"
grep -q '^PASS pairs' /tmp/mpirun.log || fail "qcg-mpi-pairs did not pass"
grep -q '^summary: direct 1$' /tmp/mpirun.log || fail "the pair was not connected by btl_qcg"
n=$(grep -cE 'btl_qcg: rank [01] (->|<-) rank [01] \(host .*\): direct, setup' /tmp/mpirun.log || true)
((n == 2)) || fail "$n btl_qcg verbose lines for the connection, not 2 (one per end)"
say "mpirun -np 2 --mca btl self,qcg as user alice, no environment: btl_qcg connected the ranks (direct)"
