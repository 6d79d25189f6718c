#!/usr/bin/env bash
#
# Services check whom they talk to (issue 17): the real broker, frontends and
# helpers on 127.0.0.1 with certificates from certs/qcg-certs.
#
#   test-roles.sh BUILD_DIR SRC_DIR
#
# - a helper refuses an upstream that is another cluster's frontend or the
#   broker, a frontend or a proxy one that is not the broker, with a clear
#   error;
# - a peer certificate without the key usage of its side is refused;
# - a helper revoked (qcg-certs revoke) is accepted before and refused after
#   the frontend's SIGHUP, which keeps its live connections;
# - a helper whose key was made on the node (request, sign --csr) works.
#
# Ports 27800-27899 belong to this test.  Exit status: 0 passed, 1 failed,
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

need_built "$helper" "$frontend" "$broker"
need_commands openssl ss
grid_workdir test-roles

port_b=27800 port_c1=27801 port_c2=27802
grid_ca "frontend siteA" "frontend siteB" "helper siteA/n1" "helper siteA/n2"
"$certs" --dir "$ca" crl >>"$work/certs.log" 2>&1 || { cat "$work/certs.log"; exit 1; }
crl=$work/crl.pem
cp "$ca/crl.pem" "$crl"
grid_ports_free "$port_b" "$port_c1" "$port_c2"
grid_broker "$port_b" --crl "$crl" || exit 1
grid_frontend siteA "$port_c1" --kind open --public-address 127.0.0.1 --crl "$crl" || exit 1
fe_c1=${pids[-1]}
grid_frontend siteB "$port_c2" --kind open --public-address 127.0.0.1 || exit 1

# start_helper NAME CLUSTER/NODE URL PEM LOW-HIGH: a helper in the background,
# log NAME.log, pid in $helper_pid (does not wait for it).
start_helper() {
	local name=$1 cn=$2 url=$3 pem=$4 range=$5
	"$helper" --socket "$work/$name.sock" --frontend "$url" \
		--cluster "${cn%/*}" --node "${cn#*/}" --address 127.0.0.1 --ports "$range" \
		--ca "$ca/ca.crt" --cert "$pem" --crl "$crl" >>"$work/$name.log" 2>&1 &
	helper_pid=$!
	pids+=("$helper_pid")
}

# logged FILE TEXT: FILE holds TEXT (fixed string).
logged() { grep -qF -- "$2" "$1"; }

# expect_log DESC FILE TEXT: waits (bounded) for TEXT in FILE.
expect_log() {
	if wait_for "$1" 150 logged "$2" "$3"; then
		pass "$1"
	else
		{ echo "no \"$3\" in $2:"; tail -n 15 "$2"; } >"$out"
		fail "$1"
	fi
}

stop() {
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

# leaf FILE ROLE NAME EKU: a certificate from the grid CA with the extended
# key usage EKU ("" for none), the way qcg-certs would not issue it.
leaf() {
	local file=$1 role=$2 name=$3 eku=$4
	{
		printf 'basicConstraints = CA:FALSE\nkeyUsage = critical, digitalSignature\n'
		printf 'subjectAltName = IP:127.0.0.1\n'
		[[ -z $eku ]] || printf 'extendedKeyUsage = %s\n' "$eku"
	} >"$work/leaf.ext"
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
		-keyout "$work/leaf.key" -subj "/O=qcg-connect/OU=$role/CN=${name//\//\\/}" \
		-out "$work/leaf.csr" >>"$work/certs.log" 2>&1
	openssl x509 -req -in "$work/leaf.csr" -CA "$ca/ca.crt" -CAkey "$ca/ca.key" \
		-CAcreateserial -days 2 -extfile "$work/leaf.ext" -out "$work/leaf.crt" \
		>>"$work/certs.log" 2>&1
	cat "$work/leaf.crt" "$work/leaf.key" >"$file"
}

url_c1=https://127.0.0.1:$port_c1/
url_c2=https://127.0.0.1:$port_c2/

# --- upstream roles ----------------------------------------------------------

start_helper wrong siteA/n1 "$url_c2" "$ca/helper-siteA-n1.pem" 27810-27811
expect_log "a helper of siteA refuses siteB's frontend" "$work/wrong.log" \
	"the frontend at $url_c2 presents a certificate of frontend siteB, not of a frontend of cluster siteA"
log_sample --block roles-refused "$work/wrong.log:presents a certificate of frontend siteB"
stop "$helper_pid"

start_helper wrong2 siteA/n1 "$broker_url" "$ca/helper-siteA-n1.pem" 27810-27811
expect_log "a helper refuses the broker as its frontend" "$work/wrong2.log" \
	"the frontend at $broker_url presents a certificate of broker broker, not of a frontend of cluster siteA"
stop "$helper_pid"

"$frontend" --listen 127.0.0.1 --port 27803 --broker "$url_c2" --cluster siteA --kind open \
	--public-address 127.0.0.1 --ca "$ca/ca.crt" --cert "$ca/frontend-siteA.pem" \
	>>"$work/frontend-wrong.log" 2>&1 &
fe_pid=$!
pids+=("$fe_pid")
expect_log "a frontend refuses another frontend as its broker" "$work/frontend-wrong.log" \
	"the broker at $url_c2 presents a certificate of frontend siteB, not of a broker"
stop "$fe_pid"

proxy=$build/proxy/qcg-proxy
if [[ -x $proxy ]]; then
	grid_certs "proxy p1"
	(umask 077; openssl rand -hex 32 >"$work/proxy.key")
	"$proxy" --listen 127.0.0.1 --port 27830 --control-port 27831 --ca "$ca/ca.crt" \
		--cert "$ca/proxy-p1.pem" --key-file "$work/proxy.key" --broker "$url_c1" \
		--alive-interval 1 >>"$work/proxy.log" 2>&1 &
	px_pid=$!
	pids+=("$px_pid")
	expect_log "a proxy beats to no frontend as its broker" "$work/proxy.log" \
		"the broker at $url_c1 presents a certificate of frontend siteA, not of a broker"
	stop "$px_pid"
fi

# --- key usages -------------------------------------------------------------

leaf "$work/no-eku.pem" helper siteA/n4 ""
start_helper noeku siteA/n4 "$url_c1" "$work/no-eku.pem" 27812-27813
expect_log "the frontend refuses a client certificate without extended key usage" \
	"$work/frontend-siteA.log" "refused: its certificate names no extended key usage (clientAuth needed)"
stop "$helper_pid"

leaf "$work/server-only.pem" helper siteA/n5 serverAuth
start_helper srvonly siteA/n5 "$url_c1" "$work/server-only.pem" 27814-27815
expect_log "the frontend refuses a client certificate for TLS servers only" \
	"$work/frontend-siteA.log" "unsuitable certificate purpose"
stop "$helper_pid"

leaf "$work/fe-no-eku.pem" frontend siteA ""
"$frontend" --listen 127.0.0.1 --port 27804 --broker "$broker_url" --cluster siteA --kind open \
	--public-address 127.0.0.1 --ca "$ca/ca.crt" --cert "$work/fe-no-eku.pem" \
	>>"$work/frontend-noeku.log" 2>&1 &
fe_pid=$!
pids+=("$fe_pid")
wait_for "the frontend without key usage on 27804" 100 listening 27804 || true
start_helper noeku-fe siteA/n1 https://127.0.0.1:27804/ "$ca/helper-siteA-n1.pem" 27816-27817
expect_log "a helper refuses a frontend certificate without serverAuth" "$work/noeku-fe.log" \
	"refusing the frontend at https://127.0.0.1:27804/: its certificate names no extended key usage (serverAuth needed)"
stop "$helper_pid"
stop "$fe_pid"

# --- revocation -------------------------------------------------------------

grid_helper n1 siteA/n1 "$port_c1" 27820-27821 --crl "$crl" || fail "helper siteA/n1 registers"
n1_pid=$helper_pid
if grid_helper n2 siteA/n2 "$port_c1" 27822-27823 --crl "$crl"; then
	pass "helper siteA/n2 is accepted before it is revoked"
else
	fail "helper siteA/n2 is accepted before it is revoked"
fi
stop "$helper_pid"

"$certs" --dir "$ca" revoke helper siteA/n2 >>"$work/certs.log" 2>&1 || fail "qcg-certs revoke helper siteA/n2"
cp "$ca/crl.pem" "$crl"
kill -HUP "$fe_c1"
expect_log "the frontend reloads its CRL on SIGHUP" "$work/frontend-siteA.log" "reloaded CRL $crl: 1 revoked"
if kill -0 "$fe_c1" 2>/dev/null; then pass "the frontend survives SIGHUP"; else fail "the frontend survives SIGHUP"; fi
if connected "$work/n1.sock"; then
	pass "helper siteA/n1 stays registered across the reload"
else
	fail "helper siteA/n1 stays registered across the reload"
fi
start_helper n2again siteA/n2 "$url_c1" "$ca/helper-siteA-n2.pem" 27822-27823
expect_log "the frontend refuses the revoked helper siteA/n2" "$work/frontend-siteA.log" "certificate revoked"
if connected "$work/n2again.sock"; then
	fail "the revoked helper is not registered"
else
	pass "the revoked helper is not registered"
fi
stop "$helper_pid"

# A CRL that does not load leaves the one loaded before in force.
cp "$crl" "$work/crl.good"
echo "not a CRL" >"$crl"
kill -HUP "$fe_c1"
expect_log "a broken CRL on SIGHUP is refused" "$work/frontend-siteA.log" "holds no PEM CRL"
expect_log "a broken CRL on SIGHUP: the old one kept" "$work/frontend-siteA.log" \
	"CRL $crl not reloaded either"
cp "$work/crl.good" "$crl"
if "$frontend" --listen 127.0.0.1 --port 27805 --broker "$broker_url" --cluster siteA --kind open \
	--public-address 127.0.0.1 --ca "$ca/ca.crt" --cert "$ca/frontend-siteA.pem" \
	--crl "$work/missing.pem" >"$out" 2>&1; then
	fail "a frontend whose crl file is missing does not start"
elif grep -qF "cannot read $work/missing.pem" "$out"; then
	pass "a frontend whose crl file is missing does not start"
else
	fail "a frontend whose crl file is missing does not start (no clear error)"
fi

# A helper loads the CRL too: a revoked frontend is refused.
"$certs" --dir "$ca" revoke frontend siteB >>"$work/certs.log" 2>&1 || fail "qcg-certs revoke frontend siteB"
cp "$ca/crl.pem" "$crl"
"$certs" --dir "$ca" issue helper siteB/n1 >>"$work/certs.log" 2>&1 || fail "issue helper siteB/n1"
start_helper c2n1 siteB/n1 "$url_c2" "$ca/helper-siteB-n1.pem" 27824-27825
expect_log "a helper refuses its revoked frontend" "$work/c2n1.log" "certificate revoked"
stop "$helper_pid"

# --- a key made on the node -------------------------------------------------

node=$work/node
if "$certs" --dir "$node" request helper siteA/n3 >>"$work/certs.log" 2>&1 &&
	"$certs" --dir "$ca" sign --csr "$node/helper-siteA-n3.csr" helper siteA/n3 >>"$work/certs.log" 2>&1; then
	pass "request on the node, sign --csr at the CA"
else
	fail "request on the node, sign --csr at the CA"
fi
cat "$ca/helper-siteA-n3.crt" "$node/helper-siteA-n3.key" >"$ca/helper-siteA-n3.pem"
if grid_helper n3 siteA/n3 "$port_c1" 27826-27827 --crl "$crl"; then
	pass "a helper with a CSR-signed certificate registers"
else
	fail "a helper with a CSR-signed certificate registers"
fi
kill -0 "$n1_pid" 2>/dev/null || fail "helper siteA/n1 still runs"

echo "$passed passed, $failed failed"
((failed == 0))
