#!/usr/bin/env bash
#
# Revocation that takes effect (issue 37): the real broker, frontends and
# helpers on 127.0.0.1 with a throw-away CA.
#
#   test-revoke.sh BUILD_DIR SRC_DIR
#
# - qcg-certs init writes an empty crl.pem; --help names `revoke broker`;
# - the SIGHUP that loads a CRL revoking a connected frontend and a connected
#   helper closes their connections within a second (a client of the
#   proxy's stats port too, and the revoked frontend's helper closes its
#   own), drops cluster and node (--grid, --stats, the
#   broker's contacts), and leaves the others alone;
# - the revoked frontend logs the alert's reason once and backs off; the
#   broker's refusal names subject and serial;
# - an older or an expired CRL does not replace the one in force, unless
#   crl-accept-older; a SIGHUP without crl says a restart is needed;
# - the frontend exits 2 on a bad CRL; a broker whose CRL revokes its own
#   certificate says so.
#
# Ports 27920-27959 belong to this test.  Exit status: 0 passed, 1 failed,
# 77 skipped.

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)

log_lines=40 logs_var=QCG_TEST_LOGS
# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"
# shellcheck source=../lib/log_sample.sh
. "$src/tests/lib/log_sample.sh"

cat_bin=$build/tools/qcg-cat
need_built "$helper" "$frontend" "$broker" "$cat_bin"
need_commands openssl ss python3
grid_workdir test-revoke

port_b=27920 port_c1=27921 port_c2=27922 port_b2=27923

# check DESC CMD...: pass when CMD succeeds.
check() {
	local desc=$1
	shift
	if "$@" >>"$out" 2>&1; then pass "$desc"; else fail "$desc"; fi
}

not_logged() { ! grep -qF -- "$2" "$1"; }
# conns PID PORT: established TCP connections of process PID to PORT.
conns() { ss -Htnp state established "( dport = :$2 )" | grep -c "pid=$1," || true; }
no_conn() { [[ $(conns "$1" "$2") -eq 0 ]]; }
has_conn() { [[ $(conns "$1" "$2") -gt 0 ]]; }

# --- qcg-certs ---------------------------------------------------------------

"$certs" --dir "$work/ca0" init >>"$work/certs.log" 2>&1 || fail "qcg-certs init"
check "qcg-certs init writes an empty crl.pem" \
	bash -c "openssl crl -in '$work/ca0/crl.pem' -noout -text | grep -q 'No Revoked Certificates'"
check "qcg-certs --help names revoke broker without a name" \
	bash -c "'$certs' --help | grep -q 'revoke broker \[NAME\]'"

# --- the grid ----------------------------------------------------------------

grid_ca "frontend siteA" "frontend siteB" "helper siteA/n1" "helper siteA/n2" "helper siteB/n1"
"$certs" --dir "$ca" crl >>"$work/certs.log" 2>&1 || { cat "$work/certs.log"; exit 1; }
crl=$work/crl.pem
cp "$ca/crl.pem" "$crl"
cp "$ca/crl.pem" "$work/crl.before"
grid_ports_free "$port_b" "$port_c1" "$port_c2" "$port_b2"
grid_broker "$port_b" --crl "$crl" || exit 1
br_pid=${pids[-1]}
grid_frontend siteA "$port_c1" --kind open --public-address 127.0.0.1 --crl "$crl" || exit 1
fe_c1=${pids[-1]}
grid_frontend siteB "$port_c2" --kind open --public-address 127.0.0.1 --crl "$crl" || exit 1
fe_c2=${pids[-1]}
grid_helper n1 siteA/n1 "$port_c1" 27930-27933 --crl "$crl" || exit 1
h_n1=$helper_pid
grid_helper n2 siteA/n2 "$port_c1" 27934-27937 --crl "$crl" || exit 1
h_n2=$helper_pid
grid_helper c2n1 siteB/n1 "$port_c2" 27938-27941 --crl "$crl" || exit 1
h_c2n1=$helper_pid

# One listening rank per node: three contacts at the broker.
url_c2=https://127.0.0.1:$port_c2/

listen_on() {
	QCG_JOB=jr QCG_RANK=$2 QCG_JOB_SECRET=$TEST_SECRET QCG_HELPER_SOCKET=$work/$1.sock \
		"$cat_bin" --json --timeout 0 listen >/dev/null 2>"$work/cat-$1.err" &
	pids+=("$!")
}
listen_on n1 0
listen_on n2 1
listen_on c2n1 2
within "three contacts at the broker" 100 contacts_are 3

# The proxy's stats port, held open by a certificate about to be revoked.
proxy=$build/proxy/qcg-proxy
grid_certs "proxy p1" "helper c3/x"
(umask 077; openssl rand -hex 32 >"$work/proxy.key")
"$proxy" --listen 127.0.0.1 --port 27945 --control-port 27946 --ca "$ca/ca.crt" \
	--cert "$ca/proxy-p1.pem" --key-file "$work/proxy.key" --crl "$crl" >>"$work/proxy.log" 2>&1 &
px_pid=$!
pids+=("$px_pid")
wait_for "the proxy's stats port" 100 listening 27946 || true
# Its stdin a FIFO held open by a sleep the cleanup kills too.
mkfifo "$work/s_client.in"
sleep 600 >"$work/s_client.in" &
pids+=("$!")
openssl s_client -quiet -connect 127.0.0.1:27946 -CAfile "$ca/ca.crt" \
	-cert "$ca/helper-c3-x.pem" -key "$ca/helper-c3-x.pem" <"$work/s_client.in" \
	>"$work/s_client.log" 2>&1 &
sc_pid=$!
pids+=("$sc_pid")
within "a client holds the proxy's stats port" 50 has_conn "$sc_pid" 27946
within "the frontend of siteB holds a connection to the broker" 50 has_conn "$fe_c2" "$port_b"
within "helper siteA/n2 holds a connection to its frontend" 50 has_conn "$h_n2" "$port_c1"
within "helper siteB/n1 holds a connection to its frontend" 50 has_conn "$h_c2n1" "$port_c2"

# --- revoke a connected frontend and a connected helper ------------------------

"$certs" --dir "$ca" revoke frontend siteB >>"$work/certs.log" 2>&1 || fail "revoke frontend siteB"
"$certs" --dir "$ca" revoke helper siteA/n2 >>"$work/certs.log" 2>&1 || fail "revoke helper siteA/n2"
"$certs" --dir "$ca" revoke helper c3/x >>"$work/certs.log" 2>&1 || fail "revoke helper c3/x"
cp "$ca/crl.pem" "$crl"
c2_serial=$(openssl x509 -noout -serial -in "$ca/frontend-siteB.crt")
c2_serial=${c2_serial#serial=}
: >"$out"
kill -HUP "$br_pid" "$fe_c1" "$fe_c2" "$px_pid" "$h_c2n1"
within "the broker closes the revoked frontend's connection within 1 s" 10 \
	no_conn "$fe_c2" "$port_b"
within "frontend siteA closes the revoked helper's connection within 1 s" 10 \
	no_conn "$h_n2" "$port_c1"
within "the proxy closes the revoked certificate's stats connection within 1 s" 10 \
	no_conn "$sc_pid" 27946
within "helper siteB/n1 closes its connection to its revoked frontend within 1 s" 10 \
	logged "$work/c2n1.log" "CRL: the frontend $url_c2 presents a revoked certificate: connection closed"
within "--grid drops the revoked cluster siteB within 1 s" 10 grid_lacks siteB
within "--stats counts one cluster within 1 s" 10 clusters_are 1
within "the revoked helper's and cluster's contacts are withdrawn within 1 s" 10 contacts_are 1
check "the broker logs what it cut" logged "$work/broker.log" \
	"CRL: frontend siteB (certificate serial $c2_serial) is revoked"
check "the frontend logs the node it dropped" logged "$work/frontend-siteA.log" \
	"node n2 dropped: its helper's certificate is revoked"
log_sample --block revoke-cut "$work/broker.log:CRL: frontend siteB" \
	"$work/broker.log:cluster siteB dropped" "$work/frontend-siteA.log:node n2 dropped"
check "frontend siteA keeps its connection to the broker" has_conn "$fe_c1" "$port_b"
check "helper siteA/n1 keeps its connection to its frontend" has_conn "$h_n1" "$port_c1"
check "helper siteA/n1 stays registered" connected "$work/n1.sock"
check "the daemons survive" kill -0 "$br_pid" "$fe_c1" "$fe_c2" "$h_n1" "$h_n2"

# --- the revoked side --------------------------------------------------------

within "the revoked frontend logs the alert's reason" 100 logged "$work/frontend-siteB.log" \
	"refused this service's certificate (TLS alert: certificate revoked)"
within "the broker's refusal names the subject and serial" 100 logged "$work/broker.log" \
	"(certificate CN=siteB,OU=frontend,O=qcg-connect, serial $c2_serial)"
log_sample --block revoked-retry "$work/frontend-siteB.log:TLS alert: certificate revoked"
sleep 6
n=$(grep -c "TLS alert: certificate revoked" "$work/frontend-siteB.log" || true)
if ((n >= 1 && n <= 2)); then pass "the revoked frontend says so once ($n lines in 6 s)"; else
	echo "$n lines" >"$out"
	fail "the revoked frontend says so once ($n lines in 6 s)"
fi
# A frontend started with the revoked certificate reads the broker's alert
# on every attempt, the first included, and so waits 3.2 s or more after
# the first and 6.4 s after the second: at most 3 attempts in 12 s (200 ms
# doubling would make 7).  The broker once closed a refused handshake with
# the client's last flight unread: a reset that overtook the alert (the
# client's request then failed with EPIPE, the alert unread), in most
# attempts under ASan.
"$frontend" --listen 127.0.0.1 --port 27947 --broker "$broker_url" --cluster siteB --kind open \
	--public-address 127.0.0.1 --ca "$ca/ca.crt" --cert "$ca/frontend-siteB.pem" \
	--log-level debug >>"$work/frontend-c2b.log" 2>&1 &
fe_c2b=$!
pids+=("$fe_c2b")
sleep 12
kill "$fe_c2b" 2>/dev/null || true
attempts=$(grep -c "register with the broker $broker_url" "$work/frontend-c2b.log" || true)
alerted=$(grep "register with the broker $broker_url" "$work/frontend-c2b.log" |
	grep -c "TLS alert: certificate revoked" || true)
grep "register with the broker" "$work/frontend-c2b.log" >"$out" || true
if ((attempts >= 1 && attempts <= 3)); then
	pass "the revoked frontend backs off ($attempts attempts in 12 s)"
else
	fail "the revoked frontend backs off ($attempts attempts in 12 s)"
fi
if ((attempts >= 1 && alerted == attempts)); then
	pass "each attempt of the revoked frontend reads the alert ($alerted of $attempts)"
else
	fail "each attempt of the revoked frontend reads the alert ($alerted of $attempts)"
fi

# A client slow to send its first request after its handshake (a loaded
# machine, a sanitizer build) reads the alert too: the broker keeps the
# refused connection open for a moment instead of resetting it.
for i in 1 2 3; do
	said=$(python3 "$src/tests/certs/slow-tls-client.py" 127.0.0.1 "$port_b" "$ca/ca.crt" \
		"$ca/frontend-siteB.pem" 0.3 2>&1) || true
	echo "$said" >"$out"
	if [[ $said == "alert SSLV3_ALERT_CERTIFICATE_REVOKED" ]]; then
		pass "a client 0.3 s slow to send reads the revocation alert (round $i)"
	else
		fail "a client 0.3 s slow to send reads the revocation alert (round $i)"
	fi
done

# --- an older or expired CRL does not replace the one in force ---------------

cp "$work/crl.before" "$crl"
kill -HUP "$fe_c1"
within "an older CRL is not loaded, loudly" 50 logged "$work/frontend-siteA.log" \
	"NOT loaded: it is older than the CRL in force"
log_sample --block crl-older "$work/frontend-siteA.log:NOT loaded: it is older"
"$helper" --socket "$work/n2b.sock" --frontend "https://127.0.0.1:$port_c1/" --cluster siteA \
	--node n2 --address 127.0.0.1 --ports 27942-27943 --ca "$ca/ca.crt" \
	--cert "$ca/helper-siteA-n2.pem" >>"$work/n2b.log" 2>&1 &
pids+=("$!")
within "the revoked helper stays refused" 50 logged "$work/n2b.log" "certificate revoked"
kill "${pids[-1]}" 2>/dev/null || true

# An expired CRL, newer by its number: openssl ca with dates in the past.
"$certs" --dir "$ca" crl >>"$work/certs.log" 2>&1
cat >"$work/ca.cnf" <<EOF
[ca]
default_ca = grid
[grid]
database = $ca/index.txt
crlnumber = $ca/crlnumber
certificate = $ca/ca.crt
private_key = $ca/ca.key
default_md = sha256
EOF
openssl ca -batch -config "$work/ca.cnf" -gencrl -crl_lastupdate 20200101000000Z \
	-crl_nextupdate 20200201000000Z -out "$work/crl.expired" >>"$work/certs.log" 2>&1 ||
	fail "an expired CRL made"
cp "$work/crl.expired" "$crl"
kill -HUP "$fe_c1"
within "an expired CRL is not loaded, loudly" 50 logged "$work/frontend-siteA.log" \
	"NOT loaded: it expired on"
sleep 1
check "helper siteA/n1 still registered after the expired CRL" connected "$work/n1.sock"

# crl-accept-older takes it, and a broker without crl says a restart is needed.
cp "$work/crl.before" "$work/crl2.pem"
cp "$ca/crl.pem" "$work/crl2.pem"
"$broker" --listen 127.0.0.1 --port "$port_b2" --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" \
	--crl "$work/crl2.pem" --crl-accept-older >>"$work/broker2.log" 2>&1 &
b2=$!
pids+=("$b2")
wait_for "the second broker" 100 listening "$port_b2" || true
cp "$work/crl.before" "$work/crl2.pem"
kill -HUP "$b2" 2>/dev/null || true
within "crl-accept-older: an older CRL is loaded" 50 logged "$work/broker2.log" \
	"reloaded CRL $work/crl2.pem: 0 revoked"
kill "$b2" 2>/dev/null || true
wait "$b2" 2>/dev/null || true
"$broker" --listen 127.0.0.1 --port "$port_b2" --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" \
	>>"$work/broker3.log" 2>&1 &
b3=$!
pids+=("$b3")
wait_for "the third broker" 100 listening "$port_b2" || true
kill -HUP "$b3" 2>/dev/null || true
within "SIGHUP without crl says a restart is needed" 50 logged "$work/broker3.log" \
	"restart the service to load one"
kill "$b3" 2>/dev/null || true

# --- exit status, the broker's own certificate -------------------------------

echo "not a CRL" >"$work/bad-crl.pem"
rc=0
"$frontend" --listen 127.0.0.1 --port 27944 --broker "$broker_url" --cluster siteA --kind open \
	--public-address 127.0.0.1 --ca "$ca/ca.crt" --cert "$ca/frontend-siteA.pem" \
	--crl "$work/bad-crl.pem" >"$out" 2>&1 || rc=$?
if ((rc == 2)); then pass "the frontend exits 2 on a bad CRL"; else
	echo "exit $rc" >>"$out"
	fail "the frontend exits 2 on a bad CRL"
fi

"$certs" --dir "$ca" revoke broker >>"$work/certs.log" 2>&1 || fail "revoke broker"
cp "$ca/crl.pem" "$crl"
kill -HUP "$br_pid"
within "a broker whose CRL revokes its own certificate says so" 50 logged "$work/broker.log" \
	"revokes this service's own certificate"

echo "$passed passed, $failed failed"
((failed == 0))
