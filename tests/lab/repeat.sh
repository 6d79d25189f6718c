#!/usr/bin/env bash
# Hunts a rare lab-test failure: ROUNDS times, a fresh lab (down, up), then the
# given lab tests in the order given (CI's order, for a failure that needs the
# tests before it).  Stops at the first failure and leaves the lab up, so the
# services' full logs (QCG_LAB_DIR/log, info level) can be read; prints where.
# Not run by ctest.  Needs root and a build, like the lab tests.
#
#   tests/lab/repeat.sh ROUNDS test-declarations.sh test-probe.sh
#   tests/lab/repeat.sh 3 ../trixie/test-trixie-lab.sh   (paths from tests/lab)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:?usage: repeat.sh ROUNDS TEST-SCRIPT...}
shift
[ $# -gt 0 ] || { echo "usage: repeat.sh ROUNDS TEST-SCRIPT..." >&2; exit 2; }
export QCG_BUILD_DIR=${QCG_BUILD_DIR:-$here/../../build}
export QCG_LAB_TEST_DIR=${QCG_LAB_TEST_DIR:-$QCG_BUILD_DIR/tests/lab}
out=$(mktemp -d "${TMPDIR:-/tmp}/qcg-lab-repeat.XXXXXX")
for ((i = 1; i <= rounds; i++)); do
	bash "$here/test-down.sh" >"$out/down.log" 2>&1 || true
	bash "$here/test-up.sh" >"$out/up.log" 2>&1 || { echo "round $i: lab-up failed: $out/up.log"; exit 1; }
	for t in "$@"; do
		if ! bash "$here/$t" >"$out/${t##*/}.log" 2>&1; then
			echo "round $i: $t failed: its output in $out/${t##*/}.log, the services' logs in ${QCG_LAB_DIR:-/run/qcg-lab}/log (the lab is up: lab/qcg-lab down when done)"
			exit 1
		fi
	done
	echo "round $i: all passed ($(date +%T))"
done
bash "$here/test-down.sh" >"$out/down.log" 2>&1
rm -rf "$out"
