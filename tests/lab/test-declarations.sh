#!/usr/bin/env bash
# lab-declarations: what a site declares decides the plans, and a wrong
# declaration costs one bounded attempt.
#
# 1. fw's helpers run without CAP_NET_ADMIN/CAP_NET_RAW (QCG_LAB_UNPRIVILEGED):
#    they say so, the broker never plans traversing towards them, and
#    nata1 -> fw1 still connects (hole punching needs no privileges).
# 2. sym's frontend declares a port-keeping NAT (QCG_LAB_DECLARE=sym=nat): the
#    first sym1 -> natb1 tries hole punching, the reflector sees the port change
#    and fails it at once (logged as a misconfiguration), the proxy carries the
#    data; the second goes straight to the proxy (the broker remembers).
# The lab is put back as it was (`qcg-lab up`) at the end, also on failure.
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
scratch
restore() { QCG_LAB_UNPRIVILEGED="" QCG_LAB_DECLARE="" "$LAB" up >/dev/null 2>&1 || true; }
trap 'scratch_cleanup; restore' EXIT
JOB=$(new_job declarations)
size=$((16 << 20))
head -c "$size" /dev/urandom >"$WORK/in"

# transfer FROM TO TECHNIQUE: sets SETUP_US and FROM_RANK.
transfer() {
	local from=$1 to=$2 tech=$3
	cat_transfer "$from" "$to"
	[ "$XFER_TECH" = "$tech" ] || fail "$from -> $to: used $XFER_TECH, not $tech"
	SETUP_US=$XFER_SETUP_US
	FROM_RANK=$XFER_FROM_RANK
	note "$from -> $to: 16 MiB identical, $tech, setup $SETUP_US us"
}

# --- 1: helpers without privileges -------------------------------------------
QCG_LAB_UNPRIVILEGED=fw "$LAB" up >/dev/null
grep -q "cannot intercept (no CAP_NET_ADMIN and CAP_NET_RAW)" "$LAB_STATE/log/helper-fw1.log" ||
	fail "fw1's helper does not say it cannot intercept"
transfer nata1 fw1 holepunch
grep "job $JOB rank $FROM_RANK (nata) -> " "$LAB_STATE/log/broker.log" | grep -q traversing &&
	fail "the broker planned traversing towards an unprivileged helper"
transfer open1 fw1 reversed
note "fw without privileges: no traversing planned, hole punching and reversal connect"

# --- 2: a symmetric NAT declared as a port-keeping one ----------------------
QCG_LAB_DECLARE=sym=nat "$LAB" up >/dev/null
transfer sym1 natb1 proxy
first=$SETUP_US
[ "$first" -lt 3000000 ] || fail "the misdeclared site cost $first us before the proxy"
grep -q "misconfiguration: cluster sym node sym1 is declared port-preserving" \
	"$LAB_STATE/log/broker.log" || fail "the broker did not log the misconfiguration"
grep -q "job $JOB rank $FROM_RANK (sym) -> rank $((FROM_RANK - 1)) (natb/natb1): proxy; .*tried before: holepunch" \
	"$LAB_STATE/log/broker.log" || fail "the first connection did not fall from holepunch to proxy"
transfer sym1 natb1 proxy
grep -q "job $JOB rank $FROM_RANK (sym) -> rank $((FROM_RANK - 1)) (natb/natb1): proxy; proxy-connect ordered to natb (seq [0-9]*)$" \
	"$LAB_STATE/log/broker.log" || fail "the second connection did not go straight to the proxy"
note "sym declared nat: first connection fell back to the proxy after $first us, the second went straight to it ($SETUP_US us)"
