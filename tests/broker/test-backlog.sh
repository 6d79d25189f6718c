#!/usr/bin/env bash
#
# The SOAP services' listen backlog follows their configuration (issue 32):
# every connection they let in at once (max-connections, plus the TLS
# handshakes: max-handshakes, broker 1024, frontend 256) may arrive together, e.g. every frontend's pool reconnecting
# after a broker restart.  What `ss -ltn` shows (Send-Q of a listening
# socket is its backlog), for the real broker and frontend on 127.0.0.1.
#
#   test-backlog.sh BUILD_DIR SRC_DIR
#
# Ports 27970-27972 belong to this test.  Exit status: 0 passed, 1 failed,
# 77 skipped.

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)
# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"
need_built "$frontend" "$broker"
need_commands openssl ss
grid_workdir test-backlog

# backlog PORT: the backlog of the socket listening on PORT.
backlog() { ss -Hltn "sport = :$1" | awk '{print $3; exit}'; }
kernel_max=$(cat /proc/sys/net/core/somaxconn)
# backlog_is DESC PORT N: passes when PORT's backlog is N (or the kernel's cap).
backlog_is() {
	local got want=$(($3 < kernel_max ? $3 : kernel_max))
	got=$(backlog "$2")
	echo "$got" >"$out"
	if [[ $got == "$want" ]]; then pass "$1 ($got)"; else fail "$1 ($got)"; fi
}

grid_ca "frontend c1"
grid_ports_free 27970 27971 27972
grid_broker 27970 --max-connections 3000 || exit 1
backlog_is "a broker with max-connections 3000 listens with a backlog of 4024" 27970 4024
if logged "$work/broker.log" "1024 TLS handshakes, 16 per address, 5000 ms each; listen backlog 4024"; then
	pass "the broker's start line says so, with its default of 1024 handshakes"
else
	fail "the broker's start line says so, with its default of 1024 handshakes"
fi
grid_frontend c1 27971 --kind open --public-address 127.0.0.1 --max-handshakes 512 || exit 1
backlog_is "a frontend with max-handshakes 512 listens with a backlog of 1536" 27971 1536

echo "$passed passed, $failed failed"
((failed == 0))
