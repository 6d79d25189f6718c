#!/usr/bin/env bash
#
# Tests certs/qcg-certs the way an admin (and the services) would use its
# output: openssl verify, subjects, SANs, file modes, refusals.
#
#   test-certs.sh PATH/TO/qcg-certs
#
# Exit status: 0 all passed, 1 some failed, 77 skipped (no openssl).

set -euo pipefail
export LC_ALL=C

QC=${1:?usage: test-certs.sh PATH/TO/qcg-certs}
QC=$(cd "$(dirname -- "$QC")" && pwd)/$(basename -- "$QC")

# shellcheck source=tests/lib/common.sh
. "$(dirname "$0")/../lib/common.sh"
need_commands openssl

work=$(mktemp -d "${TMPDIR:-/tmp}/test-certs.XXXXXX")
trap 'rm -rf -- "$work"' EXIT
cd "$work"
unset QCG_CERTS_DIR

# What a failed check shows besides its line: the command's output.
fail_details() {
	if [[ -s $work/out ]]; then
		sed 's/^/     | /' "$work/out"
	fi
}

# check DESC CMD...: CMD must succeed.
check() {
	local desc=$1
	shift
	if "$@" >"$work/out" 2>&1; then
		pass "$desc"
	else
		fail "$desc"
	fi
}

# check_fails DESC CMD...: CMD must fail.
check_fails() {
	local desc=$1
	shift
	if "$@" >"$work/out" 2>&1; then
		fail "$desc"
	else
		: >"$work/out"
		pass "$desc"
	fi
}

# refuses DESC CMD...: CMD must fail with exactly one line on stderr, the
# way qcg-certs reports errors.
refuses() {
	local desc=$1 lines
	shift
	if "$@" >"$work/out" 2>"$work/err"; then
		fail "$desc (it succeeded)"
		return
	fi
	lines=$(wc -l <"$work/err")
	if ((lines == 1)) && grep -q '^qcg-certs: ' "$work/err"; then
		pass "$desc: $(cat "$work/err")"
	else
		cat "$work/err" >"$work/out"
		fail "$desc (expected one 'qcg-certs: ...' line on stderr)"
	fi
}

mode_of() {
	stat -c %a "$1" 2>/dev/null || stat -f %Lp "$1"
}

subject_of() {
	openssl x509 -in "$1" -noout -subject -nameopt RFC2253
}

sans_of() {
	openssl x509 -in "$1" -noout -ext subjectAltName
}

# The public key of a certificate and of a private key, to see that they pair.
pub_of_cert() {
	openssl x509 -in "$1" -noout -pubkey
}

pub_of_key() {
	openssl pkey -in "$1" -pubout
}

# has_line TEXT CMD...: CMD succeeds and prints TEXT.
has_line() {
	local want=$1
	shift
	"$@" >"$work/out" 2>&1 && grep -qF -- "$want" "$work/out"
}

# has_match REGEX CMD...: the same with an extended regular expression.
has_match() {
	local want=$1
	shift
	"$@" >"$work/out" 2>&1 && grep -qiE -- "$want" "$work/out"
}

same_output() {
	[[ "$($1 "$3")" == "$($2 "$4")" ]]
}

no_tmp_left() {
	local f
	for f in "$1"/.qcg-certs.*; do
		if [[ -e $f ]]; then
			echo "left behind: $f" >"$work/out"
			return 1
		fi
	done
}

qc() {
	"$QC" "$@"
}

# --- the grid CA ------------------------------------------------------------

check "qcg-certs is executable" test -x "$QC"
check "--help exits 0" qc --help
check "help shows the usage" has_line "Usage: qcg-certs" qc help
refuses "no command is an error" qc

# No --dir and no QCG_CERTS_DIR: the CA goes to ./qcg-certs.
check "init with the default directory" qc init
D=$work/qcg-certs
check "ca.crt created" test -f "$D/ca.crt"
check "ca.key created" test -f "$D/ca.key"
check "ca.key is mode 600" test "$(mode_of "$D/ca.key")" = 600
check "CA is CA:TRUE, pathlen:0, critical" \
	has_line "CA:TRUE, pathlen:0" openssl x509 -in "$D/ca.crt" -noout -ext basicConstraints
check "CA basicConstraints is critical" \
	has_line "Basic Constraints: critical" openssl x509 -in "$D/ca.crt" -noout -ext basicConstraints
check "CA key usage is keyCertSign, cRLSign" \
	has_line "Certificate Sign, CRL Sign" openssl x509 -in "$D/ca.crt" -noout -ext keyUsage
check "CA key is EC prime256v1" has_line "prime256v1" openssl x509 -in "$D/ca.crt" -noout -text

cp "$D/ca.crt" "$work/ca.crt.before"
cp "$D/ca.key" "$work/ca.key.before"
refuses "second init is refused" qc --dir "$D" init
check "second init left ca.crt byte-identical" cmp "$D/ca.crt" "$work/ca.crt.before"
check "second init left ca.key byte-identical" cmp "$D/ca.key" "$work/ca.key.before"
# Also through the environment variable, and with the exit status the brief fixes.
QCG_CERTS_DIR=$D qc init >/dev/null 2>&1 && rc=0 || rc=$?
check "second init via QCG_CERTS_DIR exits 1" test "$rc" = 1
check "ca.key still byte-identical" cmp "$D/ca.key" "$work/ca.key.before"

# --- issuing ----------------------------------------------------------------

check "issue broker (default name) with IP and DNS SANs" \
	qc --dir "$D" issue broker --san 192.0.2.10 --san broker.example.org
check "issue proxy, options after the name" \
	qc issue proxy p1 --dir "$D" --san proxy1.example.org,198.51.100.7
check "issue frontend, via QCG_CERTS_DIR" \
	env QCG_CERTS_DIR="$D" "$QC" issue frontend nata --san head.nata.example.org
check "issue helper CLUSTER/NODE, comma-separated SANs and IPv6" \
	qc --dir "$D" issue helper nata/nata1 --san "10.1.0.1, nata1.nata.local" --san 2001:db8::1
check "issue broker with an explicit name, --days" \
	qc --dir "$D" issue broker broker2 --days 30 --san 192.0.2.11

for f in broker-broker proxy-p1 frontend-nata helper-nata-nata1 broker-broker2; do
	check "$f: .crt .key .pem exist" test -f "$D/$f.crt" -a -f "$D/$f.key" -a -f "$D/$f.pem"
	check "$f: verifies against the CA" openssl verify -CAfile "$D/ca.crt" "$D/$f.crt"
	if [[ $f == helper-* ]]; then
		# Helpers only dial out (issue 17: separate key usages).
		check_fails "$f: not usable as a TLS server" openssl verify -purpose sslserver -CAfile "$D/ca.crt" "$D/$f.crt"
	else
		check "$f: usable as a TLS server" openssl verify -purpose sslserver -CAfile "$D/ca.crt" "$D/$f.crt"
	fi
	check "$f: usable as a TLS client" openssl verify -purpose sslclient -CAfile "$D/ca.crt" "$D/$f.crt"
	check "$f: .key is mode 600" test "$(mode_of "$D/$f.key")" = 600
	check "$f: .pem is mode 600" test "$(mode_of "$D/$f.pem")" = 600
	check "$f: .pem's certificate pairs with .key" \
		same_output pub_of_cert pub_of_key "$D/$f.pem" "$D/$f.key"
	check "$f: .pem holds the .crt" has_line "$(sed -n 2p "$D/$f.crt")" cat "$D/$f.pem"
	check "$f: key is EC prime256v1" has_line "prime256v1" openssl pkey -in "$D/$f.key" -noout -text
	check "$f: not a CA" has_line "CA:FALSE" openssl x509 -in "$D/$f.crt" -noout -ext basicConstraints
done

check "broker subject" has_line "subject=CN=broker,OU=broker,O=qcg-connect" subject_of "$D/broker-broker.crt"
check "named broker subject" has_line "subject=CN=broker2,OU=broker,O=qcg-connect" subject_of "$D/broker-broker2.crt"
check "proxy subject" has_line "subject=CN=p1,OU=proxy,O=qcg-connect" subject_of "$D/proxy-p1.crt"
check "frontend subject" has_line "subject=CN=nata,OU=frontend,O=qcg-connect" subject_of "$D/frontend-nata.crt"
check "helper subject keeps the slash: CN=nata/nata1" \
	has_line "subject=CN=nata/nata1,OU=helper,O=qcg-connect" subject_of "$D/helper-nata-nata1.crt"

check "broker SAN has the IP" has_line "IP Address:192.0.2.10" sans_of "$D/broker-broker.crt"
check "broker SAN has the DNS name" has_line "DNS:broker.example.org" sans_of "$D/broker-broker.crt"
check "proxy SANs from one comma list" has_line "DNS:proxy1.example.org, IP Address:198.51.100.7" sans_of "$D/proxy-p1.crt"
check "helper SAN has the IPv4" has_line "IP Address:10.1.0.1" sans_of "$D/helper-nata-nata1.crt"
check "helper SAN has the DNS name" has_line "DNS:nata1.nata.local" sans_of "$D/helper-nata-nata1.crt"
# OpenSSL versions differ in how they print IPv6 addresses.
check "helper SAN has the IPv6" has_match "IP Address:2001:db8(:0:0:0:0:0:|::)1" sans_of "$D/helper-nata-nata1.crt"
check "--days 30 is honoured" openssl x509 -in "$D/broker-broker2.crt" -noout -checkend $((29 * 86400))
check_fails "--days 30 means at most 30 days" \
	openssl x509 -in "$D/broker-broker2.crt" -noout -checkend $((31 * 86400))
check "serial numbers differ" test "$(openssl x509 -in "$D/proxy-p1.crt" -noout -serial)" != \
	"$(openssl x509 -in "$D/frontend-nata.crt" -noout -serial)"

# --- refusals ---------------------------------------------------------------

cp "$D/proxy-p1.crt" "$work/p1.crt.before"
cp "$D/proxy-p1.key" "$work/p1.key.before"
refuses "issuing an existing leaf without --force" qc --dir "$D" issue proxy p1 --san 192.0.2.99
check "the refused leaf's .crt is unchanged" cmp "$D/proxy-p1.crt" "$work/p1.crt.before"
check "the refused leaf's .key is unchanged" cmp "$D/proxy-p1.key" "$work/p1.key.before"
check "--force re-issues it" qc --dir "$D" issue proxy p1 --force --san 192.0.2.99
check "--force made a new key" test "$(pub_of_key "$D/proxy-p1.key")" != "$(pub_of_key "$work/p1.key.before")"
check "the re-issued leaf verifies" openssl verify -CAfile "$D/ca.crt" "$D/proxy-p1.crt"
check "the re-issued leaf has the new SAN" has_line "IP Address:192.0.2.99" sans_of "$D/proxy-p1.crt"
check "the re-issued .key is mode 600" test "$(mode_of "$D/proxy-p1.key")" = 600

refuses "proxy name '../x'" qc --dir "$D" issue proxy ../x
refuses "proxy name 'a b'" qc --dir "$D" issue proxy "a b"
refuses "empty proxy name" qc --dir "$D" issue proxy ""
refuses "empty broker name" qc --dir "$D" issue broker ""
refuses "helper name 'nata/'" qc --dir "$D" issue helper nata/
refuses "helper name without a node" qc --dir "$D" issue helper nata
refuses "helper name '../x/y'" qc --dir "$D" issue helper ../x/y
refuses "frontend name '-x'" qc --dir "$D" issue frontend -- -x
refuses "a 64-character name" qc --dir "$D" issue proxy "$(printf 'a%.0s' {1..64})"
refuses "missing proxy name" qc --dir "$D" issue proxy
refuses "unknown role" qc --dir "$D" issue ca x
refuses "an invalid IPv4 SAN" qc --dir "$D" issue proxy p9 --san 10.0.0.256
refuses "an invalid DNS SAN" qc --dir "$D" issue proxy p9 --san "bad_name.example"
refuses "an empty SAN" qc --dir "$D" issue proxy p9 --san ""
refuses "--days 0" qc --dir "$D" issue proxy p9 --days 0
refuses "--force with init" qc --dir "$D" init --force
refuses "unknown option" qc --dir "$D" list --frob
check "no file escaped DIR" test ! -e "$work/x.crt" -a ! -e "$work/proxy-..-x.crt" -a ! -e "$D/proxy-p9.crt"
# helper a-b/c and a/b-c map to the same file name; neither may take the other's.
check "issue helper a-b/c" qc --dir "$D" issue helper a-b/c
if ! grep -q "warning" "$work/out"; then pass "a helper without --san: no warning (helpers only dial out)"; else fail "a helper without --san: warned"; fi
qc --dir "$D" issue frontend nosan >"$work/out" 2>&1 || true
if grep -q "warning: no --san given" "$work/out"; then pass "a frontend without --san: warned"; else fail "a frontend without --san: no warning"; fi
refuses "helper a/b-c collides with a-b/c" qc --dir "$D" issue helper a/b-c --force
check "the collision left a-b/c in place" has_line "CN=a-b/c" subject_of "$D/helper-a-b-c.crt"
refuses "issue with no CA in DIR" qc --dir "$work/empty" issue proxy p1
check "no temporary files left in DIR" no_tmp_left "$D"
# A CA key that does not match ca.crt makes openssl fail half-way through.
B=$work/broken
mkdir -m 700 "$B"
cp "$D/ca.crt" "$B/ca.crt"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$B/ca.key" 2>/dev/null
refuses "signing with a CA key that does not match ca.crt" qc --dir "$B" issue proxy p1 --san 192.0.2.1
check "the failed issue left no temporary files" no_tmp_left "$B"
check "the failed issue left no leaf files" test ! -e "$B/proxy-p1.crt" -a ! -e "$B/proxy-p1.key"

# --- a foreign CA -----------------------------------------------------------

F=$work/foreign
check "init a second, foreign CA" qc --dir "$F" init
check "issue proxy p1 from the foreign CA" qc --dir "$F" issue proxy p1 --san 192.0.2.50
check_fails "foreign CA's cert does not verify against the first CA" \
	openssl verify -CAfile "$D/ca.crt" "$F/proxy-p1.crt"
check_fails "first CA's cert does not verify against the foreign CA" \
	openssl verify -CAfile "$F/ca.crt" "$D/proxy-p1.crt"
cp "$F/proxy-p1.crt" "$D/proxy-intruder.crt"

# --- list -------------------------------------------------------------------

check "list (text) shows the helper" has_line "nata/nata1" qc --dir "$D" list
check "list (text) flags the foreign cert" has_line "FAILED" qc --dir "$D" list
if qc --dir "$D" list --json >"$work/list.json" 2>"$work/out"; then
	pass "list --json exits 0"
else
	fail "list --json exits 0"
fi
if command -v python3 >/dev/null 2>&1; then
	check "list --json parses with python3 -m json.tool" python3 -m json.tool "$work/list.json"
	# shellcheck disable=SC2016 # Python source, not shell
	check "list --json lists every cert with role, name, SANs and verification" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
got = {(c["role"], c["name"]): c for c in d["certificates"]}
want = {("broker", "broker"), ("broker", "broker2"), ("proxy", "p1"),
        ("frontend", "nata"), ("helper", "nata/nata1"), ("helper", "a-b/c")}
missing = want - set(got)
assert not missing, "missing: %r" % missing
for k in want:
    assert got[k]["verified"] is True, k
    assert got[k]["not_after"], k
h = got[("helper", "nata/nata1")]
assert h["file"].endswith("/helper-nata-nata1.crt"), h["file"]
assert "10.1.0.1" in h["ip"] and "nata1.nata.local" in h["dns"], h
bad = [c for c in d["certificates"] if c["file"].endswith("/proxy-intruder.crt")]
assert len(bad) == 1 and bad[0]["verified"] is False and bad[0]["verify_error"], bad
' "$work/list.json"
	# shellcheck disable=SC2016 # $1 and $2 belong to the inner shell
	check "issue --json parses" bash -c '"$1" --dir "$2" issue proxy p2 --json --san 192.0.2.2 | python3 -m json.tool' _ "$QC" "$D"
else
	echo "skip list --json checks: no python3"
fi

# --- keys made on the node, revocation -----------------------------------------

G=$work/grid
N=$work/node
check "init a CA for request/sign/revoke" qc --dir "$G" init
check "request: a node makes its key and request without the CA" qc --dir "$N" request helper c1/n3
check "request: the key is mode 600" test "$(mode_of "$N/helper-c1-n3.key")" = 600
check "request: no CA file on the node" test ! -e "$N/ca.key" -a ! -e "$N/ca.crt"
refuses "request: again without --force" qc --dir "$N" request helper c1/n3
refuses "sign without --csr" qc --dir "$G" sign
refuses "sign: the request asks for another name" qc --dir "$G" sign --csr "$N/helper-c1-n3.csr" helper c1/n4
check "sign --csr" qc --dir "$G" sign --csr "$N/helper-c1-n3.csr" helper c1/n3
check "sign: the certificate verifies" openssl verify -CAfile "$G/ca.crt" "$G/helper-c1-n3.crt"
check "sign: it pairs with the node's key" same_output pub_of_cert pub_of_key "$G/helper-c1-n3.crt" "$N/helper-c1-n3.key"
check "sign: the CA never saw the key" test ! -e "$G/helper-c1-n3.key" -a ! -e "$G/helper-c1-n3.pem"
check "sign: a helper is a TLS client only" has_line "TLS Web Client Authentication" \
	openssl x509 -in "$G/helper-c1-n3.crt" -noout -ext extendedKeyUsage
check_fails "sign: a helper is no TLS server" openssl verify -purpose sslserver -CAfile "$G/ca.crt" "$G/helper-c1-n3.crt"
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$work/x.key" \
	-subj "/O=qcg-connect/OU=helper/CN=c1\/n5/L=extra" -out "$work/x.csr" >/dev/null 2>&1
refuses "sign: a request with an extra subject field" qc --dir "$G" sign --csr "$work/x.csr"
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$work/y.key" \
	-subj "/O=qcg-connect/OU=ca/CN=x" -out "$work/y.csr" >/dev/null 2>&1
refuses "sign: a request for the role ca" qc --dir "$G" sign --csr "$work/y.csr"

check "issue helper c1/n1 for revoke" qc --dir "$G" issue helper c1/n1
check "crl: an empty CRL" qc --dir "$G" crl
check "crl: verifies against the CA" openssl crl -in "$G/crl.pem" -CAfile "$G/ca.crt" -noout
check "crl: n1 passes the CRL check" openssl verify -crl_check -CRLfile "$G/crl.pem" -CAfile "$G/ca.crt" "$G/helper-c1-n1.crt"
refuses "revoke an unknown name" qc --dir "$G" revoke helper c1/n9
check "revoke helper c1/n1" qc --dir "$G" revoke helper c1/n1
check "revoke: the CRL lists its serial" has_line "$(openssl x509 -in "$G/helper-c1-n1.crt" -noout -serial | cut -d= -f2)" \
	openssl crl -in "$G/crl.pem" -noout -text
check_fails "revoke: n1 fails the CRL check" openssl verify -crl_check -CRLfile "$G/crl.pem" -CAfile "$G/ca.crt" "$G/helper-c1-n1.crt"
check "revoke: n3 still passes it" openssl verify -crl_check -CRLfile "$G/crl.pem" -CAfile "$G/ca.crt" "$G/helper-c1-n3.crt"
check "list: shows the revoked one" has_line "certificate revoked" qc --dir "$G" list
check "re-issue n1 with --force" qc --dir "$G" issue helper c1/n1 --force
check "the new n1 passes the CRL check" openssl verify -crl_check -CRLfile "$G/crl.pem" -CAfile "$G/ca.crt" "$G/helper-c1-n1.crt"
check "revoke the new n1 too (same name)" qc --dir "$G" revoke helper c1/n1
check "the CRL now lists two" test "$(openssl crl -in "$G/crl.pem" -noout -text | grep -c 'Serial Number')" = 2
check "crl --days 7" qc --dir "$G" crl --days 7
check "crl --days 7 is honoured" has_line "$(date -u -d '+7 days' '+%b %e')" openssl crl -in "$G/crl.pem" -noout -nextupdate

echo "$passed passed, $failed failed"
((failed == 0))
