#!/usr/bin/env bash
# install-prefix: a from-source install with a prefix of its own works with no
# ldconfig and no environment (docs/admin.md, "From source"):
# `cmake --install --prefix /opt/qcg` into a scratch DESTDIR, then every
# program and the BTL find libqcgconn in /opt/qcg/lib (ldd: no "not found",
# not a copy elsewhere) and run; configs in /etc/qcg-connect and the units name
# them and /opt/qcg/sbin; the BTL under the prefix, not in the directory dpkg
# owns, and Open MPI lists it with the documented component path; the
# pkg-config file builds a program against the installed header and library.
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$(dirname "$0")/../lib/common.sh"
fail_stops=1 # each step needs the install the first one made
BUILD=${QCG_BUILD_DIR:?}
prefix=/opt/qcg
scratch=$(mktemp -d /tmp/qcg-install-prefix.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
dest=$scratch/dest
root=$dest$prefix
unset LD_LIBRARY_PATH
sanitized=no
grep -q '^QCG_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt" && sanitized=yes

DESTDIR=$dest cmake --install "$BUILD" --prefix "$prefix" >"$scratch/install.log" 2>&1 ||
	fail "cmake --install --prefix $prefix" "$scratch/install.log"

progs=("$root"/sbin/qcg-{broker,frontend,helper,proxy} "$root"/bin/qcg-{cat,probe,agent,launch})
btl=$root/lib/openmpi/mca_btl_qcg.so
[ ! -f "$BUILD/btl_qcg/mca_btl_qcg.so" ] || progs+=("$btl")
for f in "${progs[@]}"; do
	[ -e "$f" ] || fail "${f#"$dest"} not installed"
	out=$(ldd "$f") || fail "ldd ${f#"$dest"}"
	! grep 'not found' <<<"$out" || fail "${f#"$dest"}: a library not found (no run path?)"
	lib=$(awk '$1 == "libqcgconn.so.0" {print $3}' <<<"$out")
	[ -z "$lib" ] || [ "$(realpath "$lib")" = "$(realpath "$root/lib/libqcgconn.so.0")" ] ||
		fail "${f#"$dest"} does not take libqcgconn from $prefix/lib but from $lib"
done
for f in "$root"/sbin/qcg-* "$root"/bin/qcg-*; do
	"$f" --version >/dev/null 2>&1 || fail "${f#"$dest"} --version does not run"
done
echo "programs: ${#progs[@]} find libqcgconn in $prefix/lib and run"

for s in broker frontend helper proxy; do
	[ -f "$dest/etc/qcg-connect/qcg-$s.conf" ] || fail "qcg-$s.conf not in /etc/qcg-connect"
	grep -qx "ExecStart=$prefix/sbin/qcg-$s --config /etc/qcg-connect/qcg-$s.conf" \
		"$root/lib/systemd/system/qcg-$s.service" || fail "qcg-$s.service does not name $prefix/sbin and /etc/qcg-connect"
done
[ ! -e "$dest/etc/opt" ] || fail "configs under /etc/opt"
echo "configs in /etc/qcg-connect, the units name them"

if [ -f "$BUILD/btl_qcg/mca_btl_qcg.so" ]; then
	! find "$dest" -path '*openmpi3*' | grep . || fail "the BTL went into Open MPI's own directory (dpkg's)"
	# A sanitizer build's BTL needs the sanitizer runtime, which ompi_info lacks.
	if command -v ompi_info >/dev/null && [ $sanitized = no ]; then
		ompidir=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
		# docs/admin.md: mca_base_component_path, ours first, Open MPI's own kept.
		OMPI_MCA_mca_base_component_path=$root/lib/openmpi:$ompidir ompi_info 2>&1 |
			grep -q 'MCA btl: qcg' || fail "ompi_info with the documented component path does not list btl qcg"
		# The same line in a parameter file (here the user's, ~/.openmpi).
		mkdir -p "$scratch/home/.openmpi"
		echo "mca_base_component_path = $root/lib/openmpi:$ompidir" >"$scratch/home/.openmpi/mca-params.conf"
		HOME=$scratch/home ompi_info 2>&1 | grep -q 'MCA btl: qcg' ||
			fail "ompi_info with mca_base_component_path in mca-params.conf does not list btl qcg"
		echo "the BTL in $prefix/lib/openmpi; ompi_info lists it with mca_base_component_path"
	fi
fi

if command -v pkg-config >/dev/null && command -v cc >/dev/null; then
	flags=$(PKG_CONFIG_PATH=$root/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$dest pkg-config --cflags --libs qcgconn) ||
		fail "pkg-config qcgconn"
	printf '#include <qcgconn.h>\nint main(void) { return qcg_strerror(0) == 0; }\n' >"$scratch/t.c"
	san=
	[ $sanitized = no ] || san=-fsanitize=address,undefined
	# shellcheck disable=SC2086
	cc $san -o "$scratch/t" "$scratch/t.c" $flags -Wl,-rpath,"$root/lib" 2>"$scratch/cc.log" ||
		fail "a program does not build with pkg-config qcgconn ($flags)" "$scratch/cc.log"
	"$scratch/t" || fail "the program built against $prefix does not run"
	echo "pkg-config qcgconn: $flags"
fi
