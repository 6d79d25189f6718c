#!/usr/bin/env bash
# scripts-commit-msg: scripts/hooks/commit-msg accepts the messages
# CONTRIBUTING.md asks for and refuses each kind of bad one; then, in a
# scratch repository enabled with CONTRIBUTING.md's one command, git itself
# refuses a bad commit and makes a good one.
#
#   tests/scripts/test-commit-msg.sh SRC
set -euo pipefail
src=${1:?usage: test-commit-msg.sh SRC}
hook=$src/scripts/hooks/commit-msg
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

# judge WANT NAME MESSAGE: the hook's exit status on MESSAGE must be WANT
# (0 accepted, 1 refused); a refusal must say why on stderr.
judge() {
	local want=$1 name=$2 rc=0
	printf '%s\n' "$3" >"$work/msg"
	"$hook" "$work/msg" 2>"$work/err" || rc=$?
	if [ "$rc" != "$want" ]; then
		echo "FAIL: $name: exit $rc, expected $want" >&2
		sed 's/^/    /' "$work/err" >&2
		failed=1
	elif [ "$want" = 1 ] && ! grep -q 'message refused' "$work/err"; then
		echo "FAIL: $name: refused without saying why" >&2
		failed=1
	else
		echo "ok: $name"
	fi
}

x66=$(printf 'x%.0s' {1..66}) # "docs: " + 66 = 72 characters
judge 0 "subject, blank line, why" $'helper: drop the stale socket first\n\nA helper that crashed left it behind.'
judge 0 "subject alone" 'helper: drop the stale socket first'
judge 0 "72 characters" "docs: $x66"
judge 0 "several components, a path" $'tests/lab, bench/README: one lab lock\n\nWhy.'
judge 0 "comments and a verbose diff are not judged" $'# Please enter the commit message\nproxy: splice with 256 KiB pipes\n\nFewer calls.\n# ------------------------ >8 ------------------------\n# Do not modify or remove the line above.\ndiff --git a/x b/x\nnot blank'
judge 0 "a merge git words" "Merge branch 'a-branch-with-a-name-long-enough-to-pass-seventy-two-characters'"
judge 0 "fixup!" "fixup! helper: drop the stale socket first"
judge 1 "73 characters" "docs: ${x66}x"
judge 0 "72 characters in 138 bytes" "docs: $(printf 'é%.0s' {1..66})"
judge 1 "73 characters with accents" "docs: $(printf 'é%.0s' {1..67})"
judge 1 "no component" $'Drop the stale socket first\n\nWhy.'
judge 1 "no space after the colon" $'helper:drop the stale socket first\n\nWhy.'
judge 1 "nothing after the component" 'helper: '
judge 1 "second line not blank" $'helper: drop the stale socket first\nA helper that crashed left it behind.'

# The one command CONTRIBUTING.md gives, in a scratch clone-alike.
repo=$work/repo
git init -q "$repo"
mkdir -p "$repo/scripts/hooks"
cp "$hook" "$repo/scripts/hooks/"
(
	cd "$repo"
	git config core.hooksPath scripts/hooks
	git config user.name test
	git config user.email test@example.org
	echo a >a
	git add a
	if git commit -q -m "a long subject with no component, which the hook must refuse" 2>"$work/err"; then
		echo "FAIL: git commit took a message without a component" >&2
		exit 1
	fi
	grep -q 'message refused' "$work/err" || { echo "FAIL: git commit refused, but not by the hook:" >&2; cat "$work/err" >&2; exit 1; }
	echo "ok: git commit refuses a bad message once core.hooksPath is set"
	git commit -q -m "a: the first file" -m "A test needs one." ||
		{ echo "FAIL: git commit refused a good message" >&2; exit 1; }
	[ "$(git log -1 --format=%s)" = "a: the first file" ] || { echo "FAIL: the commit is not there" >&2; exit 1; }
	echo "ok: git commit takes a good one"
) || failed=1

exit "$failed"
