#!/usr/bin/env bash
# systemd-units: `cmake --install` into a scratch DESTDIR puts every file where
# docs/admin.md says, and the installed units pass `systemd-analyze verify`
# without a single remark (it exits 0 even on unknown keys: any output fails).
# The installed ExecStart= paths point into DESTDIR for the check, so verify
# also sees that each daemon is there and executable.
set -euo pipefail
BUILD=${QCG_BUILD_DIR:?}
prefix=${QCG_INSTALL_PREFIX:?}
sysconf=${QCG_INSTALL_SYSCONFDIR:?}
libdir=${QCG_INSTALL_LIBDIR:?}
unitdir=${QCG_SYSTEMD_UNIT_DIR:?}
ompidir=${QCG_OMPI_COMPONENT_INSTALL_DIR:-}
case $unitdir in /*) ;; *) unitdir=$prefix/$unitdir ;; esac
case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac
case $ompidir in /*) ;; *) ompidir=$prefix/$ompidir ;; esac

# shellcheck source=tests/lib/common.sh
. "$(dirname "$0")/../lib/common.sh"
fail_stops=1
scratch=$(mktemp -d /tmp/qcg-systemd-units.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
dest=$scratch/dest

DESTDIR=$dest cmake --install "$BUILD" >"$scratch/install.log" 2>&1 ||
	{ cat "$scratch/install.log" >&2; fail "cmake --install"; }
expect=(
	"$prefix/sbin/qcg-broker" "$prefix/sbin/qcg-frontend" "$prefix/sbin/qcg-helper"
	"$prefix/sbin/qcg-proxy" "$prefix/bin/qcg-cat" "$prefix/bin/qcg-certs"
	"$libdir/libqcgconn.so.0" "$libdir/libqcgconn.so" "$prefix/include/qcgconn.h"
	"$sysconf/qcg-connect/qcg-broker.conf" "$sysconf/qcg-connect/qcg-frontend.conf"
	"$sysconf/qcg-connect/qcg-helper.conf" "$sysconf/qcg-connect/qcg-proxy.conf"
	"$prefix/share/doc/qcg-connect/admin.md" "$prefix/share/doc/qcg-connect/user.md"
	"$prefix/share/doc/qcg-connect/examples/qcg-broker.conf"
	"$prefix/lib/sysusers.d/qcg-connect.conf"
)
for s in broker frontend helper proxy; do expect+=("$unitdir/qcg-$s.service"); done
if [ -f "$BUILD/btl_qcg/mca_btl_qcg.so" ]; then
	expect+=("$ompidir/mca_btl_qcg.so")
fi
for f in "${expect[@]}"; do
	[ -e "$dest$f" ] || fail "cmake --install did not install $f (see $scratch/install.log)"
done
for f in "$prefix"/sbin/qcg-{broker,frontend,helper,proxy} "$prefix/bin/qcg-cat"; do
	[ -x "$dest$f" ] || fail "$f is not executable"
done
echo "installed: ${#expect[@]} files where expected"

# An upgrade keeps the admin's configs.
echo "# edited by the admin" >>"$dest$sysconf/qcg-connect/qcg-broker.conf"
DESTDIR=$dest cmake --install "$BUILD" >"$scratch/install2.log" 2>&1 || fail "second cmake --install"
grep -q 'edited by the admin' "$dest$sysconf/qcg-connect/qcg-broker.conf" ||
	fail "a second install overwrote the admin's qcg-broker.conf"

# The units name this prefix's binaries and configs.
for s in broker frontend helper proxy; do
	grep -qx "ExecStart=$prefix/sbin/qcg-$s --config $sysconf/qcg-connect/qcg-$s.conf" \
		"$dest$unitdir/qcg-$s.service" || fail "qcg-$s.service: ExecStart does not name $prefix and $sysconf"
done
grep -qx 'CapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW' "$dest$unitdir/qcg-helper.service" ||
	fail "qcg-helper.service: capability bounding set"

command -v systemd-analyze >/dev/null || { echo "SKIPPED: systemd-analyze not installed"; exit 77; }
mkdir -p "$scratch/units"
for s in broker frontend helper proxy; do
	sed "s|^ExecStart=/|ExecStart=$dest/|" "$dest$unitdir/qcg-$s.service" >"$scratch/units/qcg-$s.service"
done
if ! systemd-analyze verify --man=no "$scratch"/units/*.service >"$scratch/verify.log" 2>&1 ||
	[ -s "$scratch/verify.log" ]; then
	cat "$scratch/verify.log" >&2
	fail "systemd-analyze verify"
fi
echo "systemd-analyze verify: the four units are clean"
# The exposure score systemd computes from the hardening options (lower is
# better; 10 = none): printed, not held to a number.
for s in broker frontend helper proxy; do
	systemd-analyze security --offline=yes "$scratch/units/qcg-$s.service" 2>/dev/null |
		sed -n "s/^→ Overall exposure level for \(.*\)/  \1/p" || true
done
