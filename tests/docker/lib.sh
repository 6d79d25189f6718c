# shellcheck shell=bash
# tests/docker/lib.sh: what the docker tests share (sourced).  Each test runs
# its own safe dockerd (docker/dockerd.sh) with its state in a scratch
# directory, and checks the host is left as it was found.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${QCG_BUILD_DIR:-$REPO/build}
. "$REPO/docker/dockerd.sh"
# shellcheck disable=SC2034 # the tests use it
TAG=qcg-test

# skip, and fail that ends the test (its steps build on one another):
# tests/lib/common.sh.
# shellcheck source=tests/lib/common.sh
. "$REPO/tests/lib/common.sh"
fail_stops=1
say() { printf '== %s\n' "$*"; }
docker() { "$QCG_DOCKER" "$@"; }
# drun ARGS: docker run -d, quiet (the daemon has no forwarding, on purpose:
# its warning saying so is dropped), failing as docker run does.
drun() {
	local err rc=0
	err=$(docker run -d "$@" 2>&1 >/dev/null) || rc=$?
	[ -z "$err" ] || grep -v 'IPv4 forwarding is disabled' <<<"$err" >&2 || true
	return $rc
}

require_docker() {
	[ "$(id -u)" -eq 0 ] || skip "needs root (dockerd)"
	[ -x "$QCG_DOCKERD" ] && [ -x "$QCG_DOCKER" ] || skip "docker.io not installed (scripts/install-deps)"
	command -v debootstrap >/dev/null || skip "debootstrap not installed (scripts/install-deps)"
	if grep -q '^QCG_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
		skip "sanitizer build: the images are made and tested from the plain build"
	fi
}

# The host's state that no docker test may change: firewall rules, links,
# IPv4 addresses.  host_state > FILE, then host_state | diff FILE -.
# Not part of it: packet counters, and the interception chains of qcg-helpers
# run on the host by other tests (QCG-TRAVERSE-*, in the raw table), which come
# and go on their own; a table or built-in chain left with nothing in it but an
# ACCEPT policy counts as absent.
host_state() {
	echo "# iptables"
	iptables-save 2>/dev/null | sed 's/ *\[[0-9]*:[0-9]*\]//' | awk '
		/^#/ || /QCG-TRAVERSE/ { next }
		/^\*/ { n = 0; keep = 0 }
		{ buf[n++] = $0 }
		/^:[A-Z]+ ACCEPT$/ || /^\*/ { next }
		/^COMMIT$/ { if (keep) for (i = 0; i < n; i++) print buf[i]; next }
		{ keep = 1 }' || true
	echo "# nft"
	nft -s list ruleset 2>/dev/null | awk '
		/^#/ || /^[ \t]*$/ || /jump QCG-TRAVERSE/ { next }
		skip { if ($0 ~ /^\t}$/) skip = 0; next }
		/^\tchain QCG-TRAVERSE/ { skip = 1; next }
		/^table / { t = $0; tn = 0; next }
		/^\t[a-z].*{$/ { c = $0; cn = 0; crules = $0 !~ /^\tchain /; next }
		/^\t[a-z]/ { tl[tn++] = $0; next }
		/^\t\t/ { cl[cn++] = $0; if ($0 !~ /^\t\ttype .* policy accept;$/) crules = 1; next }
		/^\t}$/ { if (crules || cn == 0) { tl[tn++] = c; for (i = 0; i < cn; i++) tl[tn++] = cl[i]; tl[tn++] = $0 } next }
		/^}$/ { if (tn) { print t; for (i = 0; i < tn; i++) print tl[i]; print } next }
		{ print }' || true
	echo "# links"
	ip -o link show | awk '{print $2}'
	echo "# addresses"
	ip -o -4 addr show | awk '{print $2, $4}'
}

# Nothing of docker's on the host: no docker0, no address in 10/8, 172.16/12,
# 192.168/16.
check_host_clean() {
	! ip link show docker0 >/dev/null 2>&1 || fail "docker0 exists"
	if ip -o -4 addr show | awk '{print $4}' | grep -Eq '^(10\.|172\.(1[6-9]|2[0-9]|3[01])\.|192\.168\.)'; then
		ip -o -4 addr show >&2
		fail "an address on a private range the project never uses"
	fi
}

# make_certs DIR NAME...: a throw-away grid CA and certificates (qcg-certs),
# readable by the images' user (uid 770; the helper's: root), keys 0600.  Each NAME is
# "role:name:san,san" (san may be empty).
make_certs() {
	local dir=$1 spec role name san
	shift
	"$REPO/certs/qcg-certs" --dir "$dir" init >/dev/null
	for spec in "$@"; do
		IFS=: read -r role name san <<<"$spec"
		"$REPO/certs/qcg-certs" --dir "$dir" issue "$role" "$name" ${san:+--san "$san"} 2>&1 >/dev/null |
			{ grep -v 'no --san given' >&2 || true; }
	done
	openssl rand -hex 32 >"$dir/proxy.key"
	chmod 0600 "$dir/proxy.key"
	rm -f "$dir/ca.key"
	chown -R 770:770 "$dir"
	# The helper's container runs as root without CAP_DAC_OVERRIDE: its own files.
	chown 0:0 "$dir"/helper-*
	chmod 0755 "$dir"
}

# scratch_begin NAME: $scratch, a scratch directory; the host's state now; a
# trap that, at exit, runs the test's own cleanup_first (if defined), stops
# the test's dockerd, runs cleanup_last (if defined; its failure fails the
# test), checks the host is as it was, and removes $scratch.
scratch_begin() {
	scratch=$(mktemp -d "/tmp/qcg-$1.XXXXXX")
	host_state >"$scratch/host-before"
	trap scratch_end EXIT
	trap 'exit 130' INT TERM
}
scratch_end() {
	local rc=$?
	[ $rc -eq 0 ] || dump_containers
	! declare -F cleanup_first >/dev/null || cleanup_first || true
	qcg_dockerd_stop "$scratch/dockerd"
	! declare -F cleanup_last >/dev/null || cleanup_last || rc=1
	if ! host_state | diff "$scratch/host-before" - >&2; then
		echo "FAIL: the host's rules, links or addresses changed" >&2
		rc=1
	fi
	rm -rf "$scratch"
	exit $rc
}

# dump_containers: on failure, every container's state and last log lines.
dump_containers() {
	local c
	for c in $(timeout 10 "$QCG_DOCKER" ps -a --format '{{.Names}}' 2>/dev/null || true); do
		echo "--- $c: $("$QCG_DOCKER" inspect -f '{{.State.Status}} exit {{.State.ExitCode}}' "$c" 2>/dev/null)" >&2
		timeout 10 "$QCG_DOCKER" logs --tail 15 "$c" 2>&1 | sed 's/^/    /' >&2 || true
	done
}

# wait_healthy CONTAINER [SECONDS]: the image's own HEALTHCHECK says healthy.
wait_healthy() {
	local c=$1 max=${2:-30} i st
	for ((i = 0; i < max * 5; i++)); do
		st=$(docker inspect -f '{{.State.Health.Status}}' "$c" 2>/dev/null || echo gone)
		case $st in
		healthy) return 0 ;;
		gone) break ;;
		esac
		sleep 0.2
	done
	echo "--- $c: health $st; its log:" >&2
	docker logs --tail 30 "$c" >&2 2>&1 || true
	docker inspect -f '{{range .State.Health.Log}}{{.ExitCode}} {{.Output}}{{end}}' "$c" >&2 2>/dev/null || true
	fail "$c not healthy within $max s"
}

# loopback_configs DIR: the four daemons' configs for a grid on one loopback
# (every certificate, from make_certs or qcg-certs, in /etc/qcg and naming
# 127.0.0.1): qcg-broker.conf, qcg-proxy.conf, qcg-frontend.conf (site1, open),
# qcg-helper.conf (site1/node1).  The broker's says "syslog = yes": a
# --syslog=no flag must win over it.
loopback_configs() {
	local dir=$1
	mkdir -p "$dir"
	cat >"$dir/qcg-broker.conf" <<-CONF
		listen = 127.0.0.1
		ca = /etc/qcg/ca.crt
		cert = /etc/qcg/broker-broker.pem
		proxy = p1@127.0.0.1:7703
		proxy-key = /etc/qcg/proxy.key
		syslog = yes
	CONF
	cat >"$dir/qcg-proxy.conf" <<-CONF
		listen = 127.0.0.1
		ca = /etc/qcg/ca.crt
		cert = /etc/qcg/proxy-p1.pem
		key-file = /etc/qcg/proxy.key
		broker = https://127.0.0.1:7700/
	CONF
	cat >"$dir/qcg-frontend.conf" <<-CONF
		listen = 127.0.0.1
		ca = /etc/qcg/ca.crt
		cert = /etc/qcg/frontend-site1.pem
		broker = https://127.0.0.1:7700/
		kind = open
	CONF
	cat >"$dir/qcg-helper.conf" <<-CONF
		frontend = https://127.0.0.1:7701/
		ca = /etc/qcg/ca.crt
		cert = /etc/qcg/helper-site1-node1.pem
		address = 127.0.0.1
		ports = 61000-61099
	CONF
}
