#!/usr/bin/env bash
# Run by test-packages.sh inside a Debian 12 container where the packages,
# and nothing else of qcg-connect, are installed: checks them as an admin
# would, then a grid on loopback from their binaries, their qcg user, the
# configs of /grid-conf put into /etc/qcg-connect, certificates from the
# packaged qcg-certs, and one qcg-cat transfer through it.
set -euo pipefail
fail() { echo "FAIL: $*" >&2; for f in /tmp/*.log; do [ -e "$f" ] && tail -n 15 "$f" | sed "s|^|$f: |" >&2; done; exit 1; }
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
say "packages: qcg user, units not enabled, conffiles, libraries, --version, man pages, ompi_info lists btl qcg"

# A grid on loopback, configured as docs/admin.md says (certificates group
# qcg 0640, the proxy key owner qcg 0600: §3), each daemon as user qcg.
qcg-certs --dir /etc/qcg init >/dev/null
qcg-certs --dir /etc/qcg issue broker broker --san 127.0.0.1 >/dev/null
qcg-certs --dir /etc/qcg issue proxy p1 --san 127.0.0.1 >/dev/null
qcg-certs --dir /etc/qcg issue frontend site1 --san 127.0.0.1 >/dev/null
qcg-certs --dir /etc/qcg issue helper site1/node1 >/dev/null 2>&1
rm -f /etc/qcg/ca.key
(umask 077 && openssl rand -hex 32 >/etc/qcg/proxy.key)
chown qcg:qcg /etc/qcg/proxy.key
chmod 0755 /etc/qcg && chmod 0644 /etc/qcg/ca.crt
chgrp qcg /etc/qcg/*.pem && chmod 0640 /etc/qcg/*.pem
# The configs (tests/docker/lib.sh: loopback_configs) over the packages' examples.
cp /grid-conf/*.conf /etc/qcg-connect/
# What the helper's unit makes (RuntimeDirectory=qcg).
install -d -o qcg -g qcg -m 0755 /run/qcg
for s in broker proxy frontend helper; do
	runuser -u qcg -- "qcg-$s" --config "/etc/qcg-connect/qcg-$s.conf" --syslog=no >"/tmp/$s.log" 2>&1 &
done
for ((i = 0; i < 300; i++)); do
	qcg-helper --config /etc/qcg-connect/qcg-helper.conf --syslog=no --status --json 2>/dev/null |
		grep -q '"upstream_connected":true' && break
	sleep 0.1
done
((i < 300)) || fail "the helper did not connect to its frontend within 30 s"
say "broker, proxy, frontend, helper up as user qcg"

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
