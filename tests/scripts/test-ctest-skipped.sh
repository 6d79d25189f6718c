#!/usr/bin/env bash
# scripts-ctest-skipped: scripts/ctest-skipped finds the tests a real ctest
# run skipped, which ctest itself reports as passed.  A throw-away project
# with a test that exits 77 (SKIP_RETURN_CODE), one that passes and one
# whose name has spaces around a dash; then the same without the skip.
#
#   tests/scripts/test-ctest-skipped.sh SRC
set -euo pipefail
src=${1:?usage: test-ctest-skipped.sh SRC}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

project() {
	mkdir -p "$work/$1"
	cat >"$work/$1/CMakeLists.txt" <<-CMAKE
		cmake_minimum_required(VERSION 3.20)
		project(skips NONE)
		enable_testing()
		add_test(NAME passes COMMAND true)
		add_test(NAME "a - b" COMMAND true)
		add_test(NAME lab-thing COMMAND sh -c "exit $2")
		set_tests_properties(lab-thing PROPERTIES SKIP_RETURN_CODE 77)
	CMAKE
	cmake -S "$work/$1" -B "$work/$1/b" >/dev/null
	(cd "$work/$1/b" && ctest) >"$work/$1.log" 2>&1
}

project skip 77
rc=0
out=$("$src/scripts/ctest-skipped" "$work/skip.log") || rc=$?
if [[ $rc -eq 1 && $out == lab-thing ]]; then
	echo "ok   a skipped test: named alone, exit 1 (ctest said: $(grep -o '[0-9]*% tests passed' "$work/skip.log"))"
else
	echo "FAIL a skipped test: exit $rc, '$out' (want 1, 'lab-thing')"
	failed=1
fi

project pass 0
rc=0
out=$("$src/scripts/ctest-skipped" "$work/pass.log") || rc=$?
if [[ $rc -eq 0 && -z $out ]]; then
	echo "ok   no skipped test: nothing named, exit 0"
else
	echo "FAIL no skipped test: exit $rc, '$out' (want 0, nothing)"
	failed=1
fi
exit $failed
