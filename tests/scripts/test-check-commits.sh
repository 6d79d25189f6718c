#!/usr/bin/env bash
# scripts-commits: every commit since the commit-msg hook came follows it
# (scripts/check-commits on the tree's history), and in a clone (never the
# tree itself) a commit planted with a 73-character subject is named and
# fails the check, while one that follows the rule passes.
#
#   tests/scripts/test-check-commits.sh SRC
set -euo pipefail
src=${1:?usage: test-check-commits.sh SRC}
# shellcheck source=../lib/common.sh
. "$src/tests/lib/common.sh"
need_commands git
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || skip "$src is not a git clone"
[ "$(git -C "$src" rev-parse --is-shallow-repository)" = false ] || skip "$src is a shallow clone"

if out=$("$src/scripts/check-commits" 2>&1); then
	pass "${out#check-commits: }"
else
	fail "the tree's history: $out"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$src" "$work/repo"
# The check and the hook as they are in the tree, committed or not.
cp "$src/scripts/check-commits" "$work/repo/scripts/"
cp "$src/scripts/hooks/commit-msg" "$work/repo/scripts/hooks/"
commit() { git -C "$work/repo" -c user.name=test -c user.email=test@example.org commit -q --allow-empty "$@"; }
long="tests: a subject of seventy-three characters, one more than the rule says"
[ "${#long}" -eq 73 ] || die "the planted subject has ${#long} characters"
commit -m "$long" -m "Planted by scripts-commits."
planted=$(git -C "$work/repo" rev-parse --short=7 HEAD)
rc=0
# Only the planted commit (SINCE is it): the whole history was checked above.
out=$("$work/repo/scripts/check-commits" HEAD 2>&1) || rc=$?
if [ "$rc" -eq 1 ] && grep -q "^check-commits: $planted $long" <<<"$out" &&
	grep -q "^check-commits: 1 of 1 " <<<"$out"; then
	pass "a planted 73-character subject is named ($planted) and fails the check"
else
	fail "a planted 73-character subject: exit $rc, $out"
fi
git -C "$work/repo" reset -q --hard HEAD^
commit -m "tests: a subject that follows the rule" -m "Planted by scripts-commits."
if out=$("$work/repo/scripts/check-commits" HEAD 2>&1); then
	pass "a planted subject that follows the rule passes"
else
	fail "a planted subject that follows the rule: $out"
fi
[ "$failed" -eq 0 ]
