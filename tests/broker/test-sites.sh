#!/usr/bin/env bash
# broker-sites: a site names only addresses it holds (docs/architecture.md,
# "Addresses within a site").  Each attack of issue 16 through the real
# qcg-broker on 127.0.0.1:17705, called by broker-call with a frontend's
# certificate (a site's admin, or root on its head node):
#
#   nata  nat         public 203.0.113.30   nodes 198.18.3.0/24    nata1 198.18.3.11
#   fw    firewalled                        nodes 198.51.100.64/26 fw1   198.51.100.75
#   evil  open        (the attacker)        nodes 192.0.2.0/28     evil1 192.0.2.5
#   natb  nat         public 203.0.113.82   nodes 198.18.3.0/24    (private: may overlap nata)
#   loop  open        declares no ranges: the frontend's own address 127.0.0.1 only
#
#   test-sites.sh QCG-BROKER BROKER-CALL QCG-CERTS
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

# is DESCRIPTION PATTERN: the last call's reply matches the glob PATTERN.
is() {
  # shellcheck disable=SC2053 # $2 is a glob on purpose
  if [[ $out == $2 ]]; then pass "$1"; else fail "$1: $out"; fi
}

# --- the honest sites
expect_ok "nata registers" "$fnata" register-cluster nata nat 0 0 203.0.113.30 198.18.3.0/24
epoch=$(sed -n 's/.*epoch=\([0-9]*\).*/\1/p' <<<"$out")
expect_ok "fw registers" "$ffw" register-cluster fw firewalled 0 0 198.51.100.64/26
expect_ok "nata1 inside nata's range" "$fnata" register-node nata1 198.18.3.11 20000 20999 1
expect_ok "fw1 inside fw's range" "$ffw" register-node fw1 198.51.100.75 20000 20999 1
expect_ok "nata publishes rank 0" "$fnata" publish j s 0 - nata1 198.18.3.11 20001
expect_ok "fw publishes rank 2" "$ffw" publish j s 2 - fw1 198.51.100.75 20001

# --- 1: a node at another site's address
expect_ok "evil registers its own range" "$fevil" register-cluster evil open 0 0 192.0.2.0/28
expect_fault "a node in nata's LAN" denied "$fevil" register-node evil2 198.18.3.12 20000 20999 1
[[ $out == *"outside the node ranges cluster evil declared"* ]] &&
  pass "the refusal names the rule" || fail "refusal: $out"
expect_fault "a node at fw's address" denied "$fevil" register-node evil3 198.51.100.75 20000 20999 1
wait_log "$log" "registerNode from frontend evil refused \(qcg:denied\): address 198.18.3.12" "$broker_pid" &&
  pass "the refusal is logged" || fail "no log line for the refused node"
# The attack it stopped: rank 1 at nata1's address, then only=reversed makes
# nata1's helper connect into its own LAN.
call "$fevil" publish j s 1 - evil2 198.18.3.12 20001
call "$fevil" lookup j s 1 0 - reversed
[[ $out != *"status=ok technique=reversed"* ]] &&
  pass "no reversed plan towards nata's LAN ($out)" || fail "reversed into nata's LAN: $out"

# --- 2: overlapping declarations
expect_fault "evil claims fw's public range" denied "$fevil" register-cluster evil open 0 0 198.51.100.64/27
[[ $out == *"overlaps 198.51.100.64/26 of cluster fw, registered first"* ]] &&
  pass "the refusal names the holder" || fail "refusal: $out"
expect_fault "evil claims nata's private range as routable" denied "$fevil" \
  register-cluster evil open 0 0 198.18.3.0/25
expect_fault "natb claims nata's public address" denied "$fnatb" \
  register-cluster natb nat 0 0 203.0.113.30 198.18.4.0/24
expect_fault "natb declares a public address in fw's LAN (an inject source)" denied "$fnatb" \
  register-cluster natb nat 0 0 198.51.100.80 198.18.4.0/24
expect_ok "natb reuses nata's private range (NATs may)" "$fnatb" \
  register-cluster natb nat 0 0 203.0.113.82 198.18.3.0/24
expect_fault "a loopback range" invalid "$fevil" register-cluster evil open 0 0 127.0.0.0/8
expect_fault "a range wider than /8" invalid "$fevil" register-cluster evil open 0 0 0.0.0.0/0
expect_fault "host bits set" invalid "$fevil" register-cluster evil open 0 0 192.0.2.5/28

# --- 3: a probe observation from an address nata does not hold
expect_fault "nata observed from evil's address" denied "$fnata" \
  observed nata nata1 nat 192.0.2.5 1 endpoint-independent dropped
expect_ok "nata observed from its declared address" "$fnata" \
  observed nata nata1 nat 203.0.113.30 1 endpoint-independent dropped

# --- 4: connect-back targets and inject sources at order time
expect_ok "evil1 inside evil's range" "$fevil" register-node evil1 192.0.2.5 20000 20999 1
expect_ok "evil publishes rank 1" "$fevil" publish j s 1 - evil1 192.0.2.5 20001
call "$fevil" lookup j s 1 0 - reversed
is "evil -> nata reversed while 192.0.2.5 is evil's" "ok status=ok technique=reversed*"
# evil narrows its ranges: evil1 stays registered at the old address.
expect_ok "evil re-declares 192.0.2.16/28" "$fevil" register-cluster evil open 0 0 192.0.2.16/28
call "$fevil" lookup j s 1 0 - reversed
is "only=reversed to an address evil no longer declares: unavailable, saying why" \
  "ok status=unavailable technique=reversed*reason=reversed refused: target 192.0.2.5 is not among the node addresses cluster evil declared"
call "$fevil" lookup j s 1 0
[[ $out != *"technique=reversed"* && $out == *"reversed refused"* ]] &&
  pass "a normal lookup skips reversed and says why ($out)" || fail "normal lookup: $out"
expect_ok "evil re-declares itself firewalled" "$fevil" register-cluster evil firewalled 0 0 192.0.2.16/28
call "$fevil" lookup j s 1 2 - traversing
is "only=traversing with a source evil does not declare: unavailable" \
  "ok status=unavailable technique=traversing*reason=traversing refused: source 192.0.2.5 is not among the public addresses cluster evil declared"
expect_ok "evil declares 192.0.2.0/28 again" "$fevil" register-cluster evil firewalled 0 0 192.0.2.0/28
call "$fevil" lookup j s 1 2 - traversing
is "traversing from evil's own address" "ok status=ok technique=traversing*"
call "$fnata" poll "$epoch" 0 0
n=$(grep -o "connect-back" <<<"$out" | wc -l)
[ "$n" -eq 1 ] && [[ $out != *":198.18.3.12:"* ]] &&
  pass "nata1 got the one legitimate connect-back, none into its LAN" || fail "nata's orders: $out"

# --- a frontend that declares no ranges: its own address only
expect_ok "loop registers without ranges" "$floop" register-cluster loop open 0 0
wait_log "$log" "cluster loop declares no node ranges: only nodes at its frontend's own address 127.0.0.1" "$broker_pid" &&
  pass "the broker warns of the missing ranges" || fail "no warning for the missing ranges"
expect_ok "a node at the frontend's own address" "$floop" register-node loop1 127.0.0.1 20000 20999 0
expect_fault "a node elsewhere" denied "$floop" register-node loop2 198.51.100.99 20000 20999 0
[[ $out == *"declares no node ranges (qcg-frontend option addresses)"* ]] &&
  pass "the refusal names the option" || fail "refusal: $out"

call "$fnata" stats
a=$(sed -n 's/.* addresses_refused=\([0-9]*\).*/\1/p' <<<"$out")
o=$(sed -n 's/.* targets_refused=\([0-9]*\).*/\1/p' <<<"$out")
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
