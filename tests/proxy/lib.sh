# shellcheck shell=bash
# shellcheck disable=SC2154 # certs_bin: the test sets it
# Shared by the proxy's shell tests: a scratch directory ($work, removed at
# exit with the proxy and client still running), pass/fail counted in $fails,
# a throw-away CA with proxy p1's certificate ($ca) and a proxy key ($key),
# and a bounded wait on a log line.  Needs certs_bin set by the test.

work=$(mktemp -d "/tmp/${PROXY_TEST:-proxy-test}.XXXXXX")
fails=0 proxy_pid='' client_pid=''

cleanup() {
  for pid in $proxy_pid $client_pid; do kill -9 "$pid" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok: $*"; }

ca=$work/ca
"$certs_bin" --dir "$ca" init >/dev/null
"$certs_bin" --dir "$ca" issue proxy p1 --san 127.0.0.1 >/dev/null
key=$work/proxy.key
(umask 077 && openssl rand -hex 32 >"$key")

# shellcheck source=tests/lib/wait_log.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/wait_log.sh"
