# shellcheck shell=bash
# own_netns VAR ARG...: unless VAR is set, runs the calling script again
# with ARG... in a network namespace of its own, lo up and VAR=1 (exec:
# its iptables rules, addresses and sysctls go with the namespace, and
# its fixed ports meet no one else's); without the privilege for one,
# exits 77 (skipped).  Sourced by the tests that change their network.
own_netns() {
	local var=$1
	shift
	[[ -z ${!var:-} ]] || return 0
	if [[ $(id -u) -ne 0 ]] || ! unshare -n true 2>/dev/null; then
		echo "skipped: needs root (a network namespace of its own)"
		exit 77
	fi
	exec env "$var=1" unshare -n bash -c 'ip link set lo up && exec bash "$0" "$@"' "$0" "$@"
}
