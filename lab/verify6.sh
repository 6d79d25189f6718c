# shellcheck shell=bash
# qcg-lab verify's IPv6 checks (sourced by verify.sh): every node with an IPv6
# address reaches the broker and the proxy over IPv6 as itself (no NAT66); the
# internet gets in over IPv6 only where a site lets it (an open site, a site's
# open range); the delay line delays IPv6 as it does IPv4.

# Nodes of the sites with an IPv6 address (not the broker and the proxy).
v6_nodes() {
	local n
	for n in "${NODES[@]}"; do
		[[ " ${HOSTS[*]} " == *" $n "* ]] && continue
		[ -n "${NODE_IP6[$n]:-}" ] && echo "$n"
	done
}

# Whether the internet may open a connection to NODE over IPv6: its site is
# open, or the node is in the site's open range.
v6_open() {
	local s=${NODE_SITE[$1]} open6
	[ "${SITE_KIND[$s]}" = open ] && return 0
	open6=${SITE_OPEN6[$s]:-}
	[ -n "$open6" ] && [[ ${NODE_IP6[$1]} == "${open6%/*}"* ]]
}

check_reach6() {
	local n h detail ok seen
	for n in $(v6_nodes); do
		for h in "${HOSTS[@]}"; do
			probe_bg "reach6-$n-$h" "$n" "${NODE_IP6[$h]}" "$(vport "$h")" "$T_OK"
		done
	done
	probes_wait
	for n in $(v6_nodes); do
		ok=1 detail=""
		for h in "${HOSTS[@]}"; do
			seen=$(probe_out "reach6-$n-$h")
			if ! probe_ok "reach6-$n-$h"; then
				ok=0 detail+="${detail:+; }$h: $seen"
			elif [ "${seen%:*}" != "${NODE_IP6[$n]}" ]; then
				ok=0 detail+="${detail:+; }$h sees $seen, not ${NODE_IP6[$n]} (an IPv6 NAT?)"
			else
				detail+="${detail:+; }$h sees $seen"
			fi
		done
		[ $ok = 1 ] && report PASS reach6 "$n -> $detail" || report FAIL reach6 "$n -> $detail"
	done
}

# From the broker over IPv6 to every node's IPv6 address: in where the site
# lets it in, blocked (dropped) everywhere else.
check_inbound6() {
	local n
	for n in $(v6_nodes); do
		if v6_open "$n"; then
			probe_bg "in6-$n" broker "${NODE_IP6[$n]}" "$(vport "$n")" "$T_OK"
		else
			probe_bg "in6-$n" broker "${NODE_IP6[$n]}" "$(vport "$n")" "$T_BLOCK"
		fi
	done
	probes_wait
	for n in $(v6_nodes); do
		if v6_open "$n"; then
			probe_ok "in6-$n" &&
				report PASS inbound6 "$n: the broker connects to ${NODE_IP6[$n]} (open over IPv6)" ||
				report FAIL inbound6 "$n: the broker cannot connect to ${NODE_IP6[$n]}, which its site lets in: $(probe_out "in6-$n")"
		else
			probe_ok "in6-$n" &&
				report FAIL inbound6 "$n: the broker opened ${NODE_IP6[$n]}: the site's IPv6 firewall lets it in" ||
				report PASS inbound6 "$n: the broker's connection to ${NODE_IP6[$n]} blocked ($(probe_out "in6-$n"))"
		fi
	done
}

check_ipv6() {
	if [ -z "$(v6_nodes)" ]; then
		report PASS ipv6 "no node has an IPv6 address (not checked)"
		return
	fi
	check_reach6
	check_inbound6
	# The delay line takes both families from one queue.
	[ -n "${NODE_IP6[nata1]:-}" ] && check_rtt rtt-inet6 nata1 broker 1 "${NODE_IP6[broker]}"
	return 0
}
