#!/usr/bin/env bash
# Direct over IPv6 against direct over IPv4, same grid, same run (issue 33):
# a dual-stack node's rank 0 takes one qcg-cat of MIB MiB, ROUNDS times from a
# dual-stack node (planned IPv6 first: ::1) and from an IPv4-only node
# (127.0.0.1), alternating; medians with the spread (min-max) of the setup
# time (qcg-cat's setup_us: lookup, TCP, handshake) and of MB/s over the whole
# command (a process's start and its helper's HELLO included, the same for
# both).  The real broker, frontend and helpers on loopback
# (tests/lib/loopback-grid.sh; ports 18601-18602, 18610-18649), so run it
# in a network namespace of its own:
#
#   unshare -n sh -c 'ip link set lo up; bench/family-loopback.sh [MIB] [ROUNDS]'
#       (QCG_BUILD_DIR, default build/)
set -euo pipefail
export LC_ALL=C
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${QCG_BUILD_DIR:-$src/build}" && pwd)
MIB=${1:-256}
ROUNDS=${2:-7}
grid_ip=127.0.0.1
# shellcheck source=../tests/lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"
cat_bin=$build/tools/qcg-cat
need_built "$helper" "$frontend" "$broker" "$certs" "$cat_bin"
need_commands python3
ip -6 addr show dev lo 2>/dev/null | grep -q 'inet6 ::1/128' || die "no ::1 on lo"

grid_workdir qcg-family-bench
grid_ca "frontend c1" "helper c1/n1" "helper c1/n2" "helper c1/n3"
grid_ports_free 18601 18602
grid_broker 18601 || exit 1
grid_frontend c1 18602 --kind open --public-address 127.0.0.1 || exit 1
grid_helper n1 c1/n1 18602 18610-18629 --address "127.0.0.1, ::1" || exit 1
grid_helper n2 c1/n2 18602 18630-18639 || exit 1
grid_helper n3 c1/n3 18602 18640-18649 --address "127.0.0.1, ::1" || exit 1
head -c $((MIB * 1024 * 1024)) /dev/zero >"$work/in"
secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')

rank=0
for ((round = 1; round <= ROUNDS; round++)); do
	for fam in ipv6 ipv4; do
		rank=$((rank + 1))
		QCG_JOB=fb QCG_RANK=0 QCG_JOB_SECRET=$secret QCG_HELPER_SOCKET=$work/n1.sock \
			"$cat_bin" --json --timeout 60 listen >/dev/null 2>"$work/l.err" &
		listener=$!
		pids+=("$listener")
		wait_for "rank 0 listening" 100 grep -q listening "$work/l.err"
		sock=$work/n3.sock
		[[ $fam == ipv4 ]] && sock=$work/n2.sock
		t0=$(ms)
		QCG_JOB_SECRET=$secret "$cat_bin" --json --helper "$sock" --job fb --rank $rank \
			--timeout 60 connect 0 <"$work/in" >/dev/null 2>"$work/c.err"
		t1=$(ms)
		wait "$listener" || true
		printf '%s %s %s\n' "$fam" "$((t1 - t0))" "$(tail -n 1 "$work/c.err")" >>"$work/runs"
	done
done

python3 - "$work/runs" "$MIB" <<'EOF'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    fam, ms, js = line.split(" ", 2)
    d = json.loads(js)
    rows.setdefault(fam, []).append((d["setup_us"], d["bytes"] / 1e6 / (int(ms) / 1000), d["address"]))
def show(v):
    return "%.0f (%.0f-%.0f)" % (statistics.median(v), min(v), max(v))
print("| family | peer seen | setup, us | MB/s |")
print("|---|---|---|---|")
for fam in ("ipv6", "ipv4"):
    r = rows[fam]
    print("| %s | %s | %s | %s |" % (fam, r[0][2].rsplit(":", 1)[0], show([x[0] for x in r]),
                                    show([x[1] for x in r])))
m6 = statistics.median(x[1] for x in rows["ipv6"])
m4 = statistics.median(x[1] for x in rows["ipv4"])
print("IPv6/IPv4 throughput by the medians: %.2f" % (m6 / m4))
EOF
