# shellcheck shell=bash
# listening FILE: waits, at most 10 s, for "listening" in FILE (a qcg-cat
# listener's stderr); 1, with a line on stderr, when it does not come.
# Sourced by the lab benches that time one qcg-cat connect after another.
listening() {
	for _ in $(seq 1 200); do grep -q listening "$1" 2>/dev/null && return 0; sleep 0.05; done
	echo "the listener did not start: $(cat "$1")" >&2
	return 1
}
