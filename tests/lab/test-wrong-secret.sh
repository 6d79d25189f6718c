#!/usr/bin/env bash
# lab-wrong-secret: a process that does not hold the job's secret cannot use the
# job: its connect to a published rank fails with "permission denied" (the broker
# refuses its publish), from another site and from the listener's own site, and the
# listener still serves the right secret afterwards.
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
scratch
JOB=$(new_job wrong-secret)

cat_listen open1 0 listen --timeout 30
listener=$BG_PID

# denied NODE RANK
denied() {
	local rc=0 t0 elapsed wrong
	# As strong as the right one (a weak one is refused before it is tried).
	wrong=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
	t0=$(ms)
	"$LAB" exec "$1" -- env QCG_JOB_SECRET="$wrong" qcg-cat --job "$JOB" --rank "$2" \
		--timeout 10 connect 0 </dev/null >"$WORK/denied-$1.err" 2>&1 || rc=$?
	elapsed=$(($(ms) - t0))
	cat "$WORK/denied-$1.err"
	[ "$rc" -eq 1 ] || fail "$1: a wrong secret gave exit $rc, not 1"
	grep -q "^qcg-cat: connect to rank 0: permission denied.*denied" "$WORK/denied-$1.err" ||
		fail "$1: a wrong secret did not give a denied error"
	[ "$elapsed" -lt 3000 ] || fail "$1: the refusal took $elapsed ms (timeout 10 s)"
	note "$1: wrong secret refused in $elapsed ms"
}

denied nata1 1
denied open2 2
kill -0 "$listener" 2>/dev/null || fail "the listener died"
grep -q '"event":"accepted"' "$WORK/listen.err" && fail "the listener accepted a wrong-secret peer"

echo "the right secret" >"$WORK/in"
"$LAB" exec nata1 -- qcg-cat --job "$JOB" --rank 1 --json --timeout 10 connect 0 \
	<"$WORK/in" >/dev/null 2>"$WORK/connect.err" ||
	{ cat "$WORK/connect.err"; fail "the right secret was refused after the wrong ones"; }
wait_exit "$listener" 10 || { cat "$WORK/listen.err"; fail "the listener failed"; }
cmp "$WORK/in" "$WORK/listen.out" || fail "the data differ"
note "the listener then served nata1 with the right secret"
