#!/usr/bin/env bash
# lab-encrypt: connections between sites are encrypted by default, connections
# inside a site plain (issue 17); --encrypt never on both ends makes a
# cross-site connection plain (so the first check can fail).  The bytes on the
# wire are checked without a capture by libqcgconn-handshake (a recording
# relay: a known pattern absent when encrypted, present when plain).
#
#   nata1 --(nata's NAT, the internet)--> open1    tls on both ends
#   nata1 --LAN--> nata2                           plain
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
scratch
JOB=$(new_job encrypt)
head -c $((1 << 20)) /dev/urandom >"$WORK/in"

# send NAME MODE RANK: nata1 rank RANK+1 -> open1 rank RANK with --encrypt MODE on
# both ends (MODE "" = the default); the data arrive intact.
send() {
	local name=$1 mode=$2 rank=$3 opt=() listener
	[ -z "$mode" ] || opt=(--encrypt "$mode")
	cat_listen open1 "$rank" "$name" --timeout 30 "${opt[@]}"
	listener=$BG_PID
	"$LAB" exec nata1 -- qcg-cat --job "$JOB" --rank $((rank + 1)) --json --timeout 20 "${opt[@]}" \
		connect "$rank" <"$WORK/in" >/dev/null 2>"$WORK/$name.cerr" ||
		{ cat "$WORK/$name.cerr"; fail "$name: connect failed"; }
	wait_exit "$listener" 20 || { cat "$WORK/$name.err"; fail "$name: the listener failed"; }
	cmp -s "$WORK/in" "$WORK/$name.out" || fail "$name: what arrived differs from what was sent"
}

send default "" 0
enc=$(json_event "$WORK/default.cerr" sent | json_field encryption)
acc=$(json_event "$WORK/default.err" accepted | json_field encryption)
case $enc in tls-*) ;; *) fail "nata1 -> open1 by default: '$enc', not encrypted" ;; esac
[ "$acc" = "$enc" ] || fail "the two ends disagree: connect $enc, accept $acc"
note "nata1 -> open1, default policy: 1 MiB intact, $enc on both ends"

send never never 2
[ "$(json_event "$WORK/never.cerr" sent | json_field encryption)" = plain ] ||
	fail "--encrypt never: not plain: $(json_event "$WORK/never.cerr" sent)"
note "nata1 -> open1, --encrypt never on both ends: plain"

XFER_RANK=10
cat_transfer nata1 nata2
[ "$(echo "$XFER_SENT" | json_field encryption)" = plain ] ||
	fail "nata1 -> nata2 (one site), default policy: not plain: $XFER_SENT"
note "nata1 -> nata2 (one site), default policy: plain"
