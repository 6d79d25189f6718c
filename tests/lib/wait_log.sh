# shellcheck shell=bash
# wait_log FILE PATTERN PID: waits (bounded, 10 s) for a line matching the
# basic regex PATTERN in FILE while process PID lives; 1 when it ends first
# or the time runs out.  Shared by the broker's and the proxy's shell tests.
wait_log() {
  for _ in $(seq 200); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
