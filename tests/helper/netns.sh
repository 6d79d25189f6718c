# shellcheck shell=bash
# The namespaces of the helper's netns tests (punch-ns.sh, punch6-ns.sh,
# punch-reject-ns.sh), each named $P<name> with the test's P (the project's
# prefix and its pid), made and removed only here:
#   new_ns NAME        a namespace, lo up; IPv6 off unless NS_IPV6=yes (then
#                      without duplicate address detection)
#   in_ns NAME CMD...  CMD inside it
#   ns_remove          kills what runs in each namespace made, deletes them
#                      (from the test's EXIT trap, so also on a failure)
made_ns=()
in_ns() {
	local ns=$1
	shift
	ip netns exec "$P$ns" "$@"
}
new_ns() {
	ip netns add "$P$1" || { echo "cannot create namespace $P$1"; exit 1; }
	made_ns+=("$P$1")
	in_ns "$1" ip link set lo up
	if [ "${NS_IPV6:-}" = yes ]; then
		# No duplicate address detection on the links made later: until a
		# link-local address has passed it, neighbour discovery over that
		# link waits (a second or two), and so would the first packets.
		in_ns "$1" sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
	else
		in_ns "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
	fi
}
ns_remove() {
	local ns
	for ns in "${made_ns[@]}"; do ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null; done
	for ns in "${made_ns[@]}"; do ip netns del "$ns" 2>/dev/null; done
}
