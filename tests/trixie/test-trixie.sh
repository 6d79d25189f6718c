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
# The root: $QCG_TRIXIE_ROOT (default /var/cache/qcg-debian/trixie), made
# when missing or when the package list below changed (~1 min, 1.3 GB) and
# never written to afterwards: each run sees it through an overlay whose
# writable layer is a scratch directory, in namespaces of its own (mount,
# network, pid: whatever the tests leave running ends with it).  The network
# has lo and one veth pair (qcg-tx0, 198.51.100.1/24, and its peer): PRRTE's
# mpirun dereferences a NULL alias list when it launches on another node from
# a host with no interface but lo (a segfault in prte_check_host_is_local),
# and its daemons never use lo, so no real node is without one.  The tree is bind-mounted read-only at /src, the build is /build.
# Nothing of the host is changed.  QCG_DEBIAN_MIRROR overrides the mirror.
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

skip() { echo "SKIPPED: $*"; exit 77; }
say() { printf '== %s\n' "$*"; }
[ "$(id -u)" -eq 0 ] || skip "needs root (mmdebstrap, namespaces, chroot)"
command -v mmdebstrap >/dev/null || skip "mmdebstrap not installed (scripts/install-deps)"
command -v unshare >/dev/null || skip "unshare not installed"

# What the tree needs to build and the MPI suites to run; for --unit, curl
# and python3-zeep (broker-service), man-db and groff-base (common_cli).
# scripts/install-deps has the Debian 12 list this follows.
packages=(build-essential cmake pkg-config gsoap libgsoap-dev libssl-dev openssl
	libnetfilter-queue-dev libmnl-dev libpcap-dev libuv1-dev libopenmpi-dev openmpi-bin
	iproute2 iptables procps psmisc curl python3-zeep man-db groff-base)
root=${QCG_TRIXIE_ROOT:-/var/cache/qcg-debian/trixie}
stamp=$root/.qcg-packages

# The first mirror of apt's Debian sources here (as docker/build-images).
mirror=${QCG_DEBIAN_MIRROR:-}
[ -n "$mirror" ] || mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)

# --- the root, made once (one maker at a time) ---------------------------
mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock 9
if [ "$refresh" = yes ] || [ "$(cat "$stamp" 2>/dev/null)" != "${packages[*]}" ]; then
	[ -n "$mirror" ] || { echo "$PROG: no Debian mirror in apt's sources (set QCG_DEBIAN_MIRROR)" >&2; exit 1; }
	say "making the Debian 13 root in $root from $mirror"
	t0=$SECONDS
	rm -rf "$root.new"
	if ! mmdebstrap --variant=apt --include="$(IFS=,; echo "${packages[*]}")" trixie "$root.new" \
		"$mirror" >"$root.log" 2>&1; then
		tail -n 20 "$root.log" >&2
		rm -rf "$root.new"
		echo "$PROG: mmdebstrap failed (whole log: $root.log)" >&2
		exit 1
	fi
	echo "${packages[*]}" >"$root.new/.qcg-packages"
	rm -rf "$root"
	mv "$root.new" "$root"
	say "root made in $((SECONDS - t0)) s"
fi
flock -u 9

# --- a run: overlay, namespaces, chroot ------------------------------------
scratch=$(mktemp -d /tmp/qcg-trixie.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/upper" "$scratch/work" "$scratch/merged"

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
# The inner shell is pid 1 of its namespace: when it exits, everything
# started inside (daemons, ranks) is killed, and every mount goes with it.
UNIT=$unit unshare --mount --net --pid --fork --propagation private bash -c '
	set -e
	scratch=$1 root=$2 repo=$3
	shift 3
	m=$scratch/merged
	mount -t overlay overlay -o "lowerdir=$root,upperdir=$scratch/upper,workdir=$scratch/work" "$m"
	mkdir -p "$m/src" "$m/build"
	mount --bind "$repo" "$m/src"
	mount -o remount,bind,ro "$m/src"
	mount -t proc proc "$m/proc"
	mount --rbind /dev "$m/dev"
	mount -t tmpfs -o mode=1777 tmpfs "$m/dev/shm"
	mount -t sysfs sysfs "$m/sys"
	mount -t tmpfs -o mode=1777 tmpfs "$m/tmp"
	cp "$scratch/run.sh" "$m/run.sh"
	ip link set lo up
	ip link add qcg-tx0 type veth peer name qcg-tx1
	ip addr add 198.51.100.1/24 dev qcg-tx0
	ip link set qcg-tx0 up
	ip link set qcg-tx1 up
	chroot "$m" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
		TERM="${TERM:-dumb}" LANG=C.UTF-8 UNIT="$UNIT" "$@"
' sh "$scratch" "$root" "$REPO" "${cmd[@]}" || rc=$?
exit $rc
