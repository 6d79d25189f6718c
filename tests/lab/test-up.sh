#!/usr/bin/env bash
# lab-up (fixture setup): builds the shared lab, plain (no delay, no rate limit), with
# its services (broker, 5 frontends, 10 helpers, all connected), and checks that a
# second `up` changes nothing and restarts no service.  First: without the services'
# binaries, up fails and makes nothing.
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

# Without the services' binaries, up refuses before making anything.
empty=$(mktemp -d)
rc=0
out=$(QCG_BUILD_DIR=$empty "$LAB" up 2>&1) || rc=$?
rmdir "$empty"
[ "$rc" -ne 0 ] && echo "$out" | grep -q "build first" ||
	fail "up without binaries: exit $rc, '$out' (expected a failure saying to build first)"
[ "$(lab_netns_count)" -eq 0 ] || fail "up without binaries made namespaces"
note "without binaries: $out"

# Every service runs and is connected upstream, as status shows it.
services_up() {
	local out name
	out=$("$LAB" status) || { echo "$out"; fail "status says the lab is not complete"; }
	echo "$out" | sed -n '/^service /,$p'
	for name in broker frontend-open frontend-fw frontend-nata frontend-natb frontend-sym \
		helper-open1 helper-open2 helper-fw1 helper-fw2 helper-nata1 helper-nata2 \
		helper-natb1 helper-natb2 helper-sym1 helper-sym2; do
		grep -Eq "^$name +[a-z0-9-]+ +[0-9]+ +(yes|n/a) " <<<"$out" ||
			fail "$name is not running and connected"
	done
}
service_pids() { grep -H . "$LAB_STATE"/run/*.pid; }

"$LAB" up
[ "$(lab_netns_count)" -eq 23 ] || fail "expected 23 lab namespaces, found $(lab_netns_count)"
services_up
[ "$(stat -c %a "$LAB_STATE/job-secret")" = 600 ] || fail "job-secret is not 0600"
for f in broker frontend-nata helper-nata1; do
	[ -s "$LAB_STATE/etc/$f.conf" ] && [ -s "$LAB_STATE/log/$f.log" ] || fail "no config or log for $f"
done
first=$(fingerprint)
pids=$(service_pids)
"$LAB" up
second=$(fingerprint)
if [ "$first" != "$second" ]; then
	diff <(echo "$first") <(echo "$second") || true
	fail "a second up changed the lab"
fi
[ "$pids" = "$(service_pids)" ] || fail "a second up restarted services"
services_up
note "a second up left the lab and its 16 services as they were"

# A dead service is started again by the next up, and only that one.
dead=$(cat "$LAB_STATE/run/helper-sym2.pid")
kill -KILL "$dead"
poll 5 "helper-sym2 to die" pid_gone "$dead" || fail "helper-sym2 survived SIGKILL"
"$LAB" up >/dev/null
[ "$(service_pids | grep -v helper-sym2)" = "$(echo "$pids" | grep -v helper-sym2)" ] ||
	fail "up restarted more than the dead helper"
[ "$(cat "$LAB_STATE/run/helper-sym2.pid")" != "$dead" ] || fail "up did not restart helper-sym2"
services_up >/dev/null
note "up restarted the killed helper-sym2 alone"
