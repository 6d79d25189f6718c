#!/usr/bin/env bash
# lab-encrypt: connections between sites are encrypted by default, connections
# inside a site plain (issue 17).  A capture on nata's router (tcpdump on its
# WAN link) holds no copy of a known 64-byte pattern that qcg-cat sends from
# nata1 to open1 with the default policy; with --encrypt never on both ends the
# same capture holds it (so the check can fail).
#
#   nata1 --LAN--> qcg-r-nata ==qcg-wan (tcpdump)==> internet --> open1
#   nata1 --LAN--> nata2                                            (plain)
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
command -v tcpdump >/dev/null || skip "tcpdump is missing"
scratch
JOB=$(new_job encrypt)
pattern=qcg-connect-issue-17-known-pattern-that-must-not-cross-in-clear!
[ ${#pattern} -eq 64 ] || fail "the pattern is ${#pattern} bytes"
for _ in $(seq 1 2048); do printf '%s' "$pattern"; done >"$WORK/in"

# send NAME MODE RANK: nata1 rank RANK+1 -> open1 rank RANK with --encrypt MODE on
# both ends (MODE "" = the default), under a capture on nata's WAN link in
# $WORK/NAME.pcap; the data arrive intact.
send() {
	local name=$1 mode=$2 rank=$3 opt=() tcpdump_pid listener i
	[ -z "$mode" ] || opt=(--encrypt "$mode")
	ip netns exec qcg-r-nata tcpdump -Z root -i qcg-wan -n -U -s 0 -w "$WORK/$name.pcap" tcp \
		2>"$WORK/$name.tcpdump" &
	tcpdump_pid=$!
	BG_PIDS+=("$tcpdump_pid")
	for ((i = 0; i < 100; i++)); do
		grep -q "listening on" "$WORK/$name.tcpdump" && break
		sleep 0.05
	done
	grep -q "listening on" "$WORK/$name.tcpdump" || fail "tcpdump did not start: $(cat "$WORK/$name.tcpdump")"
	cat_listen open1 "$rank" "$name" --timeout 30 "${opt[@]}"
	listener=$BG_PID
	"$LAB" exec nata1 -- qcg-cat --job "$JOB" --rank $((rank + 1)) --json --timeout 20 "${opt[@]}" \
		connect "$rank" <"$WORK/in" >/dev/null 2>"$WORK/$name.cerr" ||
		{ cat "$WORK/$name.cerr"; fail "$name: connect failed"; }
	wait_exit "$listener" 20 || { cat "$WORK/$name.err"; fail "$name: the listener failed"; }
	cmp -s "$WORK/in" "$WORK/$name.out" || fail "$name: what arrived differs from what was sent"
	sleep 0.2
	kill -INT "$tcpdump_pid" 2>/dev/null || true
	wait "$tcpdump_pid" 2>/dev/null || true
}

send default "" 0
enc=$(json_event "$WORK/default.cerr" sent | json_field encryption)
acc=$(json_event "$WORK/default.err" accepted | json_field encryption)
case $enc in tls-*) ;; *) fail "nata1 -> open1 by default: '$enc', not encrypted" ;; esac
[ "$acc" = "$enc" ] || fail "the two ends disagree: connect $enc, accept $acc"
[ -s "$WORK/default.pcap" ] || fail "the capture is empty"
grep -a -q -F "$pattern" "$WORK/default.pcap" && fail "the pattern crossed nata's WAN link in clear"
note "nata1 -> open1, default policy: $enc on both ends, $(stat -c %s "$WORK/default.pcap") bytes captured, no pattern"

send never never 2
[ "$(json_event "$WORK/never.cerr" sent | json_field encryption)" = plain ] ||
	fail "--encrypt never: not plain: $(json_event "$WORK/never.cerr" sent)"
n=$(grep -a -c -F "$pattern" "$WORK/never.pcap" || true)
[ "$n" -gt 0 ] || fail "--encrypt never: the capture holds no pattern (the check cannot fail)"
note "--encrypt never: plain, the pattern seen in $n captured lines"

XFER_RANK=10
cat_transfer nata1 nata2
[ "$(echo "$XFER_SENT" | json_field encryption)" = plain ] ||
	fail "nata1 -> nata2 (one site), default policy: not plain: $XFER_SENT"
note "nata1 -> nata2 (one site), default policy: plain"
