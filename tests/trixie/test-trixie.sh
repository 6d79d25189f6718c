#!/usr/bin/env bash
#
# trixie-mpi: the tree built and btl_qcg run on Debian 13 (trixie): Open MPI
# 5.0, PMIx 5, gcc 14, OpenSSL 3.5, gSOAP 2.8.135, libuv 1.50.  In a Debian 13
# root made with mmdebstrap from the mirror apt uses here, it builds the
# whole tree with warnings as errors and runs the MPI suites of tests/mpi
# (mpi-loopback, mpi-stall) and the launch path's (launch-loopback: agents,
# qcg-launch and qcg-mpirun starting PRRTE's prted) against its Open MPI, as
# they run on Debian 12's.
#
#   tests/trixie/test-trixie.sh [--refresh] [--unit] [--shell]
#       --refresh   make the root again (else it is made once and cached)
#       --unit      also the tests that need neither the lab nor a network
#                   namespace of their own nor docker (ctest -LE ...), one
#                   at a time: about 7 minutes more (not in ctest's run)
#       --shell     a shell in the root (the tree at /src, read-only; build
#                   with: cmake -S /src -B /build && cmake --build /build)
#   exit 0 passed, 1 failed, 77 skipped (not root, no mmdebstrap)
#
# The root, and how it runs (overlay, namespaces, a veth: PRRTE's mpirun
# crashes on a host with lo only): tests/trixie/root.sh.  The tree is
# bind-mounted read-only at /src, the build is /build.  Nothing of the host
# is changed.  QCG_TRIXIE_ROOT and QCG_DEBIAN_MIRROR as in root.sh.
set -euo pipefail
export LC_ALL=C
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PROG=trixie

refresh=no shell=no unit=no
for a in "$@"; do
	case $a in
	--refresh) refresh=yes ;;
	--shell) shell=yes ;;
	--unit) unit=yes ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "$PROG: unknown argument $a (see --help)" >&2; exit 2 ;;
	esac
done

# shellcheck source=root.sh
. "$REPO/tests/trixie/root.sh"
trixie_require
if [ "$refresh" = yes ]; then trixie_root --refresh; else trixie_root; fi

# --- a run ------------------------------------------------------------------
scratch=$(mktemp -d /tmp/qcg-trixie.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

# What runs in the root: a build with warnings as errors, then the suites.
cat >"$scratch/run.sh" <<'EOF'
set -u
cd /
ompi=$(ompi_info --parsable 2>/dev/null | sed -n "s/^ompi:version:full://p")
echo "== Debian $(cat /etc/debian_version), Open MPI $ompi, $(gcc --version | head -n 1)"
t0=$SECONDS
if ! { cmake -S /src -B /build -DQCG_WERROR=ON >/build.log 2>&1 &&
	cmake --build /build -j"$(nproc)" >>/build.log 2>&1; }; then
	grep -E -B2 -A8 'error|Error' /build.log | head -n 80
	echo "FAIL build (warnings are errors)"
	exit 1
fi
echo "== built in $((SECONDS - t0)) s"
rc=0
# mpirun launching on another node (through a launch agent that fails): an
# error, not the segfault of a host with lo only.
st=0
timeout 60 mpirun --allow-run-as-root --host qcg-none -n 1 --prtemca plm_ssh_agent false true \
	>/tmp/none.out 2>&1 || st=$?
if [ "$st" -eq 0 ] || [ "$st" -ge 124 ]; then
	tail -n 5 /tmp/none.out
	echo "FAIL mpirun through a failing launch agent: exit $st (want an error, not a crash)"
	rc=1
fi
for t in mpi/test-loopback mpi/test-stall launch/test-launch-loopback; do
	t0=$SECONDS
	echo "== $t"
	bash "/src/tests/$t.sh" /build /src || rc=1
	echo "== $t: $((SECONDS - t0)) s"
done
if [ "${UNIT:-no}" = yes ]; then
	t0=$SECONDS
	echo "== unit tests"
	(cd /build && ctest --output-on-failure --timeout 600 -LE 'lab|netns|docker|trixie' -E '^(mpi-|launch-loopback$)') || rc=1
	echo "== unit tests: $((SECONDS - t0)) s"
fi
exit $rc
EOF

if [ "$shell" = yes ]; then cmd=(bash -i); else cmd=(bash /run.sh); fi
rc=0
trixie_run "" "$scratch/run.sh" UNIT="$unit" -- "${cmd[@]}" || rc=$?
exit $rc
