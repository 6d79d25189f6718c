#!/usr/bin/env bash
# lab-no-services: `up --no-services` turns the shared lab into the network alone
# (services stopped, nothing left of them running) and verify still passes; a plain
# `up` then brings every service back, connected.
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services

restore() { "$LAB" up >/dev/null || echo "could not restore the lab's services" >&2; }
trap restore EXIT

"$LAB" up --no-services
# shellcheck disable=SC2046
left=$(processes_in_netns $(lab_netns_ids) | grep -E ' qcg-(broker|frontend|helper)$' || true)
[ -z "$left" ] || fail "services still run in the lab after up --no-services: ${left//$'\n'/, }"
out=$("$LAB" status) || { echo "$out"; fail "status: the network-only lab is not complete"; }
echo "$out" | grep -q "^services: none (up --no-services)" || fail "status does not say there are no services"
out=$("$LAB" verify) || { echo "$out"; fail "verify failed without services"; }
echo "$out" | grep -q "^PASS  services   none running" || { echo "$out"; fail "verify did not check the services"; }
note "network only: no service runs, verify passes ($(echo "$out" | tail -n 1))"

trap - EXIT
"$LAB" up
out=$("$LAB" status) || { echo "$out"; fail "status: services not back"; }
[ "$(echo "$out" | grep -Ec '^(frontend|helper)-[a-z0-9]+ +[a-z0-9-]+ +[0-9]+ +yes ')" -eq 15 ] ||
	{ echo "$out"; fail "not every frontend and helper is back and connected"; }
note "up brought the 16 services back"
