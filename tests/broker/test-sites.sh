#!/usr/bin/env bash
# broker-sites: a site names only addresses it holds (docs/architecture.md,
# "Addresses within a site").  Each attack of issue 16 through the real
# qcg-broker on 127.0.0.1:17705, called by soap-call with a frontend's
# certificate (a site's admin, or root on its head node):
#
#   nata  nat         public 203.0.113.30   nodes 198.18.3.0/24    nata1 198.18.3.11
#   fw    firewalled                        nodes 198.51.100.64/26 fw1   198.51.100.75
#   evil  open        (the attacker)        nodes 192.0.2.0/28     evil1 192.0.2.5
#   natb  nat         public 203.0.113.82   nodes 198.18.3.0/24    (private: may overlap nata)
#   loop  open        declares no ranges: the frontend's own address 127.0.0.1 only
#
#   test-sites.sh QCG-BROKER SOAP-CALL QCG-CERTS
set -u
broker_bin=$1 call_bin=$2 certs_bin=$3
url=https://127.0.0.1:17705/
work=$(mktemp -d /tmp/broker-sites.XXXXXX)
broker_pid=

cleanup() {
  stop_children "$broker_pid" "$broker_pid"
  rm -rf "$work"
}
trap cleanup EXIT

# shellcheck source=tests/broker/lib.sh
. "$(dirname "$0")/lib.sh"

make_ca "$work/ca" nata fw evil natb loop
fnata=$ca/frontend-nata.pem ffw=$ca/frontend-fw.pem fevil=$ca/frontend-evil.pem
fnatb=$ca/frontend-natb.pem floop=$ca/frontend-loop.pem
log=$work/broker.log
start_broker "$log" broker_pid 17705

# is DESCRIPTION LINE...: the last call's answer holds each LINE.
is() {
  local what=$1
  shift
  if [ $rc -eq 0 ] && out_has ok "$@"; then pass "$what"; else fail "$what: $out"; fi
}

# --- the honest sites
expect_ok "nata registers" "$fnata" registerCluster name=nata kind=nat publicAddress=203.0.113.30 nodeRange=198.18.3.0/24
epoch=$(field epoch)
expect_ok "fw registers" "$ffw" registerCluster name=fw kind=firewalled nodeRange=198.51.100.64/26
expect_ok "nata1 inside nata's range" "$fnata" registerNode name=nata1 address=198.18.3.11 portLow=20000 portHigh=20999 canIntercept=1
expect_ok "fw1 inside fw's range" "$ffw" registerNode name=fw1 address=198.51.100.75 portLow=20000 portHigh=20999 canIntercept=1
expect_ok "nata publishes rank 0" "$fnata" publish job=j secret=s rank=0 node=nata1 address=198.18.3.11 port=20001
expect_ok "fw publishes rank 2" "$ffw" publish job=j secret=s rank=2 node=fw1 address=198.51.100.75 port=20001

# --- 1: a node at another site's address
expect_ok "evil registers its own range" "$fevil" registerCluster name=evil kind=open nodeRange=192.0.2.0/28
expect_fault "a node in nata's LAN" denied "$fevil" registerNode name=evil2 address=198.18.3.12 portLow=20000 portHigh=20999 canIntercept=1
[[ $out == *"outside the node ranges cluster evil declared"* ]] &&
  pass "the refusal names the rule" || fail "refusal: $out"
expect_fault "a node at fw's address" denied "$fevil" registerNode name=evil3 address=198.51.100.75 portLow=20000 portHigh=20999 canIntercept=1
wait_log "$log" "registerNode from frontend evil refused \(qcg:denied\): address 198.18.3.12" "$broker_pid" &&
  pass "the refusal is logged" || fail "no log line for the refused node"
# The attack it stopped: rank 1 at nata1's address, then only=reversed makes
# nata1's helper connect into its own LAN.
call "$fevil" publish job=j secret=s rank=1 node=evil2 address=198.18.3.12 port=20001
call "$fevil" lookup job=j secret=s fromRank=1 toRank=0 only=reversed
! out_has plan.status=ok plan.technique=reversed &&
  pass "no reversed plan towards nata's LAN ($out)" || fail "reversed into nata's LAN: $out"

# --- 2: overlapping declarations
expect_fault "evil claims fw's public range" denied "$fevil" registerCluster name=evil kind=open nodeRange=198.51.100.64/27
[[ $out == *"overlaps 198.51.100.64/26 of cluster fw, registered first"* ]] &&
  pass "the refusal names the holder" || fail "refusal: $out"
expect_fault "evil claims nata's private range as routable" denied "$fevil" \
  registerCluster name=evil kind=open nodeRange=198.18.3.0/25
expect_fault "natb claims nata's public address" denied "$fnatb" \
  registerCluster name=natb kind=nat publicAddress=203.0.113.30 nodeRange=198.18.4.0/24
expect_fault "natb declares a public address in fw's LAN (an inject source)" denied "$fnatb" \
  registerCluster name=natb kind=nat publicAddress=198.51.100.80 nodeRange=198.18.4.0/24
expect_ok "natb reuses nata's private range (NATs may)" "$fnatb" \
  registerCluster name=natb kind=nat publicAddress=203.0.113.82 nodeRange=198.18.3.0/24
expect_fault "a loopback range" invalid "$fevil" registerCluster name=evil kind=open nodeRange=127.0.0.0/8
expect_fault "a range wider than /8" invalid "$fevil" registerCluster name=evil kind=open nodeRange=0.0.0.0/0
expect_fault "host bits set" invalid "$fevil" registerCluster name=evil kind=open nodeRange=192.0.2.5/28

# --- 3: a probe observation from an address nata does not hold
expect_fault "nata observed from evil's address" denied "$fnata" \
  observed cluster=nata node=nata1 kind=nat publicAddress=192.0.2.5 portPreserving=1 mapping=endpoint-independent inbound=dropped
expect_ok "nata observed from its declared address" "$fnata" \
  observed cluster=nata node=nata1 kind=nat publicAddress=203.0.113.30 portPreserving=1 mapping=endpoint-independent inbound=dropped

# --- 4: connect-back targets and inject sources at order time
expect_ok "evil1 inside evil's range" "$fevil" registerNode name=evil1 address=192.0.2.5 portLow=20000 portHigh=20999 canIntercept=1
expect_ok "evil publishes rank 1" "$fevil" publish job=j secret=s rank=1 node=evil1 address=192.0.2.5 port=20001
call "$fevil" lookup job=j secret=s fromRank=1 toRank=0 only=reversed
is "evil -> nata reversed while 192.0.2.5 is evil's" plan.status=ok plan.technique=reversed
# evil narrows its ranges: evil1 stays registered at the old address.
expect_ok "evil re-declares 192.0.2.16/28" "$fevil" registerCluster name=evil kind=open nodeRange=192.0.2.16/28
call "$fevil" lookup job=j secret=s fromRank=1 toRank=0 only=reversed
is "only=reversed to an address evil no longer declares: unavailable, saying why" \
  plan.status=unavailable plan.technique=reversed \
  "plan.reason=reversed refused: target 192.0.2.5 is not among the node addresses cluster evil declared"
call "$fevil" lookup job=j secret=s fromRank=1 toRank=0
! out_has plan.technique=reversed && [[ $(field plan.reason) == *"reversed refused"* ]] &&
  pass "a normal lookup skips reversed and says why ($(field plan.reason))" || fail "normal lookup: $out"
expect_ok "evil re-declares itself firewalled" "$fevil" registerCluster name=evil kind=firewalled nodeRange=192.0.2.16/28
call "$fevil" lookup job=j secret=s fromRank=1 toRank=2 only=traversing
is "only=traversing with a source evil does not declare: unavailable" \
  plan.status=unavailable plan.technique=traversing \
  "plan.reason=traversing refused: source 192.0.2.5 is not among the public addresses cluster evil declared"
expect_ok "evil declares 192.0.2.0/28 again" "$fevil" registerCluster name=evil kind=firewalled nodeRange=192.0.2.0/28
call "$fevil" lookup job=j secret=s fromRank=1 toRank=2 only=traversing
is "traversing from evil's own address" plan.status=ok plan.technique=traversing
call "$fnata" poll epoch="$epoch" ackSeq=0 waitSeconds=0
n=$(grep -c '^command\.[0-9]*\.kind=connect-back$' <<<"$out")
[ "$n" -eq 1 ] && ! grep -q '^command\.[0-9]*\.address=198\.18\.3\.12$' <<<"$out" &&
  pass "nata1 got the one legitimate connect-back, none into its LAN" || fail "nata's orders: $out"

# --- a frontend that declares no ranges: its own address only
expect_ok "loop registers without ranges" "$floop" registerCluster name=loop kind=open
wait_log "$log" "cluster loop declares no node ranges: only nodes at its frontend's own address 127.0.0.1" "$broker_pid" &&
  pass "the broker warns of the missing ranges" || fail "no warning for the missing ranges"
expect_ok "a node at the frontend's own address" "$floop" registerNode name=loop1 address=127.0.0.1 portLow=20000 portHigh=20999 canIntercept=0
expect_fault "a node elsewhere" denied "$floop" registerNode name=loop2 address=198.51.100.99 portLow=20000 portHigh=20999 canIntercept=0
[[ $out == *"declares no node ranges (qcg-frontend option addresses)"* ]] &&
  pass "the refusal names the option" || fail "refusal: $out"

call "$fnata" stats
a=$(field counter.addresses_refused)
o=$(field counter.targets_refused)
[ "${a:-0}" -eq 8 ] && [ "${o:-0}" -eq 3 ] &&
  pass "stats: addresses_refused=$a targets_refused=$o" || fail "stats: $out"

kill -TERM "$broker_pid"
wait "$broker_pid"
broker_pid=
if grep -Eq "ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:" "$log"; then
  fail "sanitizer report in the broker log"
  grep -A20 Sanitizer "$log" | head -40
fi
if [ $failed -ne 0 ]; then
  echo "broker-sites: $failed failure(s); broker log:"
  tail -40 "$log"
  exit 1
fi
echo "broker-sites: all checks passed"
