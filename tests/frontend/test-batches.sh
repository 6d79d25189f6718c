#!/usr/bin/env bash
#
# frontend-batches: what the frontend's helpers wait for goes to the broker in
# batches (issue 29).  A real qcg-broker and a qcg-frontend for cluster nata on
# 127.0.0.1 (ports 17881-17882); the broker is stopped (SIGSTOP) while ten
# retries (lookups naming a technique tried) and then ten failure reports
# reach the frontend, so that they wait together; once it runs again:
#
#   - every retry got its plan, and the broker planned ten lookups in at
#     most three calls (two on the way when it stopped, then the rest in one),
#     where each was a call of its own before;
#   - every failure report was answered only once the broker had recorded it
#     (the process's next lookup is planned knowing it), the ten in at most
#     three calls to the broker.

. "$(dirname -- "$0")/lib.sh"

make_certs "frontend nata" "helper nata/nata1"
start_broker 17881
start_frontend nata 17882 --kind nat --public-address 203.0.113.10 --addresses 198.18.1.0/24

H=helper-nata-nata1
N=10

call $H registerNode name=nata1 address=198.18.1.1 portLow=5000 portHigh=5099
expect_ok "registerNode nata1"
call $H publish job=job1 secret=s3cret rank=0 address=198.18.1.1 port=5001
expect_ok "publish job1 rank 0"
call $H publish job=job1 secret=s3cret rank=1 address=198.18.1.1 port=5002
expect_ok "publish job1 rank 1"
# A first lookup: the broker issued a direct plan, which the reports answer.
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=1
[[ $rc -eq 0 && $(field plan.technique) == direct ]] &&
	pass "lookup job1 0 -> 1: direct" || fail "lookup job1 0 -> 1: direct"

# stopped_calls COUNTER OPERATION FIELDS...: $N calls made at once while the
# broker is stopped, let go once the frontend's COUNTER says all arrived;
# each call's answer in $work/call.I.
stopped_calls() {
	local counter_name=$1 before i pids=()
	shift
	before=$(counter "$frontend_url" "$counter_name")
	kill -STOP "$broker_pid"
	for ((i = 0; i < N; i++)); do
		(
			call $H "$@"
			printf '%s\n%s\n' "rc=$rc" "$out" >"$work/call.$i"
		) &
		pids+=($!)
	done
	for ((i = 0; i < 100; i++)); do
		[[ $(counter "$frontend_url" "$counter_name") -ge $((before + N)) ]] && break
		sleep 0.1
	done
	[[ $(counter "$frontend_url" "$counter_name") -ge $((before + N)) ]] ||
		fail "the frontend received the $N calls ($counter_name)"
	kill -CONT "$broker_pid"
	wait "${pids[@]}"
}

# --- retries: ten lookups after a failed technique
calls=$(counter "$broker_url" lookup_calls)
lookups=$(counter "$broker_url" lookups)
stopped_calls lookups_received lookup job=job1 secret=s3cret fromRank=0 toRank=1 tried=reversed
planned=0
for ((i = 0; i < N; i++)); do
	grep -qx "rc=0" "$work/call.$i" && grep -qx "plan.status=ok" "$work/call.$i" &&
		planned=$((planned + 1))
done
[[ $planned -eq $N ]] && pass "each of the $N retries got its plan" ||
	fail "each of the $N retries got its plan ($planned did)"
calls=$(($(counter "$broker_url" lookup_calls) - calls))
lookups=$(($(counter "$broker_url" lookups) - lookups))
[[ $lookups -eq $N && $calls -le 3 ]] &&
	pass "the broker planned $N retries in $calls calls" ||
	fail "the broker planned $lookups retries in $calls calls (wanted $N in at most 3)"

# --- failure reports
recorded=$(counter "$broker_url" reports_failed)
stopped_calls reports_received report job=job1 secret=s3cret fromRank=0 toRank=1 \
	technique=direct ok=0 setupMs=7 why=refused
answered=0
for ((i = 0; i < N; i++)); do
	grep -qx "rc=0" "$work/call.$i" && answered=$((answered + 1))
done
# Read right after the answers: recorded before them, not later.
recorded=$(($(counter "$broker_url" reports_failed) - recorded))
[[ $answered -eq $N && $recorded -eq $N ]] &&
	pass "each of the $N failure reports was answered once the broker had recorded it" ||
	fail "$answered of $N failure reports answered, $recorded recorded by then"
calls=$(counter "$frontend_url" broker_failure_calls)
[[ -n $calls && $calls -le 3 ]] &&
	pass "the $N failure reports went to the broker in $calls calls" ||
	fail "the $N failure reports went to the broker in '$calls' calls (wanted at most 3)"

finish
