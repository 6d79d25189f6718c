#!/usr/bin/env bash
#
# frontend-sites: a site's addresses and its nodes' lives, end to end:
#
#   soap-call --(helper nata/nata1, nata/nata2)--> qcg-frontend :17832 --> qcg-broker :17831
#
#   nata: nat, public 203.0.113.10, addresses 198.18.1.0/24, node-lease 30 s
#
# 1. A node outside the declared addresses is refused by the broker, the
#    refusal relayed to the helper.
# 2. A helper that restarts (registers with a new incarnation) loses its old
#    processes' contacts at the frontend and the broker: a lookup for them
#    answers notfound instead of ordering anything to a dead process; the
#    same incarnation again (a frontend or broker restart) keeps them.
# 3. A node whose helper stops polling loses its contacts within node-lease
#    plus a third of it, while a node that polls keeps them; the job id is
#    free again once its last contact is gone.

. "$(dirname -- "$0")/lib.sh"

make_certs "frontend nata" "helper nata/nata1" "helper nata/nata2"
start_broker 17831
start_frontend nata 17832 --kind nat --public-address 203.0.113.10 --addresses 198.18.1.0/24 \
	--node-lease 30
H1=helper-nata-nata1 H2=helper-nata-nata2
A=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa B=bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb

# broker_contacts: the broker's count of contacts.
broker_contacts() { counter "$broker_url" contacts; }

# --- 1: addresses
call $H2 registerNode name=nata2 address=198.51.100.5 portLow=5000 portHigh=5099 canIntercept=0 incarnation="$B"
expect_fault denied "a node outside the site's addresses is refused by the broker" \
	"outside the node ranges cluster nata declared"

# --- 2: incarnations
call $H1 registerNode name=nata1 address=198.18.1.1 portLow=5000 portHigh=5099 canIntercept=0 incarnation="$A"
expect_ok "nata1 registers (incarnation A)"
epoch=$(field epoch)
call $H2 registerNode name=nata2 address=198.18.1.2 portLow=6000 portHigh=6099 canIntercept=0 incarnation="$B"
expect_ok "nata2 registers"
call $H1 publish job=job1 secret=s3cret rank=0 address=198.18.1.1 port=5001
expect_ok "nata1 publishes job1 rank 0"
call $H1 publish job=job9 secret=other rank=0 address=198.18.1.1 port=5002
expect_ok "nata1 publishes job9 rank 0"
call $H2 publish job=job1 secret=s3cret rank=2 address=198.18.1.2 port=6001
expect_ok "nata2 publishes job1 rank 2"
[[ $(broker_contacts) -eq 3 ]] && pass "the broker holds 3 contacts" || fail "broker contacts: $(broker_contacts)"

call $H1 registerNode name=nata1 address=198.18.1.1 portLow=5000 portHigh=5099 canIntercept=0 incarnation="$A"
expect_ok "nata1 registers again with the same incarnation"
# Past the cache, and ordering nothing: every technique tried but the proxy,
# which this broker lacks.
call $H2 lookup job=job1 secret=s3cret fromRank=2 toRank=0 tried=direct,reversed
[[ $rc -eq 0 && $(field plan.status) == unavailable ]] &&
	pass "rank 0 is still published after the same incarnation (unavailable, not notfound)" ||
	fail "rank 0 after the same incarnation"
[[ $(broker_contacts) -eq 3 ]] && pass "the broker still holds 3 contacts" || fail "broker contacts: $(broker_contacts)"

call $H1 registerNode name=nata1 address=198.18.1.1 portLow=5000 portHigh=5099 canIntercept=0 incarnation="$B"
expect_ok "nata1 registers with a new incarnation (its helper restarted)"
[[ $(broker_contacts) -eq 1 ]] && pass "the broker dropped nata1's 2 contacts at once" ||
	fail "broker contacts after the restart: $(broker_contacts)"
found=no
for _ in $(seq 50); do
	call $H2 lookup job=job1 secret=s3cret fromRank=2 toRank=0
	[[ $rc -eq 0 && $(field plan.status) == notfound ]] && { found=yes; break; }
	sleep 0.1
done
[[ $found == yes ]] && pass "a lookup for the dead rank 0 answers notfound (cache invalidated too)" ||
	fail "lookup of the dead rank 0: $out"
[[ $(counter "$frontend_url" contacts_dropped) -eq 2 && $(counter "$broker_url" contacts_dropped) -eq 2 ]] &&
	pass "contacts_dropped: 2 at the frontend and at the broker" ||
	fail "contacts_dropped: frontend $(counter "$frontend_url" contacts_dropped), broker $(counter "$broker_url" contacts_dropped)"
call $H1 publish job=job9 secret=new-secret rank=0 address=198.18.1.1 port=5002
expect_ok "job9's id is free again: a new secret is accepted"

# --- 3: leases.  nata1 polls (present), nata2 does not.
call $H2 publish job=job1 secret=s3cret rank=3 address=198.18.1.2 port=6002
expect_ok "nata2 publishes job1 rank 3"
t0=$(now_ms)
gone=no
while (($(now_ms) - t0 < 50000)); do
	call $H1 poll epoch="$epoch" ackSeq=0 waitSeconds=1
	[[ $rc -eq 0 ]] || fail "nata1's poll: $out"
	call $H1 lookup job=job9 secret=new-secret fromRank=0 toRank=0
	[[ $(field plan.status) == ok ]] || fail "nata1's own contact went while it polled: $out"
	if [[ $(broker_contacts) -eq 1 ]]; then gone=yes; break; fi
	sleep 1
done
secs=$((($(now_ms) - t0) / 1000))
[[ $gone == yes && $secs -ge 25 ]] &&
	pass "nata2's 2 contacts withdrawn after ${secs} s without a poll (node-lease 30, bound 40)" ||
	fail "nata2's contacts after ${secs} s: broker holds $(broker_contacts)"
[[ $(counter "$frontend_url" contacts_expired) -eq 2 ]] && pass "contacts_expired: 2" ||
	fail "contacts_expired: $(counter "$frontend_url" contacts_expired)"
call $H2 poll epoch="$epoch" ackSeq=0 waitSeconds=0
expect_fault unregistered "nata2's helper polling again is told to register" "has not registered"
call $H2 registerNode name=nata2 address=198.18.1.2 portLow=6000 portHigh=6099 canIntercept=0 incarnation="$B"
expect_ok "nata2 registers again"
call $H2 publish job=job1 secret=s3cret rank=2 address=198.18.1.2 port=6001
expect_ok "and re-publishes"
[[ $(broker_contacts) -eq 2 ]] && pass "the broker holds its contact again" || fail "broker contacts: $(broker_contacts)"

finish
