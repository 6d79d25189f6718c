#!/usr/bin/env bash
# lab-down (fixture cleanup): removes the shared lab and checks nothing is left, and
# that the host's own firewall rules are as they were before lab-up.
. "$(dirname "$0")/test-lib.sh"
require_lab

ids=$(lab_netns_ids)
"$LAB" down
# shellcheck disable=SC2086
assert_clean $ids
if [ -r "$TEST_DIR/host-rules.before" ]; then
	diff "$TEST_DIR/host-rules.before" <(host_rules) || fail "the host's rules changed"
	note "host rules unchanged"
	rm -f "$TEST_DIR/host-rules.before"
fi
"$LAB" down >/dev/null || fail "a second down failed"
