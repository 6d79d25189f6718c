#!/usr/bin/env bash
#
# The reflector listens where it is configured, and only there (issue 33's
# review): the real broker with `reflector = 127.0.0.1:P, [::1]:P`, in a
# network namespace of its own with net.ipv6.bindv6only = 1 (a host where
# IPv4-mapped IPv6 is off by default) and 2001:db8::2 on lo beside ::1.
#
# - ss -ltn shows exactly the two configured listeners, never *:P or [::]:P;
# - MAP answers over both, the IPv4 caller shown as IPv4;
# - another local address on that port (127.0.0.2, 2001:db8::2) is refused;
# - DIAL calls each caller back in its own family: an IPv4 caller's
#   listener is "open" (over an IPv6 socket to ::ffff:127.0.0.1 it would
#   read "icmp" here, a wrong "inbound filtered"), an IPv6 caller's too.
#
# Ports 27980-27981, in the namespace only.  Needs root; exit status: 0
# passed, 1 failed, 77 skipped.
#
#   test-reflector-listen.sh BUILD_DIR SRC_DIR

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)

# A network namespace of our own: the sysctl and the address die with it.
# shellcheck source=../lib/own_netns.sh
. "$src/tests/lib/own_netns.sh"
own_netns QCG_REFLECTOR_LISTEN_NETNS "$build" "$src"

# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"
need_built "$broker"
need_commands ss python3 ip sysctl
ip -6 addr show dev lo 2>/dev/null | grep -q 'inet6 ::1/128' || { echo "no ::1 on lo: skipping"; exit 77; }
sysctl -qw net.ipv6.bindv6only=1
ip -6 addr add 2001:db8::2/128 dev lo nodad
grid_workdir test-reflector-listen
port=27981

# call HOST REQUEST: the reflector's answer to REQUEST from HOST's family
# ("DIAL": a listener of the caller's on HOST, its port in the request; the
# answer without that port), or "refused".
call() {
	python3 - "$1" "$port" "$2" <<'EOF'
import socket, sys
host, port, req = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
if req == "DIAL":
    l = socket.socket(fam)
    l.bind((host, 0))
    l.listen(1)
    req = "DIAL %d" % l.getsockname()[1]
try:
    s = socket.create_connection((host, port), timeout=5)
except ConnectionRefusedError:
    print("refused")
    sys.exit(0)
s.sendall(req.encode() + b"\n")
w = s.makefile().readline().split()
print(" ".join(w[:2] + w[3:]))
EOF
}
# check DESC WANT GOT
check() {
	echo "got $3" >"$out"
	if [[ $3 == "$2" ]]; then pass "$1"; else fail "$1"; fi
}

grid_ca
grid_broker 27980 --reflector "127.0.0.1:$port, [::1]:$port" --reflector-same-user || exit 1
wait_for "the reflector" 50 listening $port || true
check "the reflector listens on the two configured addresses only (ss -ltn)" \
	"127.0.0.1:$port [::1]:$port" "$(ss -Hltn "sport = :$port" | awk '{print $4}' | sort | xargs)"
check "the broker logs both addresses" 1 \
	"$(grep -c "serves 127.0.0.1:$port and \[::1\]:$port" "$work/broker.log")"
check "it answers MAP over IPv4, the caller shown as IPv4" "MAPPED 127.0.0.1" "$(call 127.0.0.1 MAP)"
check "it answers MAP over IPv6" "MAPPED ::1" "$(call ::1 MAP)"
check "another local IPv4 address on its port is refused" refused "$(call 127.0.0.2 MAP)"
check "another local IPv6 address on its port is refused" refused "$(call 2001:db8::2 MAP)"
check "DIAL calls an IPv4 caller back over IPv4 (bindv6only = 1)" "DIALED 127.0.0.1 open" \
	"$(call 127.0.0.1 DIAL)"
check "DIAL calls an IPv6 caller back over IPv6" "DIALED ::1 open" "$(call ::1 DIAL)"

echo "$passed passed, $failed failed"
((failed == 0))
