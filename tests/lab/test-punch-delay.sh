#!/usr/bin/env bash
# lab-punch-delay: hole punching across WAN links with delay, as on a real
# network (`up --rejecting --v6 --delay 5`: 5 ms each way on every WAN link).
#
# The opener of a punch sends its first SYN with a TTL that lets it expire
# one router past its own site; the router's time-exceeded then comes back
# 10 ms later, after the connect() call has returned, and the kernel takes
# it as the end of that connect.  Before the opener's socket ignored it
# (PUNCH_MIN_TTL), every punch over IPv4 and IPv6 fell back to the proxy at
# this delay (issue 33).  Checks, as a user would: 1 MiB arrives intact over
# a hole-punched connection for each pair below (firewall, NAT, resetting
# NAT, ICMP-answering firewall, and IPv6 through a resetting firewall), on
# both ends' qcg-cat --json; and one of the two helpers logs its punch
# connected as the opener of the TTL-limited variant (its own socket met the
# peer's SYN).  Puts the plain five-site lab back.
. "$(dirname "$0")/test-lib.sh"
require_lab
require_delayline
scratch
up_back() { "$LAB" up >/dev/null 2>&1 || true; }
trap 'scratch_cleanup; up_back' EXIT

"$LAB" up --rejecting --v6 --delay 5 >"$WORK/up.out" 2>&1 ||
	{ cat "$WORK/up.out"; fail "up --rejecting --v6 --delay 5 failed"; }
require_services
note "$(tail -n 1 "$WORK/up.out")"

JOB=$(new_job punchdelay)
size=$((1 << 20))
head -c "$size" /dev/urandom >"$WORK/in"

# log_lines NODE: lines in NODE's helper log so far.
log_lines() { wc -l <"$LAB_STATE/log/helper-$1.log"; }

# punched FROM TO TO_FAR FROM_FAR: FROM -> TO hole-punched, the opener's
# TTL-limited first SYN's socket connected.
punched() {
	local from=$1 to=$2 nf nt opener
	nf=$(log_lines "$from") nt=$(log_lines "$to")
	cat_transfer "$from" "$to"
	xfer_expect "$from" "$to" holepunch "$size" "$3" "$4"
	opener=$( (tail -n +$((nf + 1)) "$LAB_STATE/log/helper-$from.log" &&
		tail -n +$((nt + 1)) "$LAB_STATE/log/helper-$to.log") |
		grep -aEo "punch from port [0-9]+ to [^ ]+ connected \(connect\) in [0-9]+ ms.*first SYN with TTL [0-9]+ \([0-9]+ hops to the reflector\), opener" |
		tail -n 1)
	[ -n "$opener" ] || fail "$from -> $to: neither helper logs the opener's socket connected"
	note "$from -> $to: holepunch, setup $((XFER_SETUP_US / 1000)) ms; $(cut -d' ' -f1-10 <<<"$opener")"
}

punched fw1 natb1 "203.0.113.82:" "198.51.100.75:"
punched natb1 nata1 "203.0.113.66:" "203.0.113.82:"
punched rst1 natb1 "203.0.113.82:" "203.0.113.114:"
punched fw1 rst1 "203.0.113.114:" "198.51.100.75:"
punched unr1 natb1 "203.0.113.82:" "198.51.100.139:"
punched nata1 rst1 "[2001:db8:4::11]:" "[2001:db8:3::11]:"
