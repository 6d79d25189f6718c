# shellcheck shell=bash
# shellcheck disable=SC2154 # broker_bin, call_bin, certs_bin: the test sets them
# Shared by the broker's shell tests: pass/fail, a throw-away CA, bounded
# waits on log lines, a real qcg-broker on 127.0.0.1, and one call through
# broker-call.  Needs broker_bin, call_bin, certs_bin and url set by the test,
# which counts failures in $fails.

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok: $*"; }

# make_ca DIR: a CA in DIR (then $ca) with the broker's certificate, and one
# frontend certificate per further argument (a cluster name).
make_ca() {
  ca=$1
  shift
  "$certs_bin" --dir "$ca" init >/dev/null
  "$certs_bin" --dir "$ca" issue broker --san 127.0.0.1 >/dev/null
  for c in "$@"; do "$certs_bin" --dir "$ca" issue frontend "$c" --san 127.0.0.1 >/dev/null; done
}

# shellcheck source=tests/lib/wait_log.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/wait_log.sh"

# Waits (bounded) until $2 matches at least $3 lines of log $1 while process $4 lives.
wait_count() {
  for _ in $(seq 200); do
    [ "$(grep -c -- "$2" "$1" 2>/dev/null)" -ge "$3" ] && return 0
    kill -0 "$4" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

start_broker() { # log pid-var port extra-args...
  local log=$1 var=$2 p=$3
  shift 3
  "$broker_bin" --listen 127.0.0.1 --port "$p" --ca "$ca/ca.crt" --cert "$ca/broker-broker.pem" \
    --log-level debug "$@" 2>"$log" &
  printf -v "$var" %s $!
  wait_log "$log" "listening" "${!var}" || { echo "broker did not start:"; cat "$log"; exit 1; }
}

# call CERT-NAME ARGS... : prints the reply; $rc is the exit status.
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
  if [ $rc -eq 3 ] && [[ $out == "fault $sub:"* ]]; then pass "$what ($out)"
  else fail "$what: expected fault $sub, got rc=$rc: $out"; fi
}

