# shellcheck shell=bash
# shellcheck disable=SC2154 # broker_bin, call_bin, certs_bin: the test sets them
# Shared by the broker's shell tests: a throw-away CA, a real qcg-broker on
# 127.0.0.1, and one call through soap-call (call_bin); pass/fail (counted in
# $failed), the waits on log lines and stop_children for the test's cleanup
# come from tests/lib/common.sh, reading the answer (field, out_has, item)
# from tests/lib/soap-call.sh.  Needs broker_bin, call_bin, certs_bin and
# url set by the test.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
# shellcheck source=tests/lib/soap-call.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/soap-call.sh"

# make_ca DIR: a CA in DIR (then $ca) with the broker's certificate, and one
# frontend certificate per further argument (a cluster name).
make_ca() {
  ca=$1
  shift
  "$certs_bin" --dir "$ca" init >/dev/null
  "$certs_bin" --dir "$ca" issue broker --san 127.0.0.1 >/dev/null
  for c in "$@"; do "$certs_bin" --dir "$ca" issue frontend "$c" --san 127.0.0.1 >/dev/null; done
}

start_broker() { # log pid-var port extra-args...
  local log=$1 var=$2 p=$3
  shift 3
  "$broker_bin" --listen 127.0.0.1 --port "$p" --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" \
    --log-level debug "$@" 2>"$log" &
  printf -v "$var" %s $!
  wait_log "$log" "listening" "${!var}" || { echo "broker did not start:"; cat "$log"; exit 1; }
}

# call CERT-FILE [--protocol N] OPERATION FIELD=VALUE...: the answer in
# $out, soap-call's exit status in $rc; the broker is ${URL:-$url}.
call() {
  local cert=$1
  shift
  out=$("$call_bin" --url "${URL:-$url}" --ca "$ca/ca.crt" --cert "$cert" "$@" 2>&1)
  rc=$?
}
expect_ok() { # description cert args...
  local what=$1
  shift
  call "$@"
  if [ $rc -eq 0 ]; then pass "$what"; else fail "$what: $out"; fi
}
expect_fault() { # description subcode cert args...
  local what=$1 sub=$2
  shift 2
  call "$@"
  if [ $rc -eq 1 ] && [[ $out == "fault $sub:"* ]]; then pass "$what ($out)"
  else fail "$what: expected fault $sub, got rc=$rc: $out"; fi
}

