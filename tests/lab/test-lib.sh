# shellcheck shell=bash disable=SC2034 # LAB, LAB_STATE, TEST_DIR: for the tests sourcing this.
# Shared by the lab tests (sourced).  A lab test exits 77, after saying why, when it
# cannot run here: ctest reports it as skipped (SKIP_RETURN_CODE 77).
set -euo pipefail

LAB_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB=$LAB_SRC/qcg-lab
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$LAB_SRC/../../build}
LAB_STATE=${QCG_LAB_DIR:-/run/qcg-lab}
# Where tests keep what they need from one another (the host's rules before up).
TEST_DIR=${QCG_LAB_TEST_DIR:-$QCG_BUILD_DIR/tests/lab}

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
note() { echo "-- $*"; }

require_lab() {
	[ "$(id -u)" -eq 0 ] || skip "lab tests need root (network namespaces, iptables)"
	command -v ip >/dev/null 2>&1 || skip "ip (iproute2) is not installed"
	ip netns list >/dev/null 2>&1 || skip "ip netns is unavailable here"
	local t
	for t in iptables-restore tc ping ss timeout flock; do
		command -v "$t" >/dev/null 2>&1 || skip "$t is not installed (scripts/install-deps)"
	done
}

require_delayline() {
	[ -x "$QCG_BUILD_DIR/qcg-delayline" ] ||
		skip "qcg-delayline is not built in $QCG_BUILD_DIR (libnetfilter_queue missing?)"
}

# poll SECONDS WHAT CMD...: waits for CMD to succeed, bounded.
poll() {
	local secs=$1 what=$2 i
	shift 2
	for ((i = 0; i < secs * 20; i++)); do
		"$@" && return 0
		sleep 0.05
	done
	echo "timed out after ${secs}s waiting for $what" >&2
	return 1
}

lab_netns() { ip netns list 2>/dev/null | awk '$1 ~ /^qcg-/ { print $1 }' | sort; }
lab_netns_count() { lab_netns | wc -l; }

# The kernel ids of the lab's namespaces, to find processes that outlive them.
lab_netns_ids() {
	local ns
	for ns in $(lab_netns); do stat -L -c %i "/run/netns/$ns" 2>/dev/null || true; done
}

# Live (not zombie) qcg-delayline processes.
live_delaylines() { ps -C qcg-delayline -o pid=,stat= 2>/dev/null | awk '$2 !~ /^Z/ { print $1 }'; }
no_live_delaylines() { [ -z "$(live_delaylines)" ]; }

# Processes (not zombies) inside any of the given namespace ids.
processes_in_netns() {
	local ids=" $* " p id state
	for p in /proc/[0-9]*; do
		id=$(readlink "$p/ns/net" 2>/dev/null) || continue
		id=${id#net:[}; id=${id%]}
		case $ids in *" $id "*) ;; *) continue ;; esac
		state=$(awk '{ print $3 }' "$p/stat" 2>/dev/null) || continue
		[ "$state" = Z ] && continue
		echo "${p#/proc/} $(cat "$p/comm" 2>/dev/null)"
	done
}

# Asserts that nothing of the lab is left: namespace, host interface, state,
# delay line, or a process still inside a lab namespace (given their ids).
assert_clean() {
	local left
	left=$(lab_netns)
	[ -z "$left" ] || fail "namespaces left: ${left//$'\n'/ }"
	left=$(ip -br link | awk '$1 ~ /^qcg-/ { print $1 }')
	[ -z "$left" ] || fail "interfaces left in the host namespace: ${left//$'\n'/ }"
	[ ! -e "$LAB_STATE" ] || fail "state dir $LAB_STATE left"
	poll 10 "delay lines to exit" no_live_delaylines || fail "delay lines left: $(live_delaylines)"
	if [ $# -gt 0 ]; then
		left=$(processes_in_netns "$@")
		[ -z "$left" ] || fail "processes left in lab namespaces: $left"
	fi
	note "clean: no qcg- namespace, host interface, state dir, delay line or process left"
}

host_rules() {
	nft -s list ruleset 2>/dev/null || true
	iptables -S 2>/dev/null || true
}
