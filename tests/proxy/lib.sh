# shellcheck shell=bash
# shellcheck disable=SC2154 # certs_bin: the test sets it
# Shared by the proxy's shell tests: a scratch directory ($work, removed at
# exit once the proxy and client still running are stopped), a throw-away CA
# with proxy p1's certificate ($ca) and a proxy key ($key); pass/fail
# (counted in $failed), wait_log and stop_pids come from tests/lib/common.sh.
# Needs certs_bin set by the test.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

work=$(mktemp -d "/tmp/${PROXY_TEST:-proxy-test}.XXXXXX")
proxy_pid='' client_pid=''

cleanup() {
  stop_children "$proxy_pid" "$client_pid"
  rm -rf "$work"
}
trap cleanup EXIT

ca=$work/ca
"$certs_bin" --dir "$ca" init >/dev/null
"$certs_bin" --dir "$ca" issue proxy p1 --san 127.0.0.1 >/dev/null
key=$work/proxy.key
(umask 077 && openssl rand -hex 32 >"$key")
