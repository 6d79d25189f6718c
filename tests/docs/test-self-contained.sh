#!/usr/bin/env bash
# docs-self-contained: no tracked file refers to a path outside the
# repository.  The design and the facts it rests on live in docs/design.md; a
# clone has nothing beside it, so a link, comment or command naming the
# design notes the project grew from, or a developer's own checkout, leads a
# reader nowhere.  Every tracked text file is searched (git grep -I: binary
# files are the only ones left out).
#
#   tests/docs/test-self-contained.sh SRC      # exit 0 clean, 1 found, 77 not a git checkout
set -euo pipefail
src=${1:?usage: test-self-contained.sh SRC}

# A source tarball has no .git; a checkout git refuses to read (another
# owner: safe.directory) fails below with git's own message.
if [ ! -e "$src/.git" ]; then
	echo "SKIPPED: $src is not a git checkout (nothing says which files are tracked)"
	exit 77
fi

# The patterns are built from pieces so that this file does not match them.
s=shared w=work
patterns=(
	-e "\.\./$s"                      # the folder beside the repository
	-e "$s/notes" -e "$s/DESIGN"      # its notes and design, by any route
	-e "/$w/"                         # absolute paths of the machine it was written on
	-e "DESIGN[.]md"                  # the old design by name (now docs/design.md)
	-e "notes/(gsoap|lab|orte-launch|openmpi-btl|docker)[.]md"
)

rc=0
hits=$(git -C "$src" grep -I -n -E "${patterns[@]}") || rc=$?
case $rc in
0)
	echo "FAIL: tracked files refer to paths outside the repository:" >&2
	printf '%s\n' "$hits" >&2
	echo "Bring what they point to into the tree (docs/design.md) and link that instead." >&2
	exit 1
	;;
1)
	echo "ok: no tracked file refers outside the repository ($(git -C "$src" ls-files | wc -l) files)"
	;;
*)
	echo "FAIL: git grep failed (exit $rc) in $src" >&2
	exit 1
	;;
esac
