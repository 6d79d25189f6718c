#!/usr/bin/env bash
# lab-docs-plain: docs/admin.md's deployment without systemd, as written, on
# the lab's hosts (issue 36): the lab's own services stopped (`up
# --no-services`), then tests/docs/test-admin-guide.sh with QCG_DOCTEST_PLAIN
# and QCG_DOCTEST_LAB runs every block of the guides: the CA on this machine,
# the broker (setpriv, CAP_SETUID/CAP_SETGID for its reflector) on `broker`,
# the proxy on `proxy`, the frontend on `nata-head`, the helper (its two
# capabilities) on `nata1`, each as the user qcg from the shipped config
# files with the guide's lines set, each saying it logs to stderr; the checks
# of section 7, a transfer with qcg-cat, the grid's page.  The guide's
# addresses are the lab's own (203.0.113.10 broker, 203.0.113.20 proxy,
# 198.18.1.10 the head behind the NAT 203.0.113.66, 198.18.1.11 its node).
# Then a plain `up` brings the lab's services back.
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
command -v setpriv >/dev/null 2>&1 || skip "setpriv is not installed (util-linux)"
getent passwd qcg-reflector >/dev/null || skip "no user qcg-reflector (scripts/install-deps makes it)"

restore() { "$LAB" up >/dev/null || echo "could not restore the lab's services" >&2; }
trap restore EXIT
"$LAB" up --no-services >/dev/null
QCG_TEST_LOGS=1 QCG_DOCTEST_PLAIN=1 QCG_DOCTEST_LAB=1 bash "$LAB_SRC/../docs/test-admin-guide.sh" \
	"$QCG_BUILD_DIR" "$LAB_SRC/../.." >"${TMPDIR:-/tmp}/lab-docs-plain.$$" 2>&1 && rc=0 || rc=$?
out=$(cat "${TMPDIR:-/tmp}/lab-docs-plain.$$")
rm -f "${TMPDIR:-/tmp}/lab-docs-plain.$$"
echo "$out" | grep -E '^(ok|FAIL|passed)' | grep -Ev '^ok +docs/(admin|user)\.md:[0-9]+ config ' || true
[ "$rc" = 0 ] || { echo "$out" | grep -A 25 '^FAIL' | head -n 80 >&2; fail "the guide's deployment without systemd failed in the lab (exit $rc)"; }
# Every daemon ran where the guide puts it.
for d in "qcg-broker.* on broker" "qcg-proxy.* on proxy" "qcg-frontend.* on nata-head" "qcg-helper.* on nata1"; do
	echo "$out" | grep -Eq "^ok .* daemon $d as qcg" || fail "no daemon $d as qcg"
done
# The node registered through its frontend, behind the NAT, at the broker.
echo "$out" | grep -q "broker\[[0-9]*\] info .*node siteA/node01 registered: 198.18.1.11" ||
	fail "the broker's log does not show node01 of siteA registered"
note "admin.md without systemd ran as written on the lab's hosts"
