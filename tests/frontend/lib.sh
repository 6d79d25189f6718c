# shellcheck shell=bash
# Shared by the frontend's shell tests: a throw-away CA, a real qcg-broker and
# qcg-frontend on 127.0.0.1, calls with soap-call; pass/fail/die (counted
# in $failed), wait_log, wait_gone and stop_children come from
# tests/lib/common.sh, reading the answer (field, out_has, has_item) from
# tests/lib/soap-call.sh.
# Needs QCG_CERTS, QCG_BROKER, QCG_FRONTEND, QCG_SOAP_CALL (set by ctest).

set -euo pipefail
export LC_ALL=C

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
# shellcheck source=tests/lib/soap-call.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/soap-call.sh"

: "${QCG_CERTS:?}" "${QCG_BROKER:?}" "${QCG_FRONTEND:?}" "${QCG_SOAP_CALL:?}"
need_commands openssl

work=$(mktemp -d "${TMPDIR:-/tmp}/qcg-frontend-test.XXXXXX")
certs=$work/certs
ca=$certs/ca.crt
broker_pid=
frontend_pid=
frontend_pids=

# What a failed check shows besides its line: the reply it looked at.
fail_details() {
	if [[ -n ${out:-} ]]; then printf '%s\n' "$out" | sed 's/^/     | /'; fi
}

# Stops the daemons (bounded); a failed check leaves $work in place and
# shows the last lines of every log.
cleanup() {
	local f
	# shellcheck disable=SC2086 # a list of pids
	stop_children $frontend_pids "$broker_pid"
	if [[ $failed -ne 0 ]]; then
		for f in "$work"/*.log; do
			[[ -e $f ]] || continue
			echo "--- $f"
			tail -n 25 "$f"
		done
	fi
	if [[ $failed -ne 0 || -n ${KEEP:-} ]]; then
		echo "logs kept in $work"
	else
		rm -rf -- "$work"
	fi
}
trap cleanup EXIT

make_certs() {
	local leaf
	"$QCG_CERTS" --dir "$certs" init >/dev/null
	"$QCG_CERTS" --dir "$certs" issue broker --san 127.0.0.1 >/dev/null
	for leaf in "$@"; do
		# helpers never serve: no SAN needed (and the warning about it is expected)
		"$QCG_CERTS" --dir "$certs" issue $leaf --san 127.0.0.1 >/dev/null 2>&1
	done
}

# start_broker PORT [LOGNAME [ARGS...]]: ARGS go to qcg-broker.
start_broker() {
	broker_port=$1
	local log=$work/${2:-broker}.log
	shift $(($# < 2 ? $# : 2))
	"$QCG_BROKER" --listen 127.0.0.1 --port "$broker_port" --ca "$ca" \
		--cert "$certs/broker-broker.pem" --log-level debug "$@" >"$log" 2>&1 &
	broker_pid=$!
	broker_url=https://127.0.0.1:$broker_port/
	wait_log "$log" "serving on port $broker_port" "$broker_pid" || die "the broker did not start"
}

# start_frontend CLUSTER PORT ARGS...: its log is $work/frontend-CLUSTER.log;
# frontend_pid and frontend_url (where `call` goes) are the last one started.
start_frontend() {
	local cluster=$1
	frontend_port=$2
	shift 2
	"$QCG_FRONTEND" --listen 127.0.0.1 --port "$frontend_port" --ca "$ca" \
		--cert "$certs/frontend-$cluster.pem" --broker "$broker_url" --log-level debug \
		"$@" >"$work/frontend-$cluster.log" 2>&1 &
	frontend_pid=$!
	frontend_pids="$frontend_pids $frontend_pid"
	frontend_url=https://127.0.0.1:$frontend_port/
	wait_log "$work/frontend-$cluster.log" "registered cluster $cluster" "$frontend_pid" ||
		die "the frontend of $cluster did not register with the broker"
}

# stop_frontend PID LOG: SIGTERM, then a clean exit (status 0, "stopped"
# logged) within 15 s; prints how long it took.
stop_frontend() {
	local pid=$1 log=$2 t0 status=0
	kill -TERM "$pid"
	t0=$(now_ms)
	wait_gone "$pid" 150 || return 1
	wait "$pid" || status=$?
	# shellcheck disable=SC2034 # the tests print it
	stop_ms=$(($(now_ms) - t0))
	[[ $status -eq 0 ]] && grep -q "stopped" "$log"
}

# soap_call URL CERTNAME OPERATION FIELD=VALUE...: soap-call's answer in
# $out, its exit status in $rc.
soap_call() {
	local url=$1 cert=$2
	shift 2
	rc=0
	out=$("$QCG_SOAP_CALL" --url "$url" --ca "$ca" --cert "$certs/$cert.pem" "$@" 2>&1) || rc=$?
}

# call CERTNAME OPERATION FIELD=VALUE...: soap_call to the frontend.
call() { soap_call "$frontend_url" "$@"; }

call_broker() { soap_call "$broker_url" "$@"; }

# counter URL NAME: one counter from a service's stats operation.
counter() {
	local out rc
	soap_call "$1" helper-nata-nata1 stats
	if [[ $rc -ne 0 ]]; then
		echo "stats from $1 failed: $out" >&2
		echo -1
		return
	fi
	field "counter.$2"
}

# expect_ok DESCRIPTION: $rc is 0.
expect_ok() {
	if [[ $rc -eq 0 ]]; then pass "$1"; else fail "$1"; fi
}

# expect_fault SUBCODE DESCRIPTION [TEXT-REGEX]
expect_fault() {
	if [[ $rc -eq 1 && $out == "fault $1:"* ]] &&
		{ [[ -z ${3:-} ]] || grep -qE -- "$3" <<<"$out"; }; then
		pass "$2"
	else
		fail "$2 (wanted fault $1${3:+ matching /$3/})"
	fi
}

now_ms() { date +%s%3N; }

finish() {
	# The frontend's logs only: the broker is tested by its own suite.
	if grep -lE "Sanitizer|runtime error" "$work"/frontend-*.log 2>/dev/null; then
		fail "sanitizer reports in the frontend logs above"
	fi
	if [[ $failed -ne 0 ]]; then
		echo "some checks failed"
		exit 1
	fi
	echo "all checks passed"
}
