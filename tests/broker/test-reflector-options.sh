#!/usr/bin/env bash
#
# The reflector's bounds are the broker's options (issue 32): the real
# broker with its reflector process on 127.0.0.1, idle connections to it.
#
#   test-reflector-options.sh BUILD_DIR SRC_DIR
#
# - reflector-per-address 4: of 10 idle connections from one address the
#   reflector keeps 4 and closes 6 at once (reflector_refused_address in
#   --stats), where the default (128) keeps all 10;
# - reflector-line-timeout 1: an idle connection is cut after 1 s, not 5;
# - --help names each option with its default; a per-cluster share above
#   the whole is refused at start.
#
# Ports 27975-27979 belong to this test.  Exit status: 0 passed, 1 failed,
# 77 skipped.

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)
# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"
need_built "$broker"
need_commands openssl ss python3
grid_workdir test-reflector-options
idle() { python3 "$src/tests/broker/idle-conns.py" 127.0.0.1 "$1" "$2" "$3"; }
# check DESC WANT GOT
check() {
	echo "got $3" >"$out"
	if [[ $3 == "$2" ]]; then pass "$1"; else fail "$1"; fi
}

help=$("$broker" --help)
for o in "reflector-line-timeout N (1..60)" "reflector-connections N (16..65536)" \
	"reflector-per-address N (1..65536)" "reflector-plans N (64..1048576)" \
	"reflector-plans-per-cluster N (0..1048576)"; do
	if grep -qF -- "--$o" <<<"$help"; then pass "--help names --$o"; else fail "--help names --$o"; fi
done

grid_ca
rc=0
"$broker" --port 27975 --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" --reflector-plans 1000 \
	--reflector-plans-per-cluster 2000 >"$work/bad.log" 2>&1 || rc=$?
if [[ $rc -eq 2 ]] && grep -q "reflector-plans-per-cluster: 2000 is more than" "$work/bad.log"; then
	pass "a cluster's share above the whole is refused at start"
else
	cp "$work/bad.log" "$out"
	fail "a cluster's share above the whole is refused at start"
fi

# A broker with a reflector: start it, run CHECKS, stop it.
with_reflector() {
	grid_ports_free 27975 27976
	grid_broker 27975 --reflector 127.0.0.1:27976 --reflector-same-user "$@" || exit 1
	wait_for "the reflector" 50 listening 27976 || true
}
stop_broker() {
	kill "${pids[-1]}"
	wait_exit "${pids[-1]}" 100
	unset 'pids[-1]'
}

# The listen backlog follows reflector-connections (the kernel keeps at most
# net.core.somaxconn of it).
backlog() {
	local want=$(($1 < $(cat /proc/sys/net/core/somaxconn) ? $1 : $(cat /proc/sys/net/core/somaxconn)))
	echo "$want $(ss -Hltn "sport = :27976" | awk '{print $3; exit}')"
}

with_reflector
check "by default the reflector keeps 10 idle connections from one address" 10 "$(idle 27976 10 0.5)"
read -r want got < <(backlog 1024)
check "by default the reflector's listen backlog is 1024 (reflector-connections)" "$want" "$got"
stop_broker

with_reflector --reflector-connections 3000
read -r want got < <(backlog 3000)
check "reflector-connections 3000 makes its listen backlog 3000" "$want" "$got"
stop_broker

with_reflector --reflector-per-address 4 --reflector-line-timeout 1
check "reflector-per-address 4 keeps 4 of 10 idle connections" 4 "$(idle 27976 10 0.5)"
within "--stats counts the 6 refused" 30 \
	bash -c "'$broker' --stats --json --url '$broker_url' --ca '$ca/ca.crt' \
		--cert '$ca/broker-broker.pem' | grep -q '\"reflector_refused_address\":6[,}]'"
check "reflector-line-timeout 1 cuts an idle connection within 2 s" 0 "$(idle 27976 1 2)"
stop_broker

echo "$passed passed, $failed failed"
((failed == 0))
