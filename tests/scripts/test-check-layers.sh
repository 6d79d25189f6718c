#!/usr/bin/env bash
# scripts-layers: scripts/check-layers passes on the tree as it is.
# scripts-layers-planted: in a copy of the tree (never the tree itself), an
# include against each kind of rule is planted and each is reported with its
# file and line, and nothing else is; the untouched copy passes first, so the
# copy is a fair one.
#
#   tests/scripts/test-check-layers.sh SRC [planted]
set -euo pipefail
src=${1:?usage: test-check-layers.sh SRC [planted]}
check=$src/scripts/check-layers
if [ "${2:-}" != planted ]; then
	exec "$check" "$src"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$src" ls-files -z '*.c' '*.h' | (cd "$src" && xargs -0 tar cf -) | tar xf - -C "$work"
"$check" "$work" >"$work/clean.out" || {
	echo "FAIL: the untouched copy does not pass:" >&2
	cat "$work/clean.out" >&2
	exit 1
}

# plant FILE LINE-TEXT: appends an include to FILE, remembers FILE:LINE.
expected=()
plant() {
	printf '%s\n' "$2" >>"$work/$1"
	expected+=("$1:$(wc -l <"$work/$1"):")
}
plant core/hex.c '#include "log.h"'              # core -> util
plant util/ticker.c '#include "soap_client.h"'   # util -> common
plant util/tally.c '#include <openssl/ssl.h>'    # TLS below common
plant launch/wire.c '#include "soapH.h"'         # gSOAP (generated) in launch
plant helper/main.c '#include "handshake.h"'     # libqcgconn's internals
plant btl_qcg/io.c '#include "link.h"'           # btl_qcg -> launch

rc=0
"$check" "$work" >"$work/planted.out" 2>&1 || rc=$?
failed=0
[ "$rc" = 1 ] || {
	echo "FAIL: exit $rc with ${#expected[@]} violations planted, expected 1" >&2
	failed=1
}
for at in "${expected[@]}"; do
	if grep -q "^$at" "$work/planted.out"; then
		echo "ok: $(grep "^$at" "$work/planted.out")"
	else
		echo "FAIL: $at not reported" >&2
		failed=1
	fi
done
found=$(grep -c '^[^ ]*:[0-9]*: ' "$work/planted.out" || true)
[ "$found" = "${#expected[@]}" ] || {
	echo "FAIL: $found violations reported, ${#expected[@]} planted:" >&2
	cat "$work/planted.out" >&2
	failed=1
}
exit "$failed"
