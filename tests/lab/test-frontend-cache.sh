#!/usr/bin/env bash
# lab-frontend-cache: the nata frontend answers a second lookup of the same peer
# from its cache; the broker sees one lookup only.
#
#   nata1 rank 1 --lookup--> frontend nata --miss--> broker --plan--> (cached)
#   nata2 rank 2 --lookup--> frontend nata --hit (no broker call)
#   both then connect directly to open1, rank 0 (qcg-lab-accept: two connections)
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
[ -x "$LAB_ACCEPT" ] || die "qcg-lab-accept is not built: $LAB_ACCEPT"
scratch
JOB=$(new_job frontend-cache)

counters() {
	B=$(broker_stat lookups)
	C=$(frontend_stat nata lookups_from_cache)
	F=$(frontend_stat nata lookups_forwarded)
	[ -n "$B" ] && [ -n "$C" ] && [ -n "$F" ] || fail "no counters from the broker or nata's frontend"
}

BG_NAME=accept run_bg open1 env QCG_JOB="$JOB" QCG_RANK=0 "$LAB_ACCEPT" 2 20
acceptor=$BG_PID
wait_published "$acceptor" "$WORK/accept.out" '^listening' "rank 0 on open1"

# connect_from NODE RANK
connect_from() {
	echo "from $1 rank $2" >"$WORK/data-$2"
	"$LAB" exec "$1" -- qcg-cat --job "$JOB" --rank "$2" --json --timeout 10 connect 0 \
		<"$WORK/data-$2" >/dev/null 2>"$WORK/connect-$2.err" ||
		{ cat "$WORK/connect-$2.err"; fail "$1 rank $2 -> open1 rank 0 failed"; }
}

counters
b0=$B c0=$C f0=$F
connect_from nata1 1
counters
b1=$B c1=$C f1=$F
connect_from nata2 2
counters
b2=$B c2=$C f2=$F
note "broker lookups $b0 -> $b1 -> $b2; nata frontend from cache $c0 -> $c1 -> $c2, forwarded $f0 -> $f1 -> $f2"

[ "$b1" -eq $((b0 + 1)) ] && [ "$f1" -eq $((f0 + 1)) ] && [ "$c1" -eq "$c0" ] ||
	fail "first lookup: expected one broker lookup, forwarded by the frontend, no cache hit"
[ "$b2" -eq "$b1" ] && [ "$f2" -eq "$f1" ] && [ "$c2" -eq $((c1 + 1)) ] ||
	fail "second lookup: expected a frontend cache hit and no broker lookup"

wait_exit "$acceptor" 10 || { cat "$WORK/accept.err"; fail "open1 did not accept two connections"; }
[ "$(grep -c '^accepted .* direct ' "$WORK/accept.out")" -eq 2 ] ||
	fail "open1 did not accept two direct connections: $(cat "$WORK/accept.out")"
grep -qx "accepted 1 direct $(wc -c <"$WORK/data-1")" "$WORK/accept.out" &&
	grep -qx "accepted 2 direct $(wc -c <"$WORK/data-2")" "$WORK/accept.out" ||
	fail "open1 did not get both ranks' data: $(cat "$WORK/accept.out")"
note "the second lookup was answered by nata's frontend; open1 accepted ranks 1 and 2"
