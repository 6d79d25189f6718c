#!/usr/bin/env bash
# lab-down-after-killed-up: `down` cleans up after an `up` killed half-way:
#  1. up killed with SIGKILL (with whatever it was running) once the first
#     namespaces exist;
#  2. up killed with its process group once the services start: broker, frontends
#     and the first helpers run on, orphaned, and down must stop them too;
#  3. up --delay killed with SIGKILL once a delay line runs: the delay lines live on,
#     orphaned, and down must stop them too.
# Runs before the shared lab is built (lab-up DEPENDS on it): it starts from nothing.
. "$(dirname "$0")/test-lib.sh"
require_lab

"$LAB" down >/dev/null
set -m   # every background job its own process group

round() {
	local what=$1 ready=$2 group=$3 log pid ids
	shift 3
	log=$(mktemp)
	"$LAB" up "$@" >"$log" 2>&1 &
	pid=$!
	if ! poll 30 "$what" "$ready"; then
		cat "$log"
		kill -KILL -- "-$pid" 2>/dev/null || true
		fail "up never reached: $what"
	fi
	if [ "$group" = group ]; then
		kill -KILL -- "-$pid" 2>/dev/null || true
	else
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
	note "killed up ($group) with $(lab_netns_count) namespaces made, $(live_delaylines | wc -l) delay lines running"
	rm -f "$log"
	ids=$(lab_netns_ids)
	"$LAB" down
	# shellcheck disable=SC2086
	assert_clean $ids
}

some_namespaces() { [ "$(lab_netns_count)" -ge 3 ]; }
a_delayline() { [ -n "$(ls "$LAB_STATE"/delayline-*.pid 2>/dev/null)" ] && [ -n "$(live_delaylines)" ]; }
# A helper started: broker and frontends run (in sessions of their own: killing up's
# process group leaves them running).
a_helper() { [ -n "$(ls "$LAB_STATE"/run/helper-*.pid 2>/dev/null)" ]; }

round "the first namespaces" some_namespaces group
round "the services starting" a_helper group
if [ -x "$QCG_BUILD_DIR/qcg-delayline" ]; then
	round "a running delay line" a_delayline process --delay 5
else
	note "qcg-delayline not built: the delay line round is left out"
fi
