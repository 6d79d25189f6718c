#!/usr/bin/env bash
#
# frontend-reconnect: the broker goes away and comes back on the same port.
#
#   soap-call --(helper nata/nata1)--> qcg-frontend :17812 --> qcg-broker :17811
#                                                                  (stopped, restarted)
#
# While the broker is down, helper calls that need it get qcg:unavailable at
# once and cached plans still answer; once it is back, the frontend registers
# its cluster, node and contacts again by itself and lookups work again.

. "$(dirname -- "$0")/lib.sh"

make_certs "frontend nata" "helper nata/nata1"
start_broker 17811
start_frontend nata 17812 --kind firewalled --open-ports 5000-5010 --addresses 198.18.1.0/24
H=helper-nata-nata1

call $H registerNode name=nata1 address=198.18.1.1 portLow=5000 portHigh=5099
expect_ok "registerNode nata1"
for r in 0 1 2; do
	call $H publish job=job1 secret=s3cret rank=$r address=198.18.1.1 port=$((5001 + r))
	expect_ok "publish job1 rank $r"
done
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=1
[[ $rc -eq 0 && $(field plan.status) == ok ]] && pass "lookup 0 -> 1 (now cached)" ||
	fail "lookup 0 -> 1 (now cached)"
contacts=$(counter "$broker_url" contacts)
[[ $contacts -eq 3 ]] && pass "the broker holds 3 contacts" || fail "the broker holds 3 contacts ($contacts)"

# --- the broker stops
kill -TERM "$broker_pid"
wait_gone "$broker_pid" 200 || die "the broker did not stop"
wait "$broker_pid" || true
broker_pid=
wait_log "$work/frontend-nata.log" "lost the broker" || die "the frontend did not notice"
[[ $(counter "$frontend_url" upstream_connected) -eq 0 ]] &&
	pass "upstream_connected is 0 while the broker is down" ||
	fail "upstream_connected is 0 while the broker is down"

t0=$(now_ms)
call $H publish job=job1 secret=s3cret rank=3 address=198.18.1.1 port=5004
ms=$(($(now_ms) - t0))
expect_fault unavailable "publish while the broker is down: qcg:unavailable" "broker unreachable"
[[ $ms -lt 2000 ]] && pass "... answered in $ms ms" || fail "... answered in $ms ms (> 2 s)"
t0=$(now_ms)
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=2
ms=$(($(now_ms) - t0))
expect_fault unavailable "lookup not in the cache while the broker is down: qcg:unavailable"
[[ $ms -lt 2000 ]] && pass "... answered in $ms ms" || fail "... answered in $ms ms (> 2 s)"
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=1
[[ $rc -eq 0 && $(field plan.status) == ok && $(field plan.port) == 5002 ]] &&
	pass "a cached plan still answers while the broker is down" ||
	fail "a cached plan still answers while the broker is down"
call $H registerNode name=nata1 address=198.18.1.1 portLow=5000 portHigh=5099
expect_ok "registerNode while the broker is down is kept for later"

# --- the broker comes back, empty: the frontend registers everything again
start_broker 17811 broker2
for ((i = 0; i < 300; i++)); do
	contacts=$(counter "$broker_url" contacts 2>/dev/null)
	[[ $contacts -eq 3 ]] && break
	sleep 0.1
done
[[ $contacts -eq 3 ]] && pass "the restarted broker holds the 3 contacts again" ||
	die "the restarted broker holds the 3 contacts again ($contacts)"
[[ $(counter "$broker_url" nodes) -eq 1 ]] && pass "... and node nata1" || fail "... and node nata1"
entries=$(counter "$frontend_url" cache_entries)
[[ $entries -eq 0 ]] && pass "the broker's restart emptied the plan cache (invalidations were lost)" ||
	fail "the broker's restart emptied the plan cache ($entries entries left)"
wait_log "$work/frontend-nata.log" "registered cluster nata" "" 2 || fail "second registration logged"
[[ $(counter "$frontend_url" upstream_connected) -eq 1 &&
	$(counter "$frontend_url" upstream_registrations) -eq 2 ]] &&
	pass "upstream_connected 1 after 2 registrations" ||
	fail "upstream_connected 1 after 2 registrations"

call $H lookup job=job1 secret=s3cret fromRank=0 toRank=2
[[ $rc -eq 0 && $(field plan.status) == ok && $(field plan.port) == 5003 ]] &&
	pass "lookups reach the broker again" || fail "lookups reach the broker again"
call $H publish job=job1 secret=s3cret rank=3 address=198.18.1.1 port=5004
expect_ok "publish works again"
if stop_frontend "$frontend_pid" "$work/frontend-nata.log"; then
	pass "SIGTERM: clean stop in $stop_ms ms"
else
	fail "SIGTERM: no clean stop within 15 s"
fi

finish
