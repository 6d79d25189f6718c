#!/usr/bin/env bash
# lab-revocation: docs/admin.md section 9's revocation, as written, on a running
# lab (issue 37): while an MPI job runs between open and nata, the CA revokes
# sym's frontend and natb1's helper, and every service reloads (SIGHUP, what
# systemctl reload sends; the lab's services share one crl.pem, so there is
# nothing to copy).  Within a second the broker and natb's frontend have cut
# them (their log lines), the broker no longer lists sym; they cannot come back
# (each logs the alert's reason); the job, up before and after, passes.  At the end both get new
# certificates and are started again, so the lab is whole for the next test.
. "$(dirname "$0")/test-lib.sh"

require_lab
require_services
require_mpi_programs
certs=$LAB_SRC/../../certs/qcg-certs
ca=$LAB_STATE/certs
log=$LAB_STATE/log

# The address sym's frontend is dialled at, for its new certificate.
san=$(openssl x509 -noout -ext subjectAltName -in "$ca/frontend-sym.crt" |
	grep -o 'IP Address:[0-9.]*' | head -n 1 | cut -d: -f2)
[ -n "$san" ] || fail "no address in sym's frontend certificate"

# New certificates for the two revoked services, and the lab whole again.
restore() {
	"$certs" --dir "$ca" issue frontend sym --san "$san" --force >/dev/null 2>&1 || true
	"$certs" --dir "$ca" issue helper natb/natb1 --force >/dev/null 2>&1 || true
	"$LAB" service stop sym-frontend >/dev/null 2>&1 || true
	"$LAB" service stop natb1-helper >/dev/null 2>&1 || true
	"$LAB" up >/dev/null 2>&1 || echo "restore: qcg-lab up failed" >&2
}
scratch
trap 'scratch_cleanup; restore' EXIT
if [ ! -s "$ca/crl.pem" ] || ! grep -q "^crl = " "$LAB_STATE/etc/broker.conf"; then
	fail "the lab's services load no CRL (crl = ...)"
fi

clusters=$(broker_stat clusters)
# A ring of many laps: it runs across the revocation (its ranks are up
# before, still up after).
timeout -k 10 240 "$LAB" mpirun --sites open,nata -- "$progs/qcg-mpi-ring" 50000 >"$WORK/mpi.out" 2>&1 &
mpi=$!
BG_PIDS+=("$mpi")
ranks_up() { [ "$(pgrep -c -f "$progs/qcg-mpi-ring" || true)" -ge 4 ]; }
poll 60 "the job's four ranks" ranks_up || { show "$WORK/mpi.out"; fail "the MPI job did not start"; }
sleep 1

# The section's steps: revoke (writes crl.pem), then reload every service.
"$certs" --dir "$ca" revoke frontend sym >"$WORK/revoke.out" 2>&1 || fail "revoke frontend sym"
"$certs" --dir "$ca" revoke helper natb/natb1 >>"$WORK/revoke.out" 2>&1 || fail "revoke helper natb/natb1"
t0=$(ms)
for pidfile in "$LAB_STATE"/run/*.pid; do kill -HUP "$(cat "$pidfile")" 2>/dev/null || true; done

cut_sym() { grep -q "CRL: frontend sym (certificate serial [0-9A-F]*) is revoked" "$log/broker.log"; }
cut_natb1() { grep -q "CRL: helper natb/natb1 (certificate serial [0-9A-F]*) is revoked" "$log/frontend-natb.log"; }
poll 1 "the broker to cut sym's frontend" cut_sym || fail "the broker did not cut sym's frontend within 1 s"
poll 1 "natb's frontend to cut natb1's helper" cut_natb1 ||
	fail "natb's frontend did not cut natb1's helper within 1 s"
note "both cut within $(($(ms) - t0)) ms"
ranks_up || fail "the MPI job ended before the revocation took effect: make it longer"
dropped() { [ "$(broker_stat clusters)" = $((clusters - 1)) ]; }
poll 2 "the broker to drop cluster sym" dropped || fail "the broker still counts $(broker_stat clusters) clusters"

refused() { grep -q "TLS alert: certificate revoked" "$1"; }
poll 30 "sym's frontend to be told why" refused "$log/frontend-sym.log" ||
	fail "sym's frontend does not say its certificate is revoked"
poll 30 "natb1's helper to be told why" refused "$log/helper-natb1.log" ||
	fail "natb1's helper does not say its certificate is revoked"
sleep 3
dropped || fail "cluster sym came back"

rc=0
wait_exit "$mpi" 240 || rc=$?
if [ "$rc" -ne 0 ] || ! grep -q "^PASS ring" "$WORK/mpi.out"; then
	show "$WORK/mpi.out" 30
	fail "the MPI job between open and nata failed (exit $rc) across the revocation"
fi
note "the job between open and nata passed: $(grep '^PASS' "$WORK/mpi.out")"
