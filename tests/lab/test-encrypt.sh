#!/usr/bin/env bash
# lab-encrypt: connections between sites are encrypted by default, connections
# inside a site plain (issue 17).  A capture on nata's router (tcpdump -i any in
# its namespace: both its LAN and its WAN side) holds no copy of a known 64-byte
# pattern that qcg-cat sends from nata1 to open1 with the default policy; with
# --encrypt never on both ends the same capture holds it (so the check can
# fail).  Each capture must hold at least the 1 MiB sent: an empty one fails.
# qcg-probe's test connections from nata1 to a test endpoint on open's node
# likewise: by default every one is TLS (its --json says so) and the router sees
# the probe asking for TLS (ALPN qcg/1-tls, in clear in the ClientHello) and none
# of its echoed lines; with --encrypt never it sees the lines.
#
#   nata1 --LAN--> qcg-r-nata (tcpdump -i any) --internet--> open1   tls on both ends
#   nata1 --LAN--> nata2                                              plain
#   qcg-probe on nata1 --------------------------------------> open1's responder
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
[ -x "$QCG_BUILD_DIR/tools/qcg-probe" ] || skip "qcg-probe is not built in $QCG_BUILD_DIR"
command -v tcpdump >/dev/null 2>&1 || skip "tcpdump is not installed (scripts/install-deps)"
scratch
JOB=$(new_job encrypt)
pattern=qcg-connect-issue-17-known-pattern-that-must-not-cross-in-clear!
[ ${#pattern} -eq 64 ] || fail "the pattern is ${#pattern} bytes, not 64"
for _ in $(seq 1 16384); do printf '%s' "$pattern"; done >"$WORK/in"
size() { stat -c %s "$1" 2>/dev/null || echo 0; }
holds_input() { [ "$(size "$WORK/$1.pcap")" -gt "$(size "$WORK/in")" ]; }

# capture_start NAME: tcpdump in nata's router, writing $WORK/NAME.pcap; returns
# once it says it is listening (packets before that would be missed).
capture_start() {
	local name=$1
	ip netns exec qcg-r-nata tcpdump -Z root -i any -n -U -s 0 -w "$WORK/$name.pcap" tcp \
		2>"$WORK/$name.tcpdump" &
	CAPTURE_PID=$!
	BG_PIDS+=("$CAPTURE_PID")
	poll 10 "tcpdump listening" grep -q "listening on" "$WORK/$name.tcpdump" ||
		fail "$name: tcpdump did not start: $(cat "$WORK/$name.tcpdump")"
}

# capture_stop NAME: once the capture holds the 1 MiB sent (each packet crosses
# the router twice, so this needs no packet from the end of the transfer),
# stops tcpdump and waits for it.
capture_stop() {
	local name=$1
	poll 10 "the capture" holds_input "$name" ||
		fail "$name: the capture holds $(size "$WORK/$name.pcap") bytes, less than the $(size "$WORK/in") sent"
	kill -INT "$CAPTURE_PID" 2>/dev/null || true
	wait_exit "$CAPTURE_PID" 10 || true
}

# send NAME MODE RANK: nata1 rank RANK+1 -> open1 rank RANK with --encrypt MODE on
# both ends (MODE "" = the default), under a capture in $WORK/NAME.pcap; the
# data arrive intact.
send() {
	local name=$1 mode=$2 rank=$3 opt=() listener
	[ -z "$mode" ] || opt=(--encrypt "$mode")
	capture_start "$name"
	cat_listen open1 "$rank" "$name" --timeout 30 "${opt[@]}"
	listener=$BG_PID
	"$LAB" exec nata1 -- qcg-cat --job "$JOB" --rank $((rank + 1)) --json --timeout 20 "${opt[@]}" \
		connect "$rank" <"$WORK/in" >/dev/null 2>"$WORK/$name.cerr" ||
		{ cat "$WORK/$name.cerr"; fail "$name: connect failed"; }
	wait_exit "$listener" 20 || { cat "$WORK/$name.err"; fail "$name: the listener failed"; }
	cmp -s "$WORK/in" "$WORK/$name.out" || fail "$name: what arrived differs from what was sent"
	capture_stop "$name"
}

send default "" 0
enc=$(json_event "$WORK/default.cerr" sent | json_field encryption)
acc=$(json_event "$WORK/default.err" accepted | json_field encryption)
case $enc in tls-*) ;; *) fail "nata1 -> open1 by default: '$enc', not encrypted" ;; esac
[ "$acc" = "$enc" ] || fail "the two ends disagree: connect $enc, accept $acc"
grep -a -q -F "$pattern" "$WORK/default.pcap" && fail "the pattern crossed nata's router in clear"
note "nata1 -> open1, default policy: 1 MiB intact, $enc on both ends; $(size "$WORK/default.pcap") bytes captured at nata's router, no pattern"

send never never 2
[ "$(json_event "$WORK/never.cerr" sent | json_field encryption)" = plain ] ||
	fail "--encrypt never: not plain: $(json_event "$WORK/never.cerr" sent)"
n=$(grep -a -c -F "$pattern" "$WORK/never.pcap" || true)
[ "$n" -gt 0 ] || fail "--encrypt never: the capture holds no pattern (the check cannot fail)"
note "nata1 -> open1, --encrypt never on both ends: plain, the pattern in $n captured lines"

XFER_RANK=10
cat_transfer nata1 nata2
[ "$(echo "$XFER_SENT" | json_field encryption)" = plain ] ||
	fail "nata1 -> nata2 (one site), default policy: not plain: $XFER_SENT"
note "nata1 -> nata2 (one site), default policy: plain"

# --- qcg-probe: its test connections to another site ---------------------------
CHECK=$LAB_SRC/probe_check.py
# What the probe writes through each connection and the endpoint echoes.
LINES='qcg-probe (direct|reversed|traversing|holepunch|proxy|done)'
count() { grep -a -c -E "$1" "$WORK/$2.pcap" || true; }

# marker_seen NAME: the capture holds the marker, a SYN to open1's port 9.
marker_seen() { tcpdump -r "$WORK/$1.pcap" -n 'tcp dst port 9' 2>/dev/null | grep -q .; }

# probe NAME MODE: qcg-probe on nata1 towards open only, --encrypt MODE ("" =
# the default), under a capture in $WORK/NAME.pcap.  Once the probe has exited
# its packets have all crossed the router, but tcpdump may not have read them
# all yet: a marker SYN from nata1 to open1's port 9 (nothing listens there)
# crosses the router after them, and the capture, written packet by packet
# (-U), is stopped once it holds the marker.
probe() {
	local name=$1 mode=$2 opt=() rc=0
	[ -z "$mode" ] || opt=(--encrypt "$mode")
	capture_start "$name"
	"$LAB" exec nata1 -- qcg-probe --site open --no-report --json --timeout 90 "${opt[@]}" \
		>"$WORK/$name.json" 2>"$WORK/$name.perr" || rc=$?
	[ "$rc" -eq 0 ] || { cat "$WORK/$name.perr" "$WORK/$name.json"; fail "$name: qcg-probe exited $rc"; }
	poll 10 "the probe's connections in the capture" grep -a -q "qcg/1-" "$WORK/$name.pcap" ||
		fail "$name: the capture at nata's router holds none of the probe's connections"
	"$LAB" exec nata1 -- timeout 5 bash -c 'exec 3<>/dev/tcp/198.51.100.11/9' 2>/dev/null || true
	poll 10 "the marker SYN in the capture" marker_seen "$name" ||
		fail "$name: the capture at nata's router did not get the marker SYN to open1:9"
	kill -INT "$CAPTURE_PID" 2>/dev/null || true
	wait_exit "$CAPTURE_PID" 10 || true
}

probe probe-default ""
[ "$(count "$LINES" probe-default)" -eq 0 ] ||
	fail "qcg-probe, default policy: its lines crossed nata's router in clear"
[ "$(count 'qcg/1-tls' probe-default)" -gt 0 ] ||
	fail "qcg-probe, default policy: no connection asked for TLS at nata's router"
python3 "$CHECK" encryption "$WORK/probe-default.json" tls ||
	fail "qcg-probe nata1 -> open, default policy: a test connection was not encrypted"
note "qcg-probe nata1 -> open, default policy: chosen $(python3 "$CHECK" field "$WORK/probe-default.json" peers.0.chosen)" \
	"$(python3 "$CHECK" field "$WORK/probe-default.json" peers.0.chosen_encryption), every connection TLS;" \
	"qcg/1-tls (the ClientHello's ALPN) in $(count 'qcg/1-tls' probe-default) captured lines at nata's router, no probe line"

probe probe-never never
python3 "$CHECK" encryption "$WORK/probe-never.json" plain ||
	fail "qcg-probe --encrypt never: a test connection was not plain"
n=$(count "$LINES" probe-never)
[ "$n" -gt 0 ] || fail "qcg-probe --encrypt never: the capture holds no probe line (the check cannot fail)"
note "qcg-probe nata1 -> open, --encrypt never: plain, $n probe lines captured at nata's router"
