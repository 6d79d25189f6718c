#!/usr/bin/env bash
# packages: `dpkg-buildpackage -us -uc -b` on this tree builds the packages
# (debian/), they install into a clean Debian 12 container that takes its
# dependencies from the mirror the images use (apt, no other source), and
# there, from the packages alone (grid-in-container.sh): the qcg user, units
# installed but not enabled, configs as conffiles, no unresolved library,
# `ompi_info` listing btl qcg with no environment variable; a broker, proxy,
# frontend and helper set up with docs/admin.md's blocks as pasted and
# started as their units say, one qcg-cat transfer through them, and an MPI
# job whose ranks btl_qcg connects, run with no variable telling Open MPI
# where the component is.  QCG_DEB_DIR=DIR: install the .debs of DIR instead
# of building them.
. "$(dirname "$0")/../docker/lib.sh"
require_docker
command -v mpicc >/dev/null || skip "mpicc not installed (libopenmpi-dev: scripts/install-deps)"
here=$(cd "$(dirname "$0")" && pwd)
base_tar=${QCG_DOCKER_CACHE:-/var/cache/qcg-docker}/debian-bookworm-minbase.tar

scratch_begin packages
t0=$SECONDS

debs=${QCG_DEB_DIR:-}
if [ -z "$debs" ]; then
	command -v dpkg-buildpackage >/dev/null && command -v dh >/dev/null ||
		skip "dpkg-dev or debhelper not installed (scripts/install-deps)"
	# The tracked files as they are in the work tree, built out of it (the
	# .debs land in the parent directory).
	src=$scratch/src/qcg-connect
	mkdir -p "$src"
	git -C "$REPO" ls-files -z | tar -C "$REPO" --null -T - -c | tar -C "$src" -x
	(cd "$src" && DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" \
		dpkg-buildpackage -us -uc -b) >"$scratch/build.log" 2>&1 ||
		{ tail -n 40 "$scratch/build.log" >&2; fail "dpkg-buildpackage"; }
	debs=$scratch/src
	say "packages built in $((SECONDS - t0)) s: $(cd "$debs" && echo *.deb)"
fi
want=(qcg-connect-common qcg-connect-broker qcg-connect-frontend qcg-connect-helper
	libqcgconn0 libqcgconn-dev libqcgcolour0 libqcgcolour-dev openmpi-btl-qcg openmpi-coll-qcg
	qcg-connect-tools)
for p in "${want[@]}"; do
	compgen -G "$debs/${p}_*.deb" >/dev/null || fail "no $p package in $debs"
done
# Debian's checks: an error or a warning fails; informational notes pass
# (overrides in debian/ say why for the ones Open MPI's paths cause).
if command -v lintian >/dev/null; then
	t2=$SECONDS
	lintian --display-info --fail-on error,warning "$debs"/*.deb >"$scratch/lintian.log" 2>&1 ||
		{ cat "$scratch/lintian.log" >&2; fail "lintian: an error or a warning"; }
	say "lintian: no error or warning ($(grep -c '^I:' "$scratch/lintian.log") notes) in $((SECONDS - t2)) s"
else
	say "lintian not installed (scripts/install-deps): not run"
fi

# The base the images use (docker/build-images makes and caches it).
t1=$SECONDS
[ -s "$base_tar" ] || "$REPO/docker/build-images" --base-only || fail "docker/build-images --base-only"
qcg_dockerd_start "$scratch/dockerd"
check_host_clean
docker import --change 'CMD ["bash"]' "$base_tar" qcg-debian:bookworm >/dev/null
ctx=$scratch/context
mkdir -p "$ctx"
for p in "${want[@]}"; do cp "$debs/${p}"_*.deb "$ctx/"; done
# openmpi-bin for ompi_info and mpirun, iproute2 for the guide's addresses;
# --no-install-recommends: what the packages depend on, no more.
cat >"$ctx/Dockerfile" <<-'DOCKERFILE'
	FROM qcg-debian:bookworm
	COPY *.deb /debs/
	RUN set -eux; apt-get update -qq; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	        /debs/*.deb openmpi-bin iproute2; \
	    apt-get clean; rm -rf /var/lib/apt/lists/*
DOCKERFILE
DOCKER_BUILDKIT=1 docker build --network host -t "qcg-packages:$TAG" "$ctx" >"$scratch/docker-build.log" 2>&1 ||
	{ tail -n 40 "$scratch/docker-build.log" >&2; fail "the packages do not install into a clean Debian 12"; }
say "installed into a clean Debian 12 container in $((SECONDS - t1)) s"

# What the container takes from this tree: docs/admin.md's blocks as the docs
# test extracts them (tests/docs: doc_blocks.py; lib.sh for the guide's
# addresses, host names and the copy of certificates), and an MPI program
# built here with Debian's mpicc (the same Open MPI the container installs).
doc=$scratch/doc
mkdir -p "$doc/blocks" "$scratch/mpi"
python3 "$REPO/tests/docs/doc_blocks.py" "$doc/blocks" "$REPO/docs/admin.md"
cp "$REPO/tests/docs/lib.sh" "$doc/lib.sh"
# shellcheck source=tests/docs/lib.sh
(. "$doc/lib.sh" && doc_addresses "$doc/blocks" >"$doc/addresses" && echo "$doc_hosts" >"$doc/hosts")
mpicc -O2 -o "$scratch/mpi/qcg-mpi-pairs" "$REPO/tests/mpi/pairs.c" || fail "mpicc tests/mpi/pairs.c"

# --network none: the grid on the container's own loopback; NET_ADMIN to put
# the guide's addresses on it, SYS_PTRACE for ss -p to see the qcg user's
# sockets (/proc/PID/fd of another user).
docker run --rm --network none --cap-add NET_ADMIN --cap-add SYS_PTRACE \
	-v "$here/grid-in-container.sh:/grid-in-container.sh:ro" \
	-v "$doc:/doc:ro" -v "$scratch/mpi:/mpi:ro" "qcg-packages:$TAG" bash /grid-in-container.sh ||
	fail "the grid from the packages"
say "total $((SECONDS - t0)) s"
