#!/usr/bin/env bash
#
# frontend-quotas: per-node rates at the frontend (node-lookups,
# node-reports, node-probes), with small values:
#
#   soap-call --(helper nata/nata1, nata/nata2)--> qcg-frontend :17872 --> qcg-broker :17871
#
# A node's lookups beyond the burst wait for their turn (a sequential storm
# all passes, slower); a parallel one beyond a second's worth is refused
# (qcg:retry, naming the option) while another node is served at once; reports
# and siteInfo beyond theirs are refused; each refusal counted in --stats and
# logged at most once in 10 s.  A loaded machine (sanitizers, ctest -j)
# makes each call slower, so the bucket refills meanwhile: the bounds below
# are the bucket's own (burst + rate x elapsed), not counts from a fast run.

. "$(dirname -- "$0")/lib.sh"

test_t0=$(now_ms)
# secs_since T0: whole seconds elapsed since T0 (ms), rounded up.
secs_since() { echo $((($(now_ms) - $1 + 999) / 1000)); }

make_certs "frontend nata" "helper nata/nata1" "helper nata/nata2"
start_broker 17871
start_frontend nata 17872 --kind nat --public-address 203.0.113.10 --addresses 198.18.1.0/24 --node-lookups 1 \
	--node-reports 1 --node-probes 3

for n in 1 2; do
	call helper-nata-nata$n registerNode name=nata$n address=198.18.1.$n portLow=5000 portHigh=5099
	expect_ok "registerNode nata$n"
	call helper-nata-nata$n publish job=job1 secret=s3cret rank=$n address=198.18.1.$n port=500$n
	expect_ok "publish job1 rank $n from nata$n"
done

# 10 lookups one after the other: the burst (10) passes at once ...
ok=0
for ((i = 0; i < 10; i++)); do
	call helper-nata-nata1 lookup job=job1 secret=s3cret fromRank=1 toRank=2 tried=direct
	[[ $rc -eq 0 ]] && ok=$((ok + 1))
done
[[ $ok -eq 10 ]] && pass "10 lookups in a row within the burst: all answered" ||
	fail "10 lookups in a row within the burst: $ok answered"
# ... and 3 more wait for their turn (1 a second) rather than fail.
t0=$(now_ms) ok=0
for ((i = 0; i < 3; i++)); do
	call helper-nata-nata1 lookup job=job1 secret=s3cret fromRank=1 toRank=2 tried=direct
	[[ $rc -eq 0 ]] && ok=$((ok + 1))
done
waited=$(counter "$frontend_url" quota_waited)
[[ $ok -eq 3 && $waited -ge 1 ]] &&
	pass "3 more in a row: all answered, $waited waited for their turn ($(($(now_ms) - t0)) ms)" ||
	fail "3 more in a row: $ok answered, quota_waited $waited"

# 16 at once: a second's worth waits, the rest are refused.
par=() par_t0=$(now_ms)
for ((i = 0; i < 16; i++)); do
	"$QCG_SOAP_CALL" --url "$frontend_url" --ca "$ca" --cert "$certs/helper-nata-nata1.pem" \
		lookup job=job1 secret=s3cret fromRank=1 toRank=2 tried=direct >"$work/par$i.out" 2>&1 &
	par+=($!)
done
t0=$(now_ms)
call helper-nata-nata2 lookup job=job1 secret=s3cret fromRank=2 toRank=1 tried=direct
other_ms=$(($(now_ms) - t0))
wait "${par[@]}" || true
par_s=$(secs_since "$par_t0")
busy=$(grep -l "fault retry: node nata1 is over its rate of lookup calls (node-lookups)" \
	"$work"/par*.out | wc -l)
# At most what the bucket refilled meanwhile, plus a second's worth waiting.
most=$((par_s + 2))
[[ $busy -ge 1 && $((16 - busy)) -le $most ]] &&
	pass "16 lookups of nata1 at once: $busy refused (retry), naming node-lookups (in ${par_s} s)" ||
	fail "16 lookups of nata1 at once: $busy refused in ${par_s} s (at most $most may pass)"
par_busy=$busy
[[ $rc -eq 0 && $other_ms -lt 5000 ]] &&
	pass "nata2's lookup meanwhile answered, not refused ($other_ms ms)" ||
	fail "nata2's lookup meanwhile: rc $rc, $other_ms ms"

# Reports: a burst of 10, then 1 a second; the rest refused (the broker
# never sees them).
busy=0 rep_t0=$(now_ms)
for ((i = 0; i < 20; i++)); do
	call helper-nata-nata1 report job=job1 secret=s3cret fromRank=1 toRank=2 technique=direct ok=0 setupMs=5 why=test
	[[ $out == "fault retry:"*node-reports* ]] && busy=$((busy + 1))
done
rep_s=$(secs_since "$rep_t0")
most=$((10 + rep_s))
if ((most < 20)); then
	[[ $busy -ge 1 && $((20 - busy)) -le $most ]] &&
		pass "20 reports in a row: $busy refused, naming node-reports (in ${rep_s} s)" ||
		fail "20 reports in a row: $busy refused in ${rep_s} s (at most $most may pass)"
else
	[[ $busy -le 10 ]] && pass "20 reports in ${rep_s} s (too slow to reach the rate): $busy refused" ||
		fail "20 reports in ${rep_s} s: $busy refused, more than the burst leaves"
fi
rep_busy=$busy

# siteInfo: 3 a minute.
for ((i = 0; i < 3; i++)); do call helper-nata-nata1 siteInfo; done
expect_ok "siteInfo 3 times"
call helper-nata-nata1 siteInfo
expect_fault retry "the fourth siteInfo within a minute is refused" "node-probes"

# Lookups for a job the caller is no member of (a wrong secret: another
# user of the node) are denied before the node's rate is charged, so the
# node's other users never wait for them (issue 32: 15 denied lookups used
# to spend the burst, and the next ones waited).
waited0=$(counter "$frontend_url" quota_waited) denied=0
for ((i = 0; i < 15; i++)); do
	call helper-nata-nata2 lookup job=job1 secret=wrong fromRank=2 toRank=1 tried=direct
	[[ $out == "fault denied:"* ]] && denied=$((denied + 1))
done
call helper-nata-nata2 lookup job=job1 secret=s3cret fromRank=2 toRank=1 tried=direct
waited=$(counter "$frontend_url" quota_waited)
[[ $denied -eq 15 && $rc -eq 0 && $waited -eq $waited0 ]] &&
	pass "15 lookups of a non-member denied without charging nata2's rate; its own answered at once" ||
	fail "non-member lookups: $denied of 15 denied, own lookup rc $rc, quota_waited $waited0 -> $waited"

refused=$(counter "$frontend_url" quota_refused)
# Every refusal seen above (the fourth siteInfo is one) is counted.
least=$((par_busy + rep_busy + 1))
[[ $refused -ge $least ]] && pass "--stats quota_refused $refused" ||
	fail "--stats quota_refused $refused, $least refusals seen"
lines=$(grep -c "refused: over the node's rate" "$work/frontend-nata.log" || true)
most=$(($(secs_since "$test_t0") / 10 + 1))
[[ $lines -ge 1 && $lines -le $most ]] && pass "$lines log lines for $refused refusals" ||
	fail "$lines log lines for $refused refusals (at most one per 10 s: $most)"
finish
