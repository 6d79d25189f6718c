#!/usr/bin/env bash
# launch-mpirun-cache: on Open MPI 5 qcg-mpirun gives the ranks Open MPI's
# and PMIx's component paths, which it learns from ompi_info and ldd (~170 ms
# a call); it keeps their answers in the user's cache directory per mpirun
# (its path and modification time).  Stand-ins first in PATH: mpirun (answers
# --version as Open MPI 5.0; reached through a link), ompi_info and ldd, each
# counting its calls (ldd is asked about the file the link leads to).
# The second call asks neither and prints the same command; a changed mpirun
# (touched), an unwritable cache directory or a user's own paths are each
# handled in turn: asked again, asked every time,
# left alone.
#   tests/launch/test-mpirun-cache.sh BUILD_DIR    exit 0 passed, 1 failed
set -euo pipefail
build=${1:?usage: test-mpirun-cache.sh BUILD_DIR}
qcg_mpirun=$build/launch/qcg-mpirun
# shellcheck source=tests/lib/common.sh
. "$(dirname "$0")/../lib/common.sh"
need_built "$qcg_mpirun"
work=$(mktemp -d "${TMPDIR:-/tmp}/qcg-mpirun-cache.XXXXXX")
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/bin" "$work/real" "$work/lib/pmix" "$work/ompi"
: >"$work/lib/libpmix.so.2"
cat >"$work/real/mpirun" <<'STUB'
#!/bin/sh
if [ "$1" = --version ]; then echo "mpirun (Open MPI) 5.0.7"; exit 0; fi
exit 0
STUB
cat >"$work/bin/ompi_info" <<STUB
#!/bin/sh
echo x >>"$work/ompi_info.calls"
echo 'mca:mca:base:param:mca_base_component_path:value:"$work/ompi"'
STUB
cat >"$work/bin/ldd" <<STUB
#!/bin/sh
echo "\$1" >>"$work/ldd.calls"
printf '\tlibpmix.so.2 => %s (0x00007f0000000000)\n' "$work/lib/libpmix.so.2"
STUB
chmod +x "$work/bin/"* "$work/real/mpirun"
ln -s "$work/real/mpirun" "$work/bin/mpirun"
echo "a1" >"$work/hosts"
export QCG_JOB=cache-test QCG_JOB_SECRET=00112233445566778899aabbccddeeff PATH="$work/bin:$PATH"
unset OMPI_MCA_mca_base_component_path PMIX_MCA_mca_base_component_path

# run OUT: qcg-mpirun --print-command into OUT; calls: "OMPI_INFO LDD" so far.
run() { "$qcg_mpirun" --host-list "$work/hosts" --print-command -np 1 true >"$1"; }
: >"$work/ompi_info.calls"
: >"$work/ldd.calls"
calls() { echo "$(wc -l <"$work/ompi_info.calls") $(wc -l <"$work/ldd.calls")"; }
want="OMPI_MCA_mca_base_component_path=$work/ompi PMIX_MCA_mca_base_component_path=$work/lib/pmix"

export XDG_CACHE_HOME=$work/cache
run "$work/first"
if grep -qF " $want " "$work/first" && [ "$(calls)" = "1 1" ] &&
	[ "$(cat "$work/ldd.calls")" = "$work/real/mpirun" ]; then
	pass "first call: ompi_info and ldd (of the linked mpirun) asked once, both paths given to mpirun"
else fail "first call: calls $(calls), ldd of $(cat "$work/ldd.calls"), command: $(cat "$work/first")"; fi
run "$work/second"
if cmp -s "$work/first" "$work/second" && [ "$(calls)" = "1 1" ]; then
	pass "second call: the same command, neither asked again (cached in \$XDG_CACHE_HOME/qcg)"
else fail "second call: calls $(calls), command: $(cat "$work/second")"; fi
touch -d '1 hour ago' "$work/bin/mpirun"
run "$work/third"
if cmp -s "$work/first" "$work/third" && [ "$(calls)" = "2 2" ]; then
	pass "a changed mpirun (its mtime): asked again"
else fail "a changed mpirun: calls $(calls), command: $(cat "$work/third")"; fi

# A cache directory that cannot be made (a file in its place): asked each time.
: >"$work/nodir"
export XDG_CACHE_HOME=$work/nodir
run "$work/fourth" && run "$work/fifth"
if cmp -s "$work/first" "$work/fourth" && cmp -s "$work/first" "$work/fifth" && [ "$(calls)" = "4 4" ]; then
	pass "no cache directory to be had: asked every time, the same command"
else fail "no cache directory: calls $(calls), command: $(cat "$work/fifth")"; fi

# The user's own paths are theirs: nothing asked, nothing changed.
export XDG_CACHE_HOME=$work/cache
OMPI_MCA_mca_base_component_path=/mine PMIX_MCA_mca_base_component_path=/pmine run "$work/sixth"
if ! grep -q "component_path=" "$work/sixth" && [ "$(calls)" = "4 4" ]; then
	pass "the user's own paths: left alone, nothing asked"
else fail "the user's own paths: calls $(calls), command: $(cat "$work/sixth")"; fi
[ "$failed" -eq 0 ]
