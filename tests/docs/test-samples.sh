#!/usr/bin/env bash
# docs-samples: every output sample the guides show (a block marked
# `<!-- doctest: sample name=NAME test=PATH -->`, README.md here) is checked
# by the test it names, and the check tells a real difference from a value
# that varies.
#
#   test-samples.sh SRC
set -euo pipefail
src=$1
check=$src/tests/docs/check_samples.py
tmp=$(mktemp -d /tmp/qcg-samples.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/lib/common.sh
. "$(dirname "$0")/../lib/common.sh"
n=0
# expect OK|FAIL NAME FILE WHAT: check_samples.py's verdict on FILE.
expect() {
	local rc=0
	python3 "$check" --block "$2" "$3" >"$tmp/verdict" 2>&1 || rc=$?
	if { [ "$1" = OK ] && [ "$rc" -ne 0 ]; } || { [ "$1" = FAIL ] && [ "$rc" -ne 1 ]; }; then
		fail "$2: $4: exit $rc"
		cat "$tmp/verdict"
	fi
}

python3 "$check" --list >"$tmp/list"
(cd "$src" && python3 tests/docs/doc_blocks.py "$tmp" README.md docs/user.md docs/admin.md)
[ -s "$tmp/list" ] || fail "no sample marked in the guides"
while IFS=$'\t' read -r where name test; do
	n=$((n + 1))
	if [ ! -f "$src/$test" ]; then
		fail "$where: sample $name names $test, which does not exist"
	elif ! grep -qF -- "--block $name " "$src/$test"; then
		fail "$where: $test does not check sample $name (check_samples.py --block $name ...)"
	fi
	# The sample itself, and with other numbers, passes; without a line, or
	# with one word changed, it does not.
	block=$(awk -F'\t' -v w="$where" '$2 == w { print $1 }' "$tmp/index")
	text=$tmp/$block.txt
	expect OK "$name" "$text" "the sample as its own output"
	if python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$text" 2>/dev/null; then
		python3 - "$text" >"$tmp/other" <<-'PY'
			import json, sys
			o = json.load(open(sys.argv[1]))
			o.pop(sorted(o)[0])
			print(json.dumps(o))
		PY
		expect FAIL "$name" "$tmp/other" "a key left out"
		continue
	fi
	tr '0-9' '1-90' <"$text" >"$tmp/other"
	expect OK "$name" "$tmp/other" "other numbers"
	lines=$(wc -l <"$text")
	if [ "$lines" -ge 2 ]; then
		sed "$((lines / 2 + 1))d" "$text" >"$tmp/other"
		expect FAIL "$name" "$tmp/other" "a line left out"
	fi
	sed -E '1s/([A-Za-z]{3,})/\1zz/' "$text" >"$tmp/other"
	expect FAIL "$name" "$tmp/other" "a word changed"
done <"$tmp/list"
# --row (a table of messages): qcg-submit's row passes its own line among
# others and fails with a word changed; a key in no row fails.
row="qcg-submit: sbatch failed at fw: cancelling the parts already submitted"
printf 'sbatch: error: x\n%s\n' "$row" >"$tmp/row-ok"
printf '%s\n' "${row/parts/jobs}" >"$tmp/row-bad"
python3 "$check" --row "sbatch failed at" "$tmp/row-ok" >"$tmp/verdict" 2>&1 ||
	{ fail "--row: the row's own line does not pass"; cat "$tmp/verdict"; }
! python3 "$check" --row "sbatch failed at" "$tmp/row-bad" >"$tmp/verdict" 2>&1 ||
	fail "--row: a changed word passes"
! python3 "$check" --row "no such message" "$tmp/row-ok" >"$tmp/verdict" 2>&1 ||
	fail "--row: a key in no row passes"
[ "$failed" = 0 ] && echo "ok: $n samples, each checked by the test it names"
[ "$failed" -eq 0 ]
