# shellcheck shell=bash
# lab/debian13.sh (sourced by scripts/demo --debian 13, tests/trixie/*.sh and
# the benchmarks' --trixie): the Debian 13 root, made once and cached, and
# running a command in it.
#
#   trixie_require             exits 77 ("skipped") unless root with
#                              mmdebstrap and unshare
#   trixie_root [--refresh]    sets TRIXIE_ROOT; makes the root when missing
#                              or when the package list changed (exit 1 if
#                              that fails)
#   trixie_build BUILD TARGET...
#                              the tree built in the root into the directory
#                              BUILD (kept: a rebuild only makes what
#                              changed), warnings as errors; exit 1 if not
#   trixie_run BUILD SCRIPT [ENV=VALUE...] -- CMD...
#                              CMD in the root as root: the tree at /src
#                              (read-only), the directory BUILD at /build,
#                              the file SCRIPT at /run.sh; its status
#
# The root: $QCG_TRIXIE_ROOT (default /var/cache/qcg-debian/trixie), ~1 min
# and 1.3 GB to make, never written to afterwards: each run sees it through
# an overlay whose writable layer is a scratch directory, in namespaces of
# its own (mount, network, pid: whatever CMD leaves running ends with it).
# The network has lo and one veth pair (qcg-tx0, 198.51.100.1/24, and its
# peer): PRRTE's mpirun dereferences a NULL alias list when it launches on
# another node from a host whose only interface is lo (a segfault in
# prte_check_host_is_local), and its daemons never use lo, so no real node
# is without one.  Nothing of the host is changed.  QCG_DEBIAN_MIRROR
# overrides the mirror (default: the first of apt's Debian sources here).

TRIXIE_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# What the tree needs to build and its tests to run; for test-trixie.sh's
# unit tests, curl, python3-zeep and chromium (broker-service), man-db and
# groff-base (common_cli), git (the docs' and scripts' checks), tcpdump
# (launch-resume) and prometheus (promtool: monitor-rules); for
# test-trixie-packages.sh, debhelper (dpkg-buildpackage) and adduser
# (qcg-connect-common's postinst); for bench/mpi-netpipe.sh --trixie,
# netpipe-openmpi; for test-trixie-slurm.sh (the lab's Slurm run from the
# root), slurmctld, slurmd, slurm-client and munge.  scripts/install-deps
# has the Debian 12 list this follows.
TRIXIE_PACKAGES=(build-essential cmake pkg-config gsoap libgsoap-dev libssl-dev openssl
	libnetfilter-queue-dev libmnl-dev libpcap-dev libuv1-dev libopenmpi-dev openmpi-bin
	iproute2 iptables procps psmisc curl python3-zeep man-db groff-base git tcpdump prometheus
	chromium debhelper adduser netpipe-openmpi
	slurmctld slurmd slurm-client munge)

# trixie_has_packages STAMP: the root made with every package of the list
# (a root made for a longer list serves a shorter one as it is).
trixie_has_packages() {
	local have p
	have=" $(cat "$1" 2>/dev/null) "
	for p in "${TRIXIE_PACKAGES[@]}"; do
		[[ $have == *" $p "* ]] || return 1
	done
}

trixie_require() {
	local why=
	[ "$(id -u)" -eq 0 ] || why="needs root (mmdebstrap, namespaces, chroot)"
	command -v unshare >/dev/null || why="unshare not installed"
	command -v mmdebstrap >/dev/null || why="mmdebstrap not installed (scripts/install-deps)"
	[ -z "$why" ] || { echo "SKIPPED: $why"; exit 77; }
}

trixie_root() {
	local root=${QCG_TRIXIE_ROOT:-/var/cache/qcg-debian/trixie} mirror=${QCG_DEBIAN_MIRROR:-} t0
	local stamp=$root/.qcg-packages
	TRIXIE_ROOT=$root
	[ -n "$mirror" ] || mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
	[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
	mkdir -p "$(dirname "$root")"
	# One maker at a time; the lock is held until the root is there.
	exec 9>"$root.lock"
	flock 9
	if [ "${1:-}" = --refresh ] || ! trixie_has_packages "$stamp"; then
		[ -n "$mirror" ] || { echo "trixie: no Debian mirror in apt's sources (set QCG_DEBIAN_MIRROR)" >&2; exit 1; }
		printf '== %s\n' "making the Debian 13 root in $root from $mirror"
		t0=$SECONDS
		rm -rf "$root.new"
		if ! mmdebstrap --variant=apt --include="$(IFS=,; echo "${TRIXIE_PACKAGES[*]}")" trixie "$root.new" \
			"$mirror" >"$root.log" 2>&1; then
			tail -n 20 "$root.log" >&2
			rm -rf "$root.new"
			echo "trixie: mmdebstrap failed (whole log: $root.log)" >&2
			exit 1
		fi
		echo "${TRIXIE_PACKAGES[*]}" >"$root.new/.qcg-packages"
		rm -rf "$root"
		mv "$root.new" "$root"
		printf '== %s\n' "root made in $((SECONDS - t0)) s"
	fi
	flock -u 9
	exec 9>&-
}

trixie_run() {
	local build=$1 script=$2 scratch rc=0
	local -a envs=()
	shift 2
	while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
	[ "${1:-}" = -- ] && shift
	scratch=$(mktemp -d /tmp/qcg-trixie.XXXXXX)
	mkdir "$scratch/upper" "$scratch/work" "$scratch/merged"
	cp "$script" "$scratch/run.sh"
	# The inner shell is pid 1 of its namespace: when it exits, everything
	# started inside (daemons, ranks) is killed, and every mount goes with it.
	# shellcheck disable=SC2016 # expanded by the inner shell
	unshare --mount --net --pid --fork --propagation private bash -c '
		set -e
		scratch=$1 root=$2 repo=$3 build=$4
		shift 4
		m=$scratch/merged
		mount -t overlay overlay -o "lowerdir=$root,upperdir=$scratch/upper,workdir=$scratch/work" "$m"
		mkdir -p "$m/src" "$m/build"
		mount --bind "$repo" "$m/src"
		mount -o remount,bind,ro "$m/src"
		[ -z "$build" ] || mount --bind "$build" "$m/build"
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
			TERM="${TERM:-dumb}" LANG=C.UTF-8 "$@"
	' sh "$scratch" "$TRIXIE_ROOT" "$TRIXIE_REPO" "$build" ${envs[@]+"${envs[@]}"} "$@" || rc=$?
	rm -rf "$scratch"
	return $rc
}

trixie_build() {
	local build=$1 script rc=0
	shift
	mkdir -p "$build"
	script=$(mktemp /tmp/qcg-trixie-build.XXXXXX)
	cat >"$script" <<-EOF
		set -e
		cmake -S /src -B /build -DQCG_WERROR=ON >/build/configure.log 2>&1
		cmake --build /build -j"\$(nproc)" --target $* >/build/build.log 2>&1
	EOF
	trixie_run "$build" "$script" -- bash /run.sh || rc=$?
	rm -f "$script"
	if [ "$rc" -ne 0 ]; then
		tail -n 30 "$build/build.log" "$build/configure.log" 2>/dev/null >&2
		echo "trixie: the tree did not build in the Debian 13 root (targets $*)" >&2
		return 1
	fi
}
