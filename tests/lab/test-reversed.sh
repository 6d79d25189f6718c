#!/usr/bin/env bash
# lab-reversed: the open site's node connects to nodes no connection can reach,
# behind a NAT and behind a symmetric NAT.  The broker plans `reversed`: the
# target's helper connects out, through its own router, to open1's listener
# and hands the socket to the target process; 64 MiB arrive intact and both
# qcg-cat ends report reversed.
#
#   open1 198.51.100.11 (ranks 1, 3: connect)
#        ^                               ^
#        |  connect-back through NAT     |  connect-back through symmetric NAT
#   nata1 198.18.1.11 (rank 0: listen)   sym1 198.18.3.11 (rank 2: listen)
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
scratch
JOB=$(new_job reversed)
size=$((64 << 20))
head -c "$size" /dev/urandom >"$WORK/in"

# transfer FROM TO TECHNIQUE: 64 MiB FROM -> TO, with TECHNIQUE on both ends.
transfer() {
	local from=$1 to=$2 tech=$3 t0
	t0=$(ms)
	cat_transfer "$from" "$to" "$1-$2"
	[ "$XFER_TECH" = "$tech" ] || fail "$from -> $to: the connecting side used $XFER_TECH, not $tech"
	[ "$(echo "$XFER_ACCEPTED" | json_field technique)" = "$tech" ] ||
		fail "$from -> $to: the accepting side says $(echo "$XFER_ACCEPTED" | json_field technique), not $tech"
	[ "$(echo "$XFER_ACCEPTED" | json_field peer)" = "$XFER_FROM_RANK" ] ||
		fail "$from -> $to: accepted $XFER_ACCEPTED"
	[ "$(echo "$XFER_SENT" | json_field bytes)" = "$size" ] || fail "$from -> $to: sent $XFER_SENT"
	note "$from -> $to: 64 MiB identical, $tech on both ends, setup $XFER_SETUP_US us, $(($(ms) - t0)) ms"
}

transfer open1 nata1 reversed
transfer open1 sym1 reversed
