#!/usr/bin/env bash
#
# trixie-packages: the Debian packages (debian/) on Debian 13.  In the Debian
# 13 root (lab/debian13.sh: an overlay over the cached root, so nothing
# installed here stays), `dpkg-buildpackage -us -uc -b` builds this tree's
# packages against Open MPI 5.0, they install with dpkg (every dependency
# met by the root's packages), and Debian 13's Open MPI finds the components
# where it landed with no setting: `ompi_info` lists btl qcg, from
# openmpi-btl-qcg in `ompi_info --path pkglibdir`, which depends on the Open
# MPI series it was built for, and coll qcg likewise (openmpi-coll-qcg); a
# 2-rank job from the installed packages alone (packages-job.sh: the grid's
# daemons on loopback, two agents, qcg-mpirun, the ranks over btl_qcg, with
# no component path in the environment); the systemd units in /usr/lib/systemd/system
# and no file under the aliased /lib, /bin, /sbin (Debian 13 is /usr-merged);
# no installed program or library has an unresolved library.
#
#   tests/trixie/test-trixie-packages.sh
#   exit 0 passed, 1 failed, 77 skipped (not root, no mmdebstrap)
#
# tests/packages does the same on Debian 12 (a container, and a grid run from
# the packages).  QCG_TRIXIE_ROOT and QCG_DEBIAN_MIRROR as in lab/debian13.sh.
set -euo pipefail
export LC_ALL=C
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PROG=trixie-packages

case ${1:-} in
-h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
'') ;;
*) echo "$PROG: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac

# shellcheck source=../../lab/debian13.sh
. "$REPO/lab/debian13.sh"
trixie_require
trixie_root

scratch=$(mktemp -d /tmp/qcg-trixie-packages.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
# The tracked files as they are in the work tree (the .debs land beside it).
mkdir -p "$scratch/build/src/qcg-connect"
git -C "$REPO" ls-files -z | tar -C "$REPO" --null -T - -c | tar -C "$scratch/build/src/qcg-connect" -x

cat >"$scratch/run.sh" <<'EOF'
set -u
rc=0
bad() { echo "FAIL $*"; rc=1; }
ok() { echo "ok   $*"; }
cd /build/src/qcg-connect
t0=$SECONDS
if ! DEB_BUILD_OPTIONS="nocheck noddebs parallel=$(nproc)" dpkg-buildpackage -us -uc -b >/build/build.log 2>&1; then
	tail -n 40 /build/build.log
	echo "FAIL dpkg-buildpackage on Debian $(cat /etc/debian_version)"
	exit 1
fi
cd /build/src
ok "dpkg-buildpackage on Debian $(cat /etc/debian_version) in $((SECONDS - t0)) s: $(echo *.deb | wc -w) packages"
for p in qcg-connect-common qcg-connect-broker qcg-connect-frontend qcg-connect-helper \
	libqcgconn0 libqcgconn-dev libqcgcolour0 libqcgcolour-dev openmpi-btl-qcg \
	openmpi-coll-qcg qcg-connect-tools; do
	compgen -G "${p}_*.deb" >/dev/null || bad "no $p package"
done
if dpkg -i ./*.deb >/build/install.log 2>&1; then
	ok "installed with dpkg, every dependency met"
else
	tail -n 20 /build/install.log
	bad "the packages do not install on Debian 13"
	exit 1
fi

# Open MPI's own view: env -i (trixie_run) leaves no OMPI_MCA_ variable.
ompi=$(ompi_info --parsable 2>/dev/null | sed -n 's/^ompi:version:full://p')
series=$(echo "$ompi" | cut -d. -f1,2)
pkglibdir=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
ompi_info 2>/dev/null | grep qcg >/build/ompi_info.txt || true
if grep -qE "MCA btl: qcg \(MCA v[0-9.]+, API v[0-9.]+, Component v" /build/ompi_info.txt; then
	ok "ompi_info (Open MPI $ompi): $(grep -E "MCA btl: qcg" /build/ompi_info.txt | sed 's/^ *//')"
else
	bad "ompi_info of Open MPI $ompi does not list btl qcg: $(cat /build/ompi_info.txt)"
fi
if grep -qE "MCA coll: qcg \(MCA v[0-9.]+, API v[0-9.]+, Component v" /build/ompi_info.txt; then
	ok "ompi_info (Open MPI $ompi): $(grep -E "MCA coll: qcg" /build/ompi_info.txt | sed 's/^ *//')"
else
	bad "ompi_info of Open MPI $ompi does not list coll qcg: $(cat /build/ompi_info.txt)"
fi
for c in btl coll; do
	f=$pkglibdir/mca_${c}_qcg.so
	if dpkg -S "$f" 2>/dev/null | grep -q "^openmpi-$c-qcg:"; then
		ok "$f from openmpi-$c-qcg"
	else
		bad "openmpi-$c-qcg has no $f (Open MPI's component directory)"
	fi
	dep=$(dpkg-query -W -f='${Depends}' "openmpi-$c-qcg")
	if echo "$dep" | grep -qE "libopenmpi[0-9a-z]+ \(>= $series\), libopenmpi[0-9a-z]+ \(<< "; then
		ok "openmpi-$c-qcg depends on Open MPI $series: $(echo "$dep" | grep -oE 'libopenmpi[^,]+, libopenmpi[^,]+')"
	else
		bad "openmpi-$c-qcg does not depend on Open MPI $series: $dep"
	fi
done
# The component's MCA parameters (its registration ran in ompi_info).
n=$(ompi_info --param btl qcg --level 9 --parsable 2>/dev/null | sed -n 's/^mca:btl:qcg:param:\([^:]*\):.*/\1/p' | sort -u | wc -l)
[ "$n" -ge 5 ] && ok "ompi_info --param btl qcg --level 9: $n parameters" ||
	bad "ompi_info --param btl qcg --level 9: $n parameters"
# The units where Debian 13 keeps a package's units (debian/rules: after the
# /usr-merge), none under an aliased directory (/lib, /bin, /sbin).
units=0
for u in qcg-connect-broker:qcg-broker qcg-connect-broker:qcg-proxy \
	qcg-connect-frontend:qcg-frontend qcg-connect-helper:qcg-helper; do
	f=/usr/lib/systemd/system/${u#*:}.service
	if dpkg -S "$f" 2>/dev/null | grep -q "^${u%%:*}: " && grep -q "^ExecStart=/usr/sbin/${u#*:} " "$f"; then
		units=$((units + 1))
	else
		bad "${u%%:*} has no $f naming /usr/sbin/${u#*:}"
	fi
done
aliased=$(dpkg -L $(ls ./*.deb | sed 's#^\./##; s/_.*//') | grep -E '^/(lib|lib64|bin|sbin)/' || true)
[ -z "$aliased" ] || bad "files under the aliased /lib, /bin, /sbin: $(echo $aliased)"
[ -z "$aliased" ] && [ "$units" = 4 ] &&
	ok "the 4 units in /usr/lib/systemd/system, no file under /lib, /bin or /sbin"
# Every installed ELF file resolves its libraries.
missing=$(dpkg -L $(ls ./*.deb | sed 's#^\./##; s/_.*//') | while read -r f; do
	[ -f "$f" ] && head -c 4 "$f" | grep -q ELF && ldd "$f" 2>&1 | grep 'not found' | sed "s#^#$f: #"
done || true)
[ -z "$missing" ] && ok "no unresolved library in any installed program or library" ||
	bad "unresolved libraries: $missing"
# A job from what is installed, as a user runs one.
t0=$SECONDS
bash /build/src/qcg-connect/tests/trixie/packages-job.sh /build/src/qcg-connect || rc=1
echo "== the job from the packages: $((SECONDS - t0)) s"
exit $rc
EOF

t0=$SECONDS
rc=0
trixie_run "$scratch/build" "$scratch/run.sh" -- bash /run.sh || rc=$?
echo "== $PROG: $((SECONDS - t0)) s, exit $rc"
exit $rc
