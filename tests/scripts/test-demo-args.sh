#!/usr/bin/env bash
# scripts-demo-args: scripts/demo's choice of Debian release (--debian 12|13,
# QCG_DEMO_DEBIAN) as a user meets it without the lab: --help names both;
# a release it does not run, a flag without its value or an unknown argument
# ends it with status 2 and one line saying what is wrong, before it installs,
# builds or brings up anything (nothing on stdout); the flag wins over the
# variable.  Runs nothing as root, under 1 s.
#
#   tests/scripts/test-demo-args.sh SRC
set -euo pipefail
src=${1:?usage: test-demo-args.sh SRC}
demo=$src/scripts/demo
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

# refused NAME PATTERN [ENV=VALUE...] -- ARGS...: demo exits 2, prints nothing on
# stdout and exactly one line on stderr, matching PATTERN.
refused() {
	local name=$1 pat=$2 rc=0
	local -a envs=()
	shift 2
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	env -u QCG_DEMO_DEBIAN ${envs[@]+"${envs[@]}"} "$demo" "$@" >"$work/out" 2>"$work/err" </dev/null || rc=$?
	if [ "$rc" != 2 ] || [ -s "$work/out" ] || [ "$(wc -l <"$work/err")" != 1 ] ||
		! grep -qE -- "$pat" "$work/err"; then
		echo "FAIL: $name: exit $rc (want 2), stdout $(wc -l <"$work/out") lines (want 0), stderr (want one line matching '$pat'):" >&2
		sed 's/^/    | /' "$work/out" "$work/err" >&2
		failed=1
	else
		echo "ok: $name: $(cat "$work/err")"
	fi
}

rc=0
env -u QCG_DEMO_DEBIAN "$demo" --help >"$work/help" 2>&1 </dev/null || rc=$?
if [ "$rc" = 0 ] && grep -q -- '--debian 12|13' "$work/help" && grep -q 'QCG_DEMO_DEBIAN' "$work/help" &&
	grep -q -- '--batch slurm' "$work/help"; then
	echo "ok: --help names --debian 12|13, QCG_DEMO_DEBIAN and --batch slurm"
else
	echo "FAIL: --help: exit $rc, or it does not name --debian 12|13, QCG_DEMO_DEBIAN and --batch slurm:" >&2
	sed 's/^/    | /' "$work/help" >&2
	failed=1
fi

refused "--debian 11" "^demo: --debian wants 12 or 13, not '11'$" -- --debian 11
refused "--debian without a value" "^demo: --debian wants 12 or 13$" -- --debian
refused "QCG_DEMO_DEBIAN=14" "^demo: QCG_DEMO_DEBIAN wants 12 or 13, not '14'$" QCG_DEMO_DEBIAN=14 --
refused "the flag wins over the variable" "^demo: --debian wants 12 or 13, not 'x'$" QCG_DEMO_DEBIAN=13 -- --debian x
refused "--batch pbs" "^demo: --batch wants slurm$" -- --debian 13 --batch pbs
refused "an unknown argument" "^demo: unknown argument '--debain'" -- --debain 13

[ "$failed" = 0 ] || exit 1
echo "scripts-demo-args: the demo's release choice and its refusals"
