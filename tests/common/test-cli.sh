#!/usr/bin/env bash
# test-cli.sh BUILD_DIR VERSION: every program `cmake --install` puts in bin/
# and sbin/ behaves as a user expects from a command line:
#   --help        exit 0, the usage on stdout
#   --version     exit 0, "NAME VERSION" on stdout
#   an unknown option: exit 2, nothing on stdout, one line on stderr
#   its man page installed (sbin: section 8, bin: section 1), rendered by
#   man(1) without a warning, with an EXIT STATUS section and every option
#   --help lists
# and every daemon's config file has its page in section 5 listing every
# setting.  The install goes into a scratch DESTDIR, removed at the end.
set -uo pipefail
build=${1:?usage: test-cli.sh BUILD_DIR VERSION}
version=${2:?usage: test-cli.sh BUILD_DIR VERSION}
command -v man >/dev/null || { echo "FAIL: man(1) missing (scripts/install-deps: man-db groff-base)"; exit 1; }

work=$(mktemp -d /tmp/qcg-cli.XXXXXX)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/lib/common.sh
. "$(dirname "$0")/../lib/common.sh"

root=$work/root
DESTDIR=$root cmake --install "$build" --prefix /usr >"$work/install.log" 2>&1 ||
	{ cat "$work/install.log"; echo "FAIL cmake --install"; exit 1; }
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x)
export LD_LIBRARY_PATH=$root/usr/lib:$root/usr/lib/$multiarch
# No job of the caller's leaks in (qcg-mpirun would pass an unknown option on to mpirun).
unset QCG_JOB QCG_JOB_SECRET QCG_RANK QCG_HELPER_SOCKET

# run NAME ARGS...: the program's exit status in $rc, its output in $work/out, $work/err.
run() {
	rc=0
	timeout 30 "$@" </dev/null >"$work/out" 2>"$work/err" || rc=$?
}

# The rendered page of $1 (a file) in $work/page; its warnings in $work/warn.
render() {
	MANWIDTH=80 man --warnings -l "$1" >"$work/page" 2>"$work/warn" </dev/null
}

# Every --option the help text in $work/out names appears in the page.
options_in_page() {
	local missing="" o
	for o in $(grep -oE '^ +(-[a-z], )?--[a-z][a-z0-9-]*' "$work/out" | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u); do
		grep -qE -- "(^|[^a-z-])($o|--\[no-\]${o#--})([^a-z-]|$)" "$work/page" || missing+=" $o"
	done
	echo "$missing"
}

programs=()
for dir in bin sbin; do
	for p in "$root/usr/$dir"/*; do [ -f "$p" ] && [ -x "$p" ] && programs+=("$dir/${p##*/}"); done
done
[ ${#programs[@]} -ge 10 ] || fail "only ${#programs[@]} programs installed: ${programs[*]}"

for entry in "${programs[@]}"; do
	dir=${entry%%/*} name=${entry#*/} bin=$root/usr/$entry
	section=1
	[ "$dir" = sbin ] && section=8

	run "$bin" --help
	if [ $rc -eq 0 ] && grep -qi "usage:.*$name" "$work/out"; then
		pass "$name --help: exit 0, usage"
	else
		fail "$name --help: exit $rc, $(cat "$work/out" "$work/err" | head -c 300)"
	fi
	cp "$work/out" "$work/help"

	run "$bin" --version
	if [ $rc -eq 0 ] && head -1 "$work/out" | grep -qE "^$name $version( |$)"; then
		pass "$name --version: $(head -1 "$work/out")"
	else
		fail "$name --version: exit $rc, $(cat "$work/out" "$work/err" | head -c 300)"
	fi

	run "$bin" --no-such-option
	lines=$(wc -l <"$work/err")
	if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && [ ! -s "$work/out" ]; then
		pass "$name --no-such-option: exit 2, $(cat "$work/err")"
	else
		fail "$name --no-such-option: exit $rc (want 2), $lines lines on stderr (want 1): $(cat "$work/err" "$work/out" | head -c 300)"
	fi

	page=$root/usr/share/man/man$section/$name.$section
	if [ ! -f "$page" ]; then
		fail "$name: no man page $name.$section installed"
		continue
	fi
	render "$page"
	cp "$work/help" "$work/out"
	missing=$(options_in_page)
	if [ -s "$work/warn" ]; then
		fail "$name.$section: man warns: $(head -c 300 "$work/warn")"
	elif ! grep -q "^EXIT STATUS" "$work/page"; then
		fail "$name.$section: no EXIT STATUS section"
	elif [ -n "$missing" ]; then
		fail "$name.$section: options of --help missing from the page:$missing"
	else
		pass "$name.$section: renders without warnings, EXIT STATUS, every option of --help"
	fi
done

# Config files: a page per program that reads one, every setting in it.
for name in qcg-broker qcg-frontend qcg-helper qcg-proxy qcg-agent; do
	page=$root/usr/share/man/man5/$name.conf.5
	bin=$(ls "$root"/usr/*bin/"$name" 2>/dev/null | head -1)
	if [ ! -f "$page" ] || [ -z "$bin" ]; then
		fail "$name.conf.5: not installed (or no $name)"
		continue
	fi
	render "$page"
	# The settings are the table's (--man=keys); the other options of
	# --help are command-line actions (--stats), which no file may set.
	"$bin" --man=keys | cut -d' ' -f1 >"$work/keys"
	run "$bin" --help
	missing="" actions=""
	for o in $(grep -oE '^  --[a-z][a-z0-9-]*' "$work/out" | grep -oE '[a-z][a-z0-9-]*'); do
		case $o in config | help | version | check-config) continue ;; esac
		if grep -qx -- "$o" "$work/keys"; then
			grep -qE "^ +$o = " "$work/page" || missing+=" $o"
		elif grep -qE "^ +$o = " "$work/page"; then
			actions+=" $o"
		fi
	done
	if [ -s "$work/warn" ]; then
		fail "$name.conf.5: man warns: $(head -c 300 "$work/warn")"
	elif [ ! -s "$work/keys" ] || [ -n "$missing" ]; then
		fail "$name.conf.5: settings missing:${missing:- --man=keys printed none}"
	elif [ -n "$actions" ]; then
		fail "$name.conf.5: command-line actions shown as settings:$actions"
	else
		pass "$name.conf.5: renders without warnings, every setting, no action"
	fi
done

echo "$failed failure(s) over ${#programs[@]} programs"
[ $failed -eq 0 ]
