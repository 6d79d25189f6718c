# shellcheck shell=bash disable=SC2154 # $out is the caller's: the last answer
# tests/lib/soap-call.sh: reading the answer of soap-call (tests/lib/soap_call.c,
# the tests' one SOAP client), sourced by the broker's and the frontend's test
# libraries.  The answer is in $out: "ok" and NAME=VALUE lines, or one
# "fault SUBCODE: TEXT" or "unreachable: TEXT" line.
#
#   field NAME             the value of NAME (plan.status, counter.lookups);
#                          empty when absent
#   out_has LINE...        $out holds each LINE as a whole line
#   out_like GLOB...       each GLOB matches a whole line of $out
#   item LIST NAME VALUE   the index of LIST's first element whose NAME is VALUE
#                          (item peer name fw: 2 when peer.2.name=fw)
#   has_item LIST NAME=VALUE...   an element of LIST has each NAME=VALUE
#                          (an absent NAME counts as empty)

field() {
	awk -v k="$1=" 'index($0, k) == 1 { print substr($0, length(k) + 1); exit }' <<<"$out"
}

out_has() {
	local l
	for l in "$@"; do
		grep -qxF -- "$l" <<<"$out" || return 1
	done
}

out_like() {
	local p l
	for p in "$@"; do
		while IFS= read -r l; do
			# shellcheck disable=SC2053 # $p is a glob on purpose
			[[ $l == $p ]] && continue 2
		done <<<"$out"
		return 1
	done
}

item() {
	awk -v p="$1." -v s=".$2=$3" 'index($0, p) == 1 {
		i = substr($0, length(p) + 1); n = index(i, ".")
		if (n > 0 && substr(i, n) == s) { print substr(i, 1, n - 1); exit }
	}' <<<"$out"
}

has_item() {
	local list=$1 n i kv
	shift
	n=$(field "$list.count")
	for ((i = 0; i < ${n:-0}; i++)); do
		for kv in "$@"; do
			[[ $(field "$list.$i.${kv%%=*}") == "${kv#*=}" ]] || continue 2
		done
		return 0
	done
	return 1
}
