#!/usr/bin/env bash
#
# frontend-probe: qcg-probe's operations through a frontend, called by helpers
# with their certificates:
#
#   soap-call --(helper nata/nata1)--> qcg-frontend nata :17822 --> qcg-broker :17821
#   soap-call --(helper fw/fw1)------> qcg-frontend fw   :17823 ----^
#                                          (proxy p1 127.0.0.1:17828, reflector 127.0.0.1:17829)
#
# siteInfo (the reflector, the proxy, every cluster, the broker's URL), probe
# (the probe-listen order reaches fw1's helper with its seconds and secret;
# refusals), observed (cluster and node come from the certificate; bad words
# refused; a mismatch is a warning at the broker), lookup's only (never from
# nor into the cache), and a broker out of reach.

. "$(dirname -- "$0")/lib.sh"

make_certs "frontend nata" "frontend fw" "helper nata/nata1" "helper nata/nata2" "helper fw/fw1" \
	"helper natb/natb1"
openssl rand -hex 32 >"$work/proxy.key"
chmod 0600 "$work/proxy.key"
start_broker 17821 broker --proxy p1@127.0.0.1:17828 --proxy-key "$work/proxy.key" \
	--reflector 127.0.0.1:17829
start_frontend fw 17823 --kind firewalled --addresses 198.51.100.64/26
fw_url=$frontend_url
start_frontend nata 17822 --kind nat --public-address 203.0.113.10 --addresses 198.18.1.0/24
nata_url=$frontend_url
H=helper-nata-nata1 F=helper-fw-fw1

call $H registerNode name=nata1 address=198.18.1.1 portLow=5000 portHigh=5099
expect_ok "registerNode nata1"
call $H publish job=job1 secret=s3cret rank=0 address=198.18.1.1 port=5001
expect_ok "publish job1 rank 0 at nata1"
call $H publish job=job1 secret=s3cret rank=2 address=198.18.1.1 port=5002
expect_ok "publish job1 rank 2 at nata1"
frontend_url=$fw_url
call $F registerNode name=fw1 address=198.51.100.75 portLow=6000 portHigh=6099 canIntercept=0
expect_ok "registerNode fw1 (cannot intercept)"
fw_epoch=$(field epoch)
call $F publish job=job1 secret=s3cret rank=1 address=198.51.100.75 port=6001
expect_ok "publish job1 rank 1 at fw1"
frontend_url=$nata_url

# --- siteInfo
call $H siteInfo
if [[ $rc -eq 0 && $(field broker) == "$broker_url" ]] &&
	out_has cluster.name=nata cluster.kind=nat frontendSeenFrom=127.0.0.1 \
		reflector.address=127.0.0.1 reflector.port=17829 proxy.0.address=127.0.0.1 \
		proxy.0.port=17828 &&
	has_item peer name=fw kind=firewalled && has_item peer name=nata kind=nat; then
	pass "siteInfo: nata as declared, the broker's URL, seen from 127.0.0.1, reflector, proxy, peers"
else
	fail "siteInfo: nata as declared, the broker's URL, seen from 127.0.0.1, reflector, proxy, peers"
fi
call helper-natb-natb1 siteInfo
expect_fault denied "siteInfo: a helper of another cluster is refused" "cluster natb"
call frontend-fw siteInfo
expect_fault denied "siteInfo: a frontend certificate is refused"

# --- probe: the order reaches fw1's helper through fw's frontend
call $H probe cluster=fw seconds=30
job=$(field job) secret=$(field secret)
if [[ $rc -eq 0 && $job =~ ^probe-[0-9a-f]{32}$ && $secret =~ ^[0-9a-f]{32}$ &&
	$(field rank) == 1 && $(field cluster) == fw && $(field node) == fw1 &&
	$(field address) == 198.51.100.75 && $(field seconds) == 30 ]]; then
	pass "probe fw: job probe-<32 hex>, a secret, rank 1 on fw1 at 198.51.100.75 for 30 s"
else
	fail "probe fw: job probe-<32 hex>, a secret, rank 1 on fw1 at 198.51.100.75 for 30 s"
fi
frontend_url=$fw_url
call $F poll epoch="$fw_epoch" ackSeq=0 waitSeconds=10
[[ $rc -eq 0 ]] && has_item command kind=probe-listen "job=$job" rank=1 node=fw1 "token=$secret" \
	seconds=30 &&
	pass "fw1's helper receives probe-listen with the job, rank 1, the secret as token, 30 s" ||
	fail "fw1's helper receives probe-listen with the job, rank 1, the secret as token, 30 s"
frontend_url=$nata_url
call $H probe cluster=fw seconds=0
expect_fault invalid "probe for 0 s is refused at the frontend" "seconds"
call $H probe cluster=fw seconds=500
expect_fault invalid "probe for 500 s is refused at the frontend" "seconds"
call $H probe cluster='x/y' seconds=10
expect_fault invalid "probe of a malformed cluster name" "cluster"
call $H probe cluster=nosuch seconds=10
expect_fault notfound "probe of an unknown cluster: the broker's notfound" "nosuch"
# Live probes per calling node (the broker's probes-per-node, 2): one node
# cannot take all of its cluster's 8; which node calls is the certificate's.
call $H probe cluster=fw seconds=10
expect_ok "nata1's second live probe"
call $H probe cluster=fw seconds=10
expect_fault retry "nata1's third live probe: the broker's retry (probes-per-node)" \
	"node nata1 of cluster nata already has 2 probe endpoints alive"
call $H probe cluster=fw seconds=10 node=nata2
expect_fault retry "... also when its helper names another node in the message" "node nata1 of"
call helper-nata-nata2 probe cluster=fw seconds=10
expect_ok "another node of nata still gets a test endpoint"
# A frontend older than the per-node slots names no node: the cluster's bound only.
for i in 4 5 6 7 8; do
	call_broker frontend-nata probe cluster=fw seconds=10
	expect_ok "probe $i of nata from a frontend that names no node"
done
call helper-nata-nata2 probe cluster=fw seconds=10
expect_fault retry "the ninth live probe of nata: the broker's retry" "8 probe endpoints"
call helper-natb-natb1 probe cluster=fw seconds=10
expect_fault denied "probe: a helper of another cluster is refused"

# --- observed: whose it is comes from the certificate
call $H observed cluster=fw node=fw9 kind=nat publicAddress=203.0.113.10 portPreserving=1 mapping=endpoint-independent inbound=dropped
expect_ok "observed (naming another cluster and node)"
call_broker frontend-nata grid
[[ $rc -eq 0 ]] &&
	has_item cluster declared.name=nata nodes=1 observed.kind=nat observed.node=nata1 &&
	has_item cluster declared.name=fw nodes=1 observed.kind= observed.node= &&
	pass "the broker holds it for nata, node nata1 (from the certificate), nothing for fw" ||
	fail "the broker holds it for nata, node nata1 (from the certificate), nothing for fw"
call $H observed cluster=nata node=nata1 kind=nat publicAddress=203.0.113.10 portPreserving=1 mapping=sideways inbound=dropped
expect_fault invalid "observed: a bad mapping is refused" "mapping"
call $H observed cluster=nata node=nata1 kind=nat publicAddress=203.0.113.10 portPreserving=1 mapping=none inbound=sometimes
expect_fault invalid "observed: a bad inbound is refused" "inbound"
call $H observed cluster=nata node=nata1 kind=carrier-grade portPreserving=1 mapping=none inbound=dropped
expect_fault invalid "observed: a bad kind is refused" "kind"
call $H observed cluster=nata node=nata1 kind=nat publicAddress=203.0.113.999 portPreserving=1 mapping=none inbound=dropped
expect_fault invalid "observed: a public address that is not one is refused" "publicAddress"
call $H observed cluster=nata node=nata1 kind=nat publicAddress=203.0.113.10 portPreserving=7 mapping=none inbound=dropped
expect_fault invalid "observed: portPreserving 7 is refused" "portPreserving"
[[ $(counter "$broker_url" observations) -eq 1 ]] && pass "none of the bad ones reached the broker" ||
	fail "none of the bad ones reached the broker"
call $H observed cluster=nata node=nata1 kind=symnat publicAddress=203.0.113.10 portPreserving=0 mapping=endpoint-dependent inbound=dropped
expect_ok "observed: symnat at a site declared nat"
wait_log "$work/broker.log" "warn .*misconfiguration: cluster nata declares nat but node nata1 observed symnat \(mapping varies by destination\)" "$broker_pid" &&
	pass "the broker warns of the misconfiguration" ||
	fail "the broker warns of the misconfiguration"
call $H observed cluster=nata node=nata1 kind=nat publicAddress=203.0.113.99 portPreserving=1 mapping=endpoint-independent inbound=dropped
expect_fault denied "observed: a public address nata does not declare is refused" \
	"node nata1 appears from 203.0.113.99, which is not among the public addresses cluster nata declared"
wait_log "$work/broker.log" "warn .*observed from frontend nata refused \(qcg:denied\): node nata1 appears from 203.0.113.99" "$broker_pid" &&
	pass "the broker logs the undeclared public address" ||
	fail "the broker logs the undeclared public address"
call $H grid
expect_fault denied "grid is not served by a frontend" "broker"

# --- lookup only: relayed, never from nor into the cache
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=2
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=2
[[ $(field plan.reason) == "cached by frontend nata" ]] && pass "a normal lookup 0 -> 2 is cached" ||
	fail "a normal lookup 0 -> 2 is cached"
f_cache=$(counter "$frontend_url" lookups_from_cache)
f_fwd=$(counter "$frontend_url" lookups_forwarded)
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=2 only=direct
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=2 only=direct
if [[ $rc -eq 0 && $(field plan.status) == ok && $(field plan.technique) == direct &&
	$(field plan.cacheable) == 0 && $(field plan.reason) != "cached by frontend nata" &&
	$(counter "$frontend_url" lookups_from_cache) -eq $f_cache &&
	$(counter "$frontend_url" lookups_forwarded) -eq $((f_fwd + 2)) ]]; then
	pass "only direct: both lookups reach the broker, not cacheable"
else
	fail "only direct: both lookups reach the broker, not cacheable"
fi
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=1 only=direct
[[ $rc -eq 0 && $(field plan.status) == unavailable && $(field plan.technique) == direct &&
	$(field plan.reason) == *"cluster fw is firewalled with no open port range: it accepts no connection from outside"* ]] &&
	pass "only direct to fw: unavailable, with why" || fail "only direct to fw: unavailable, with why"
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=1 only=traversing
[[ $rc -eq 0 && $(field plan.status) == unavailable &&
	$(field plan.reason) == *"the helper of node fw1 cannot intercept"* ]] &&
	pass "only traversing to fw: fw1 cannot intercept" || fail "only traversing to fw: fw1 cannot intercept"
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=1 only=holepunch
[[ $rc -eq 0 && $(field plan.status) == ok && $(field plan.technique) == holepunch &&
	$(field plan.address) == 127.0.0.1 && $(field plan.port) == 17829 && -n $(field plan.token) ]] &&
	pass "only holepunch nata -> fw: through the reflector, with a token" ||
	fail "only holepunch nata -> fw: through the reflector, with a token"
f_fwd=$(counter "$frontend_url" lookups_forwarded)
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=1 only=warp
expect_fault invalid "only: an unknown technique is refused at the frontend" "only"
call $H lookup job=job1 secret=s3cret fromRank=0 toRank=1 only="$(printf 'direct%.0s' {1..10})"
expect_fault invalid "only: 60 characters are refused at the frontend" "only"
[[ $(counter "$frontend_url" lookups_forwarded) -eq $f_fwd ]] &&
	pass "junk in only is not relayed" || fail "junk in only is not relayed"

# --- the broker out of reach: siteInfo says so
kill -TERM "$broker_pid"
wait_gone "$broker_pid" 200 || die "the broker did not stop"
wait "$broker_pid" || true
broker_pid=
wait_log "$work/frontend-nata.log" "lost the broker" || die "the frontend did not notice"
call $H siteInfo
expect_fault unavailable "siteInfo with the broker down: unavailable" "broker unreachable"
call $H probe cluster=fw seconds=10
expect_fault unavailable "probe with the broker down: unavailable" "broker unreachable"

finish
