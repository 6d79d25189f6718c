#!/usr/bin/env bash
# lab-up (fixture setup): builds the shared lab, plain (no delay, no rate limit), and
# checks that a second `up` changes nothing.
. "$(dirname "$0")/test-lib.sh"
require_lab

mkdir -p "$TEST_DIR"
host_rules >"$TEST_DIR/host-rules.before"

# What the lab looks like from the inside: addresses, routes, router rules, qdiscs.
fingerprint() {
	local ns
	for ns in $(lab_netns); do
		echo "== $ns"
		ip -n "$ns" -br addr
		ip -n "$ns" route
		ip -n "$ns" -br link | awk '{ print $1, $2 }'
		case $ns in
		qcg-r-* | qcg-inet)
			ip netns exec "$ns" iptables-save | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//'
			ip netns exec "$ns" tc qdisc show ;;
		esac
	done
}

"$LAB" up
[ "$(lab_netns_count)" -eq 23 ] || fail "expected 23 lab namespaces, found $(lab_netns_count)"
"$LAB" status || fail "status says the lab is not complete"
first=$(fingerprint)
"$LAB" up
second=$(fingerprint)
if [ "$first" != "$second" ]; then
	diff <(echo "$first") <(echo "$second") || true
	fail "a second up changed the lab"
fi
note "a second up left the lab as it was"
