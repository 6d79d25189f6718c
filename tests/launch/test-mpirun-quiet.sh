#!/usr/bin/env bash
# launch-mpirun-quiet: what qcg-mpirun passes on of mpirun's own output.  A
# stand-in mpirun first in PATH (it answers --version as Open MPI 4.1, or 5.0
# for the second round) writes, among lines of its own, the warning Open MPI
# prints when it loses a harmless race with its launcher ("plm:rsh: Warning:
# setpgid(P,P) failed in parent with errno=Permission denied(13)"), which
# comes now and then in real jobs.  qcg-mpirun must leave that line out,
# pass every other line of stdout and stderr unchanged and in order, and exit
# with mpirun's status.
#   tests/launch/test-mpirun-quiet.sh BUILD_DIR    exit 0 passed, 1 failed
set -euo pipefail
build=${1:?usage: test-mpirun-quiet.sh BUILD_DIR}
qcg_mpirun=$build/launch/qcg-mpirun
# shellcheck source=tests/lib/common.sh
. "$(dirname "$0")/../lib/common.sh"
need_built "$qcg_mpirun"
work=$(mktemp -d "${TMPDIR:-/tmp}/qcg-mpirun-quiet.XXXXXX")
trap 'rm -rf "$work"' EXIT

mkdir "$work/bin"
cat >"$work/bin/mpirun" <<'STUB'
#!/bin/sh
if [ "$1" = --version ]; then echo "mpirun (Open MPI) $STUB_OMPI"; exit 0; fi
echo "out one"
echo "[fw1:4271] plm:$STUB_PLM: Warning: setpgid(4278,4278) failed in parent with errno=Permission denied(13)" >&2
echo "err one" >&2
echo "plm:$STUB_PLM: Warning: setpgid(12,12) failed in parent with errno=Permission denied(13)" >&2
echo "[fw1:4271] plm:$STUB_PLM: Warning: setpgid(4278,4278) failed in parent with errno=No such process(3)" >&2
echo "err two" >&2
printf 'a rank wrote a NUL \000 and \377 here\n' >&2
echo "err three" >&2
echo "out two"
exit 3
STUB
chmod +x "$work/bin/mpirun"
echo "a1" >"$work/hosts"
export QCG_JOB=quiet-test QCG_JOB_SECRET=00112233445566778899aabbccddeeff
# Open MPI 5's component paths are cached per mpirun: here, not in the home.
export XDG_CACHE_HOME=$work/cache

for round in "4.1.4 rsh" "5.0.7 ssh"; do
	read -r ompi plm <<<"$round"
	rc=0
	STUB_OMPI=$ompi STUB_PLM=$plm PATH="$work/bin:$PATH" \
		"$qcg_mpirun" --host-list "$work/hosts" -np 1 true >"$work/out" 2>"$work/err" || rc=$?
	[ "$rc" = 3 ] && pass "Open MPI $ompi: mpirun's status (3)" || fail "Open MPI $ompi: exit $rc, not mpirun's 3"
	if [ "$(cat "$work/out")" = "$(printf 'out one\nout two')" ]; then
		pass "Open MPI $ompi: stdout as mpirun wrote it"
	else fail "Open MPI $ompi: stdout: $(cat "$work/out")"; fi
	# Byte for byte: a line with a NUL or a stray byte passes as well
	# (grep without -a took such input as binary and printed only
	# "binary file matches").
	{
		printf '%s\n' "err one" \
			"[fw1:4271] plm:$plm: Warning: setpgid(4278,4278) failed in parent with errno=No such process(3)" \
			"err two"
		printf 'a rank wrote a NUL \000 and \377 here\n'
		echo "err three"
	} >"$work/want"
	if cmp -s "$work/err" "$work/want"; then
		pass "Open MPI $ompi: the setpgid race's lines left out, every other byte in order"
	else
		fail "Open MPI $ompi: stderr:"
		cat -v "$work/err" | sed 's/^/     | /'
	fi
done
[ "$failed" -eq 0 ]
