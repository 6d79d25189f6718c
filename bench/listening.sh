# shellcheck shell=bash
# listening FILE: waits, at most 10 s, for "listening" in FILE (a qcg-cat
# listener's stderr); 1, with a line on stderr, when it does not come.
# Sourced by the lab benches that time one qcg-cat connect after another.
listening() {
	for _ in $(seq 1 200); do grep -q listening "$1" 2>/dev/null && return 0; sleep 0.05; done
	echo "the listener did not start: $(cat "$1")" >&2
	return 1
}

# cat_once FROM TO RTO RFROM: one qcg-cat connection of job $JOB, rank RFROM on
# node FROM to rank RTO listening on node TO (1 byte, 60 s bounds); prints the
# connecting side's "sent" JSON line, nothing when it failed ($WORK/c holds its
# output, $WORK/wall the connect's wall time in ms, the listener's start left
# out).  Needs $LAB, $JOB and $WORK.
cat_once() {
	local from=$1 to=$2 rto=$3 rfrom=$4 lpid t0
	"$LAB" exec "$to" -- qcg-cat --job "$JOB" --rank "$rto" --json --timeout 60 listen \
		>/dev/null 2>"$WORK/l" &
	lpid=$!
	listening "$WORK/l" || true # the connect's failure is the result
	t0=$(date +%s%3N)
	echo x | "$LAB" exec "$from" -- qcg-cat --job "$JOB" --rank "$rfrom" --json \
		--timeout 60 connect "$rto" 2>&1 >/dev/null | tee "$WORK/c" | grep '"sent"' || true
	echo $(($(date +%s%3N) - t0)) >"$WORK/wall"
	kill "$lpid" 2>/dev/null || true
	wait "$lpid" 2>/dev/null || true
}
