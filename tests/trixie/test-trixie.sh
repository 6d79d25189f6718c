#!/usr/bin/env bash
#
# trixie-mpi: the tree built and tested on Debian 13 (trixie): Open MPI 5.0,
# PMIx 5, gcc 14, OpenSSL 3.5, gSOAP 2.8.135, libuv 1.50.  In a Debian 13
# root made with mmdebstrap from the mirror apt uses here, it builds the
# whole tree with warnings as errors and runs every test that needs neither
# the lab nor a network namespace of its own nor docker, four at a time as
# on Debian 12 (ctest -LE 'lab|netns|docker|trixie'): the unit tests, the
# MPI suites (mpi-loopback, mpi-stall, ...) and the launch path's
# (launch-loopback: agents, qcg-launch and qcg-mpirun starting PRRTE's
# prted) against its Open MPI.
#
#   tests/trixie/test-trixie.sh [--refresh] [--shell] [-R REGEX]
#       --refresh   make the root again (else it is made once and cached)
#       --shell     a shell in the root (the tree at /src, read-only; build
#                   with: cmake -S /src -B /build && cmake --build /build)
#       -R REGEX    only the tests whose names match (ctest -R)
#   exit 0 passed, 1 failed, 77 skipped (not root, no mmdebstrap)
#
# The root, and how it runs (overlay, namespaces, a veth: PRRTE's mpirun
# crashes on a host with lo only): lab/debian13.sh.  The tree is
# bind-mounted read-only at /src, the build is /build.  Nothing of the host
# is changed.  QCG_TRIXIE_ROOT and QCG_DEBIAN_MIRROR as in lab/debian13.sh.
set -euo pipefail
export LC_ALL=C
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PROG=trixie

refresh=no shell=no only=
while [ $# -gt 0 ]; do
	a=$1
	shift
	case $a in
	--refresh) refresh=yes ;;
	--shell) shell=yes ;;
	-R)
		[ $# -gt 0 ] || { echo "$PROG: -R needs a regular expression" >&2; exit 2; }
		only=$1
		shift
		;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "$PROG: unknown argument $a (see --help)" >&2; exit 2 ;;
	esac
done

# shellcheck source=../../lab/debian13.sh
. "$REPO/lab/debian13.sh"
trixie_require
if [ "$refresh" = yes ]; then trixie_root --refresh; else trixie_root; fi

# --- a run ------------------------------------------------------------------
scratch=$(mktemp -d /tmp/qcg-trixie.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

# What runs in the root: a build with warnings as errors, then the suites.
cat >"$scratch/run.sh" <<'EOF'
set -uo pipefail
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
# The broker's reflector runs as its own user by default, as the package
# makes it (scripts/install-deps does the same on Debian 12).
getent passwd qcg-reflector >/dev/null ||
	adduser --system --group --quiet --home /nonexistent --no-create-home qcg-reflector
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
# Four at a time, as scripts/test runs them on Debian 12: most of their
# time is waiting on daemons and deadlines.
t0=$SECONDS
echo "== tests"
set -- -j4 --output-on-failure --timeout 600 -LE 'lab|netns|docker|trixie|packages'
[ -z "${ONLY:-}" ] || set -- "$@" -R "$ONLY"
(cd /build && ctest "$@") 2>&1 | tee /tmp/ctest.log || rc=1
# As root with every package installed, a skip is a check that stopped running.
if ! skipped=$(/src/scripts/ctest-skipped /tmp/ctest.log); then
	echo "FAIL skipped in the root, where every package is installed:" $skipped
	rc=1
fi
echo "== tests: $((SECONDS - t0)) s"
exit $rc
EOF

if [ "$shell" = yes ]; then cmd=(bash -i); else cmd=(bash /run.sh); fi
rc=0
trixie_run "" "$scratch/run.sh" ONLY="$only" -- "${cmd[@]}" || rc=$?
exit $rc
