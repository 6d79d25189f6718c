#!/usr/bin/env bash
#
# A renewed certificate without a restart (issue 17): the real broker,
# frontend and helper on 127.0.0.1, each started from a copy of its
# certificate file ($work/live), which the test replaces and then sends
# SIGHUP, as an administrator would (docs/admin.md §9, Rotation).
#
# - server side, the broker: a new connection (openssl s_client) sees the new
#   certificate's serial, a connection opened before the reload still
#   answers, a session saved before it is not resumed (that would skip the
#   certificate); a broken new set (file missing, key of another
#   certificate, another CA, expired, a helper's certificate, another
#   service's) is refused with an error line naming the file and why, and
#   the serial stays; a rotation half done (new CA and CRL with a broken
#   certificate; new CA with the old CRL) changes nothing, the CRL included;
#   a CA file with a second CA lets that CA's clients in, and frontend siteA,
#   which still trusts the old CA only, refuses the broker then;
# - client side, the helper: its connection to the frontend stays across
#   the reload, and once that connection is cut (ss -K) its new one presents
#   the new certificate (the frontend's debug line names the serial); a
#   certificate of another node is refused;
# - client side, the frontend's pool of contexts towards the broker: with a
#   broken key in its file and the reload refused, a context made then (a
#   second call relayed while the first one waits for the stopped broker)
#   still connects, with the certificate in force; after a good reload a
#   new context presents the new one (the broker's debug line names the
#   serial).
#
# Ports 27900-27909 belong to this test.  Exit status: 0 passed, 1 failed,
# 77 skipped.

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)

log_lines=30 logs_var=QCG_TEST_LOGS
# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"
# shellcheck source=../lib/log_sample.sh
. "$src/tests/lib/log_sample.sh"

call=$build/tests/lib/soap-call
need_built "$helper" "$frontend" "$broker" "$call"
need_commands openssl ss mkfifo ps
grid_workdir test-reload

port_b=27900 port_c1=27901
grid_ca "frontend siteA" "helper siteA/n1" "helper siteA/n2" "helper siteA/n3" "helper siteA/n4"
"$certs" --dir "$ca" crl >>"$work/certs.log" 2>&1 || { cat "$work/certs.log"; exit 1; }
grid_ports_free "$port_b" "$port_c1"

# What the daemons load: copies, replaced by the test.
live=$work/live
mkdir "$live"
cp "$ca/broker-broker.pem" "$ca/frontend-siteA.pem" "$ca/helper-siteA-n1.pem" "$ca/ca.crt" \
	"$ca/crl.pem" "$live/"
"$broker" --listen 127.0.0.1 --port "$port_b" --ca "$live/ca.crt" --cert "$live/broker-broker.pem" \
	--crl "$live/crl.pem" --log-level debug >>"$work/broker.log" 2>&1 &
broker_pid=$!
pids+=("$broker_pid")
broker_url=https://127.0.0.1:$port_b/
wait_for "the broker on port $port_b" 100 listening "$port_b" || exit 1
"$frontend" --listen 127.0.0.1 --port "$port_c1" --broker "$broker_url" --cluster siteA --kind open \
	--public-address 127.0.0.1 --ca "$live/ca.crt" --cert "$live/frontend-siteA.pem" \
	--crl "$live/crl.pem" --log-level debug >>"$work/frontend-siteA.log" 2>&1 &
frontend_pid=$!
pids+=("$frontend_pid")
wait_for "the frontend on port $port_c1" 100 listening "$port_c1" || exit 1

logged() { grep -qF -- "$2" "$1"; }
# count FILE TEXT: how many lines of FILE hold TEXT.
count() { grep -cF -- "$2" "$1" || true; }
# more_than N FILE TEXT: FILE holds TEXT on more than N lines.
more_than() { (($(count "$2" "$3") > $1)); }

# expect_log DESC FILE TEXT [N]: waits (bounded) for TEXT in FILE on more
# than N lines (0).
expect_log() {
	if wait_for "$1" 150 more_than "${4:-0}" "$2" "$3"; then
		pass "$1"
	else
		{ echo "no new \"$3\" in $2:"; tail -n 15 "$2"; } >"$out"
		fail "$1"
	fi
}

serial_of() { openssl x509 -noout -serial -in "$1" | sed 's/^serial=//'; }

# broker_serial: the serial of the certificate a new TLS connection to the
# broker sees (the client's certificate: $client_pem, else frontend siteA's).
broker_serial() {
	openssl s_client -connect "127.0.0.1:$port_b" -cert "${client_pem:-$ca/frontend-siteA.pem}" \
		-CAfile "$ca/ca.crt" </dev/null 2>/dev/null | openssl x509 -noout -serial 2>/dev/null |
		sed 's/^serial=//'
}

# check_serial DESC WANT: a new connection to the broker sees serial WANT.
check_serial() {
	local got
	got=$(broker_serial)
	if [[ $got == "$2" ]]; then
		pass "$1"
	else
		echo "serial '$got', expected '$2'" >"$out"
		fail "$1"
	fi
}

# outcomes: how many reloads the broker has logged (done or refused).
outcomes() { grep -cE "reloaded certificate|certificate not reloaded" "$work/broker.log" || true; }
outcome_after() { (($(outcomes) > $1)); }
# hup_broker: SIGHUP, then waits (bounded) for the reload's outcome.
reloads=0
hup_broker() {
	local n
	n=$(outcomes)
	kill -HUP "$broker_pid"
	wait_for "the broker's reload" 150 outcome_after "$n" || true
	reloads=$((reloads + 1))
}

# --- server side: the broker -----------------------------------------------

old_b=$(serial_of "$ca/broker-broker.pem")
check_serial "a connection sees the broker's first certificate" "$old_b"
# A session to resume later, if the broker gives one: its ticket comes
# before the answer to a request.
printf 'GET /wsdl HTTP/1.1\r\nHost: broker\r\nConnection: close\r\n\r\n' |
	openssl s_client -quiet -connect "127.0.0.1:$port_b" -cert "$ca/frontend-siteA.pem" \
		-CAfile "$ca/ca.crt" -sess_out "$work/session.pem" >/dev/null 2>&1 || true

# The renewal, made before the live connection opens (a request must follow
# its predecessor within the server's 10 s keep-alive).
"$certs" --dir "$ca" issue broker --san 127.0.0.1 --force >>"$work/certs.log" 2>&1 ||
	fail "qcg-certs issue broker --force"
new_b=$(serial_of "$ca/broker-broker.pem")

# A connection opened before the reload: one request now, one after.
mkfifo "$work/live.in"
openssl s_client -quiet -connect "127.0.0.1:$port_b" -cert "$ca/frontend-siteA.pem" \
	-CAfile "$ca/ca.crt" <"$work/live.in" >"$work/live.out" 2>"$work/live.err" &
pids+=("$!")
exec 3>"$work/live.in"
# (A connection the broker closed fails the check below, not the script.)
trap '' PIPE
get_wsdl() { printf 'GET /wsdl HTTP/1.1\r\nHost: broker\r\n\r\n' >&3 2>/dev/null || true; }
get_wsdl
wait_for "the live connection's first answer" 100 more_than 0 "$work/live.out" "HTTP/1.1 200" ||
	fail "the live connection's first answer"

cp "$ca/broker-broker.pem" "$live/broker-broker.pem"
hup_broker
expect_log "the broker logs the new certificate" "$work/broker.log" \
	"reloaded certificate $live/broker-broker.pem: broker broker, serial $new_b"
get_wsdl
if wait_for "the live connection's second answer" 100 more_than 1 "$work/live.out" "HTTP/1.1 200"; then
	pass "a connection opened before the reload still answers"
else
	cp "$work/live.err" "$out"
	fail "a connection opened before the reload still answers"
fi
exec 3>&-
check_serial "a new connection sees the renewed certificate" "$new_b"
if [[ -s $work/session.pem ]]; then
	resumed=$(openssl s_client -connect "127.0.0.1:$port_b" -cert "$ca/frontend-siteA.pem" \
		-CAfile "$ca/ca.crt" -sess_in "$work/session.pem" </dev/null 2>&1 | grep -E '^(New|Reused),' || true)
else
	resumed="New, no session was given"
fi
if [[ $resumed == New,* ]]; then
	pass "a session saved before the reload is not resumed"
else
	echo "s_client: '$resumed'" >"$out"
	fail "a session saved before the reload is not resumed"
fi

# refused DESC FILE-CONTENT-CMD REASON: the broker's file replaced (by CMD),
# SIGHUP: an error line names the file and REASON, the serial stays.
refused() {
	local desc=$1 make=$2 reason=$3
	eval "$make"
	hup_broker
	expect_log "$desc: refused with an error line" "$work/broker.log" \
		"error reload_one: SIGHUP: certificate not reloaded: $reason"
	check_serial "$desc: the serial stays" "$new_b"
}

other=$work/other-ca
if ! { "$certs" --dir "$other" init && "$certs" --dir "$other" issue broker --san 127.0.0.1 &&
	"$certs" --dir "$other" issue frontend c9 --san 127.0.0.1; } >>"$work/certs.log" 2>&1; then
	fail "a second CA"
fi
# An expired certificate from the grid CA, with the usages qcg-certs gives.
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
	-keyout "$work/expired.key" -subj "/O=qcg-connect/OU=broker/CN=broker" \
	-out "$work/expired.csr" >>"$work/certs.log" 2>&1
printf 'extendedKeyUsage = serverAuth, clientAuth\nsubjectAltName = IP:127.0.0.1\n' >"$work/expired.ext"
# Valid from two days ago to yesterday.  OpenSSL 3.0 (Debian 12) takes
# -days -1 for that; 3.5 (Debian 13) refuses it ("end date before start
# date") and has -not_before/-not_after instead, which 3.0 lacks.
expired_dates=(-days -1)
if openssl x509 -help 2>&1 | grep -q -- -not_after; then
	expired_dates=(-not_before "$(date -u -d '2 days ago' +%Y%m%d%H%M%SZ)"
		-not_after "$(date -u -d '1 day ago' +%Y%m%d%H%M%SZ)")
fi
openssl x509 -req -in "$work/expired.csr" -CA "$ca/ca.crt" -CAkey "$ca/ca.key" -CAcreateserial \
	"${expired_dates[@]}" -extfile "$work/expired.ext" -out "$work/expired.crt" >>"$work/certs.log" 2>&1
good=$work/broker-good.pem
cp "$live/broker-broker.pem" "$good"
lb=$live/broker-broker.pem

refused "a missing file" "rm -f '$lb'" "cannot read $lb: No such file or directory"
refused "the key of another certificate" \
	"cat '$ca/broker-broker.crt' '$ca/frontend-siteA.key' >'$lb'" "the key in $lb is not the one of its certificate"
log_sample --block reload-refused "$work/broker.log:the key in $lb is not"
refused "a certificate of another CA" "cp '$other/broker-broker.pem' '$lb'" \
	"the certificate in $lb does not verify with the CA file $live/ca.crt: unable to get local issuer certificate"
refused "an expired certificate" "cat '$work/expired.crt' '$work/expired.key' >'$lb'" \
	"the certificate in $lb does not verify with the CA file $live/ca.crt: certificate has expired"
refused "a helper's certificate (clientAuth only)" "cp '$ca/helper-siteA-n1.pem' '$lb'" \
	"$lb: its certificate is not for TLS servers (no serverAuth)"
refused "another service's certificate" "cp '$ca/frontend-siteA.pem' '$lb'" \
	"$lb names frontend siteA, not broker broker"

cp "$good" "$lb"
hup_broker
check_serial "the broker still presents its renewed certificate" "$new_b"
if kill -0 "$broker_pid" 2>/dev/null; then
	pass "the broker survives $reloads reloads"
else
	fail "the broker survives $reloads reloads"
fi

# --- client side: the helper -------------------------------------------------

"$helper" --socket "$work/n1.sock" --frontend "https://127.0.0.1:$port_c1/" --cluster siteA --node n1 \
	--address 127.0.0.1 --ports 27902-27903 --ca "$live/ca.crt" --cert "$live/helper-siteA-n1.pem" \
	--crl "$live/crl.pem" >>"$work/n1.log" 2>&1 &
helper_pid=$!
pids+=("$helper_pid")
wait_for "helper siteA/n1 to register" 150 connected "$work/n1.sock" || fail "helper siteA/n1 registers"
old_h=$(serial_of "$ca/helper-siteA-n1.pem")
expect_log "the frontend sees the helper's first certificate" "$work/frontend-siteA.log" \
	"connection from helper siteA/n1 (certificate serial $old_h)"

# helper_ports: the local ports of the connections to the frontend (only
# the helper makes any).
helper_ports() { ss -Htn state established "dport = :$port_c1" | awk '{print $3}' | sort; }
before=$(helper_ports)
"$certs" --dir "$ca" issue helper siteA/n1 --force >>"$work/certs.log" 2>&1 || fail "issue helper siteA/n1 --force"
new_h=$(serial_of "$ca/helper-siteA-n1.pem")
cp "$ca/helper-siteA-n1.pem" "$live/helper-siteA-n1.pem"
kill -HUP "$helper_pid"
expect_log "the helper logs its new certificate" "$work/n1.log" \
	"reloaded certificate $live/helper-siteA-n1.pem: helper siteA/n1, serial $new_h"
after=$(helper_ports)
if [[ -n $before ]] && [[ -z $(comm -23 <(echo "$before") <(echo "$after")) ]] && connected "$work/n1.sock"; then
	pass "the helper's connections to the frontend stay across the reload"
else
	printf 'before:\n%s\nafter:\n%s\n' "$before" "$after" >"$out"
	fail "the helper's connections to the frontend stay across the reload"
fi

n=$(count "$work/frontend-siteA.log" "connection from helper siteA/n1 (certificate serial $new_h)")
ss -K -Htn state established "dport = :$port_c1" >/dev/null 2>&1 || true
expect_log "the helper's next connection presents its new certificate" "$work/frontend-siteA.log" \
	"connection from helper siteA/n1 (certificate serial $new_h)" "$n"
if wait_for "helper siteA/n1 to register again" 150 connected "$work/n1.sock"; then
	pass "the helper is registered again"
else
	fail "the helper is registered again"
fi

cp "$ca/helper-siteA-n2.pem" "$live/helper-siteA-n1.pem"
kill -HUP "$helper_pid"
expect_log "the helper refuses another node's certificate" "$work/n1.log" \
	"certificate not reloaded: $live/helper-siteA-n1.pem names helper siteA/n2, not helper siteA/n1"
n=$(count "$work/frontend-siteA.log" "connection from helper siteA/n1 (certificate serial $new_h)")
ss -K -Htn state established "dport = :$port_c1" >/dev/null 2>&1 || true
expect_log "after a refused reload the helper goes on with the certificate it had" \
	"$work/frontend-siteA.log" "connection from helper siteA/n1 (certificate serial $new_h)" "$n"

# --- client side: the frontend's upstream pool ---------------------------------

# to_broker: the frontend's established connections to the broker (its long
# poll and its pool's contexts).
to_broker() { ss -Htnp state established "dport = :$port_b" | grep -c "pid=$frontend_pid," || true; }
at_least() { (($(to_broker) >= $1)); }
# stopped PID: every thread of PID is stopped (a SIGSTOP takes effect when
# one of them runs: until then another may still answer a request).
stopped() { ! ps -L -o stat= -p "$1" | grep -qv '^T'; }
# relay_calls DESC NODE...: each NODE (a helper of siteA) registers at once
# through the frontend while the broker is stopped, so each relayed call
# holds a context of the pool, and the pool makes the ones it lacks now;
# checks that each context connects (the long poll and one connection per
# call), then lets the broker go on and waits for the answers.
relay_calls() {
	local desc=$1 node cpids=() i=0
	shift
	kill -STOP "$broker_pid"
	wait_for "the broker to stop" 150 stopped "$broker_pid" || fail "$desc: the broker stops"
	for node in "$@"; do
		"$call" --url "https://127.0.0.1:$port_c1/" --ca "$live/ca.crt" \
			--cert "$ca/helper-siteA-$node.pem" registerNode name="$node" address=127.0.0.1 \
			portLow=27904 portHigh=27905 >"$work/call-$node.out" 2>&1 &
		cpids+=("$!")
	done
	if wait_for "$desc" 150 at_least $(($# + 1)); then
		pass "$desc"
	else
		{ ss -Htnp state established "dport = :$port_b"; tail -n 5 "$work/frontend-siteA.log"; } >"$out"
		fail "$desc"
	fi
	kill -CONT "$broker_pid"
	for node in "$@"; do
		wait_exit "${cpids[i]}" 300 || true
		i=$((i + 1))
		if ((rc == 0)) && grep -qx ok "$work/call-$node.out"; then
			pass "$desc: node $node registered"
		else
			cp "$work/call-$node.out" "$out"
			fail "$desc: node $node registered (exit $rc)"
		fi
	done
}

lf=$live/frontend-siteA.pem
old_f=$(serial_of "$ca/frontend-siteA.pem")
# The certificate with a broken key after it.
{
	openssl x509 -in "$ca/frontend-siteA.pem"
	printf -- '-----BEGIN PRIVATE KEY-----\nbroken\n-----END PRIVATE KEY-----\n'
} >"$lf"
kill -HUP "$frontend_pid"
expect_log "the frontend refuses a broken key" "$work/frontend-siteA.log" \
	"certificate not reloaded: $lf holds no private key"
n=$(count "$work/broker.log" "connection from frontend siteA (certificate serial $old_f)")
relay_calls "with the broken key in its file, a new context of the frontend connects" n2 n3
expect_log "the broker sees the frontend's certificate in force" "$work/broker.log" \
	"connection from frontend siteA (certificate serial $old_f)" "$n"
if logged "$work/frontend-siteA.log" "new upstream context"; then
	grep -F "new upstream context" "$work/frontend-siteA.log" | tail -n 3 >"$out"
	fail "the frontend makes its contexts despite the broken file"
else
	pass "the frontend makes its contexts despite the broken file"
fi

"$certs" --dir "$ca" issue frontend siteA --san 127.0.0.1 --force >>"$work/certs.log" 2>&1 ||
	fail "qcg-certs issue frontend siteA --force"
new_f=$(serial_of "$ca/frontend-siteA.pem")
cp "$ca/frontend-siteA.pem" "$lf"
kill -HUP "$frontend_pid"
expect_log "the frontend takes its renewed certificate" "$work/frontend-siteA.log" \
	"reloaded certificate $lf: frontend siteA, serial $new_f"
log_sample --block reload-done "$work/frontend-siteA.log:reloaded certificate $lf: frontend siteA, serial $new_f"
relay_calls "after the frontend's renewal, one more context connects" n2 n3 n4
expect_log "the broker sees the frontend's renewed certificate" "$work/broker.log" \
	"connection from frontend siteA (certificate serial $new_f)"

# --- the CA rotated (section 9): CA file, CRL and certificate at once --------

c9() {
	printf 'GET /wsdl HTTP/1.1\r\nHost: broker\r\nConnection: close\r\n\r\n' |
		openssl s_client -quiet -connect "127.0.0.1:$port_b" -cert "$other/frontend-c9.pem" \
			-CAfile "$other/ca.crt" 2>/dev/null | grep -c "HTTP/1.1 200" || true
}
"$certs" --dir "$other" crl >>"$work/certs.log" 2>&1 || fail "the second CA's CRL"
if [[ $(c9) == 0 ]]; then pass "a client of another CA is refused"; else fail "a client of another CA is refused"; fi

# c1_in: 1 when frontend siteA (the grid's CA) gets an answer from the broker.
c1_in() {
	printf 'GET /wsdl HTTP/1.1\r\nHost: broker\r\nConnection: close\r\n\r\n' |
		openssl s_client -quiet -connect "127.0.0.1:$port_b" -cert "$ca/frontend-siteA.pem" \
			-CAfile "$ca/ca.crt" 2>/dev/null | grep -c "HTTP/1.1 200" || true
}
# let_in DESC: frontend siteA is let in.
let_in() { if [[ $(c1_in) == 1 ]]; then pass "$1"; else fail "$1"; fi; }

# A rotation half done changes nothing, the CRL included: CA file and CRL of
# the new CA with a broken certificate file, then the new CA's certificate
# with the old CA's CRL.  Either way the grid's clients are still let in (a
# CRL and CAs out of step would refuse them all).
cp "$live/ca.crt" "$work/ca-before.crt"
cp "$live/crl.pem" "$work/crl-before.pem"
cp "$other/ca.crt" "$live/ca.crt"
cp "$other/crl.pem" "$live/crl.pem"
cat "$other/broker-broker.crt" "$ca/frontend-siteA.key" >"$lb"
n_crl=$(count "$work/broker.log" "CRL $live/crl.pem not reloaded either")
hup_broker
expect_log "a rotation with a broken certificate: refused" "$work/broker.log" \
	"certificate not reloaded: the key in $lb is not the one of its certificate"
expect_log "a rotation with a broken certificate: the new CRL is not taken either" \
	"$work/broker.log" "CRL $live/crl.pem not reloaded either" "$n_crl"
let_in "a rotation with a broken certificate: the grid's clients are let in"
cp "$work/crl-before.pem" "$live/crl.pem"
cp "$other/broker-broker.pem" "$lb"
hup_broker
expect_log "a new CA with the old CA's CRL: refused" "$work/broker.log" \
	"certificate not reloaded: crl: $live/crl.pem is not signed by the CA in $live/ca.crt"
let_in "a new CA with the old CA's CRL: the grid's clients are let in"
cp "$work/ca-before.crt" "$live/ca.crt"
cp "$good" "$lb"
cp "$other/ca.crt" "$live/ca.crt"
cp "$other/crl.pem" "$live/crl.pem"
cp "$other/broker-broker.pem" "$lb"
other_b=$(serial_of "$other/broker-broker.pem")
hup_broker
expect_log "the broker takes the new CA's certificate" "$work/broker.log" \
	"reloaded certificate $lb: broker broker, serial $other_b,"
if [[ $(c9) == 1 ]]; then
	pass "after the CA's rotation and SIGHUP, its clients are let in"
else
	fail "after the CA's rotation and SIGHUP, its clients are let in"
fi
client_pem=$other/frontend-c9.pem check_serial "a new connection sees the new CA's certificate" "$other_b"
# Frontend siteA still trusts the grid's CA only: its next connection refuses
# the broker's certificate of the new CA.
refusal="cannot register with the broker $broker_url: SSL_ERROR_SSL"
n=$(count "$work/frontend-siteA.log" "$refusal")
ss -K -Htn state established "dport = :$port_b" >/dev/null 2>&1 || true
expect_log "the frontend's next connection refuses a broker of another CA" "$work/frontend-siteA.log" \
	"$refusal error:0A000086:SSL routines::certificate verify failed unable to get local issuer certificate" "$n"

echo "$passed passed, $failed failed"
((failed == 0))
