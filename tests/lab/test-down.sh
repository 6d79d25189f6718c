#!/usr/bin/env bash
# lab-down (fixture cleanup): removes the shared lab and checks nothing is left (no
# namespace, interface, state, delay line, service or other process), that no
# service logged a sanitizer report (logs kept in $TEST_DIR/service-logs), and that
# the host's own firewall rules are as they were before lab-up.
. "$(dirname "$0")/test-lib.sh"
require_lab

ids=$(lab_netns_ids)
pids=$(cat "$LAB_STATE"/run/*.pid 2>/dev/null || true)
logs=$TEST_DIR/service-logs
rm -rf "$logs"
QCG_LAB_KEEP_LOGS=$logs "$LAB" down
# shellcheck disable=SC2086
assert_clean $ids
for pid in $pids; do pid_gone "$pid" || fail "service pid $pid still runs"; done
note "$(echo $pids | wc -w) service processes stopped"
# The services stopped cleanly (a sanitizer build reports leaks and errors at exit).
if grep -lE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$logs"/*.log 2>/dev/null; then
	grep -hE -A5 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$logs"/*.log | head -n 60
	fail "sanitizer reports in the services' logs (kept in $logs)"
fi
if [ -r "$TEST_DIR/host-rules.before" ]; then
	diff "$TEST_DIR/host-rules.before" <(host_rules) || fail "the host's rules changed"
	note "host rules unchanged"
	rm -f "$TEST_DIR/host-rules.before"
fi
"$LAB" down >/dev/null || fail "a second down failed"
