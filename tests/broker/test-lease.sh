#!/usr/bin/env bash
#
# The broker's lease on a cluster (issue 32): the real broker, two frontends
# and their helpers on 127.0.0.1 with a throw-away CA.
#
#   test-lease.sh BUILD_DIR SRC_DIR
#
# - a frontend that stops polling (SIGSTOP: a hung or cut-off head node)
#   loses its cluster at the broker after cluster-lease (30 s): its contact
#   withdrawn, --grid and --stats no longer count it, a line says why;
#   the other cluster stays;
# - resumed, it registers again and publishes its live contact again;
# - cluster-lease below 30 s is refused at start.
#
# Ports 27960-27969 belong to this test.  Exit status: 0 passed, 1 failed,
# 77 skipped.

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)

log_lines=40 logs_var=QCG_TEST_LOGS
# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"

cat_bin=$build/tools/qcg-cat
need_built "$helper" "$frontend" "$broker" "$cat_bin"
need_commands openssl ss
grid_workdir test-lease

port_b=27960 port_c1=27961 port_c2=27962 lease=30

# --- refused at start --------------------------------------------------------

grid_ca "frontend c1" "frontend c2" "helper c1/n1" "helper c2/n1"
rc=0
"$broker" --port "$port_b" --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" \
	--cluster-lease 10 >"$work/short.log" 2>&1 || rc=$?
if [[ $rc -eq 2 ]] && grep -q "cluster-lease: 10 s is shorter" "$work/short.log"; then
	pass "a cluster-lease of 10 s is refused at start (exit 2, one line)"
else
	cp "$work/short.log" "$out"
	fail "a cluster-lease of 10 s is refused at start (exit 2, one line)"
fi

# --- the grid ----------------------------------------------------------------

grid_ports_free "$port_b" "$port_c1" "$port_c2"
grid_broker "$port_b" --cluster-lease "$lease" || exit 1
grid_frontend c1 "$port_c1" --kind open --public-address 127.0.0.1 || exit 1
fe_c1=${pids[-1]}
grid_frontend c2 "$port_c2" --kind open --public-address 127.0.0.1 || exit 1
grid_helper n1 c1/n1 "$port_c1" 27963-27965 || exit 1
grid_helper c2n1 c2/n1 "$port_c2" 27966-27968 || exit 1

listen_on() {
	QCG_JOB=jl QCG_RANK=$2 QCG_JOB_SECRET=$TEST_SECRET QCG_HELPER_SOCKET=$work/$1.sock \
		"$cat_bin" --json --timeout 0 listen >/dev/null 2>"$work/cat-$1.err" &
	pids+=("$!")
}
listen_on n1 0
listen_on c2n1 1
within "two contacts at the broker" 100 contacts_are 2

# --- a frontend that stops polling -------------------------------------------

kill -STOP "$fe_c1"
stopped=$(ms)
# Its last poll began at most 25 s ago; the lease runs 30 s from it, the
# sweep every second: gone within 30 + 2 s, and not before 30 - 25 s.
within "the silent cluster's contact is withdrawn within the lease" 330 contacts_are 1
gone_after=$(($(ms) - stopped))
if ((gone_after >= (lease - 25) * 1000)); then
	pass "not before the lease could have run out ($((gone_after / 1000)) s)"
else
	fail "not before the lease could have run out ($((gone_after / 1000)) s)"
fi
within "--stats counts one cluster" 20 clusters_are 1
within "--grid drops cluster c1" 20 grid_lacks c1
within "--grid keeps cluster c2" 20 grid_has c2
within "the broker says why" 20 logged "$work/broker.log" \
	"cluster c1 dropped: its frontend has not polled for"

# --- and comes back ----------------------------------------------------------

kill -CONT "$fe_c1"
within "resumed, its frontend publishes the live contact again" 150 contacts_are 2
within "--grid lists cluster c1 again" 20 grid_has c1
within "its helper stays registered" 20 connected "$work/n1.sock"

echo "$passed passed, $failed failed"
((failed == 0))
