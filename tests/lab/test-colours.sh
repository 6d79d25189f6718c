#!/usr/bin/env bash
# lab-colours: every rank knows its site and node (libqcgcolour), as the grid
# names them, with integers the whole job agrees on.
#
#   qcg-lab mpirun --ppn 2, five sites (open fw nata natb sym; open,nata
#   without a proxy), mpirun on nata1:
#     qcg-mpi-colours: each rank's site and node are those qcg-lab started it
#     on (ranks site by site, node 1 then 2), the same before and after
#     MPI_Init; every site's ranks share one integer, MPI_Comm_split by it
#     gives one communicator per site; then one site alone: 1 site.
#   docs/user.md, "Where a rank runs: colours", pasted: the project installed
#   into a scratch prefix (cmake --install), the guide's site_split.c built
#   with its mpicc line (pkg-config qcgcolour), run as the guide says with its
#   host list (agents on open1, nata1, nata2; qcg-mpirun on open1), then the
#   guide's Python (mpi4py) the same way: every rank's line as the guide says.
. "$(dirname "$0")/test-lib.sh"

require_lab
require_services
require_mpi_programs
[ -e "$QCG_BUILD_DIR/btl_qcg/mca_btl_qcg.so" ] || skip "btl_qcg is not built (libopenmpi-dev missing?)"
[ -x "$progs/qcg-mpi-colours" ] || skip "qcg-mpi-colours is not built in $progs"
if [ -e "$LAB_STATE/etc/proxy.conf" ]; then
	sites="open fw nata natb sym"
else
	sites="open nata"
	note "the lab runs no proxy: sites open,nata only"
fi
scratch
chmod 755 "$WORK"
out=$WORK/out

# expected_colours PPN SITE...: "colour RANK SITE NODE" for every rank, in the
# order qcg-lab mpirun maps them.
expected_colours() {
	local ppn=$1 r=0 s n i
	shift
	for s in "$@"; do
		for n in 1 2; do
			for ((i = 0; i < ppn; i++)); do echo "colour $r $s $s$n"; r=$((r + 1)); done
		done
	done
}

# colours_job PPN SITE...: qcg-mpi-colours over those sites; its PASS line and
# every rank's colours wanted.
colours_job() {
	local ppn=$1 rc=0 t0 n
	shift
	n=$#
	t0=$(ms)
	timeout -k 10 300 "$LAB" mpirun --sites "$(echo "$@" | tr ' ' ,)" --ppn "$ppn" -- \
		"$progs/qcg-mpi-colours" --expect-sites "$n" >"$out" 2>&1 || rc=$?
	expected_colours "$ppn" "$@" | sort >"$WORK/want"
	{ grep "^colour " "$out" || true; } | sort >"$WORK/got"
	if [ "$rc" -eq 0 ] && grep -q "^PASS colours: $((n * 2 * ppn)) ranks, $n sites, $((n * 2)) nodes, 0 errors" "$out" &&
		cmp -s "$WORK/want" "$WORK/got"; then
		note "ok   $(grep "^PASS colours" "$out") [$*, $ppn per node: $(($(ms) - t0)) ms]"
	else
		bad "qcg-mpi-colours on $* ($ppn per node): exit $rc"
		diff "$WORK/want" "$WORK/got" | head -n 10 | sed 's/^/     | /' >&2 || true
		show "$out" 30
	fi
}

# shellcheck disable=SC2086 # the sites, one word each
colours_job 2 $sites
colours_job 1 nata

# --- the guide --------------------------------------------------------------------------
# doc_block NAME: the indented lines after docs/user.md's marker NAME.
doc_block() {
	awk -v m="<!-- tested by tests/lab/test-colours.sh: $1 -->" '
		$0 == m { on = 1; next }
		on && /^    / { sub(/^    /, ""); print; seen = 1; next }
		on && /^$/ && seen { print; next }
		on && seen { exit }' "$(dirname "$0")/../../docs/user.md"
}
for b in hosts split run python; do
	[ -n "$(doc_block "$b")" ] || fail "docs/user.md: no block after the marker '$b'"
done
command -v pkg-config >/dev/null || fail "pkg-config is not installed (scripts/install-deps)"
/usr/bin/python3 -c 'import mpi4py' 2>/dev/null || fail "mpi4py is not installed (python3-mpi4py, scripts/install-deps)"
# What the packages install, in a prefix of our own: header, library, .pc.
cmake --install "$QCG_BUILD_DIR" --prefix "$WORK/prefix" >"$WORK/install.log" 2>&1 ||
	{ show "$WORK/install.log"; fail "cmake --install failed"; }
pc=$(find "$WORK/prefix" -name qcgcolour.pc | head -n 1)
[ -n "$pc" ] || fail "cmake --install put no qcgcolour.pc in $WORK/prefix"
doc_block hosts | sed '/^$/d' >"$WORK/nodes.txt"
doc_block split >"$WORK/site_split.c"
doc_block python >"$WORK/site_split.py"
build_cmd=$(doc_block run | grep '^mpicc ')
run_cmd=$(doc_block run | grep '^qcg-mpirun ' | sed 's#qcg-mpirun #qcg-mpirun --bind-to none #')
(cd "$WORK" && PKG_CONFIG_PATH=$(dirname "$pc") && export PKG_CONFIG_PATH && eval "$build_cmd") >"$WORK/build.log" 2>&1 ||
	{ show "$WORK/build.log"; fail "the guide's mpicc line failed: $build_cmd"; }
chmod 644 "$WORK"/nodes.txt "$WORK"/site_split.py
doc_nodes=$(awk '{ print $1 }' "$WORK/nodes.txt" | tr '\n' ' ')

# The guide's lines for its host list: ranks 0, 1 on open1, 2..5 on nata1, nata2.
for r in 0 1; do
	echo "rank $r: site open (1 of 2 sites), rank $r of 2 in its site"
done >"$WORK/want"
for r in 2 3 4 5; do
	echo "rank $r: site nata (0 of 2 sites), rank $((r - 2)) of 4 in its site"
done >>"$WORK/want"

eval "$("$LAB_STATE/user/bin/qcg-mpirun" --new-job)"
declare -A AGENT=()
for n in $doc_nodes; do
	"$LAB" exec --user "$n" -- qcg-agent --idle-timeout 120 --persist >"$WORK/agent-$n.log" 2>&1 &
	AGENT[$n]=$!
	BG_PIDS+=("$!")
done
for n in $doc_nodes; do
	poll 15 "the agent on $n" grep -q "ready: agent of job $QCG_JOB for node $n" "$WORK/agent-$n.log" ||
		{ show "$WORK/agent-$n.log"; fail "no agent ready on $n"; }
done
# guide_run WHAT CMD: the guide's qcg-mpirun line with CMD for ./site_split,
# on open1 as the user, in the scratch directory; every rank's line wanted.
guide_run() {
	local what=$1 cmd rc=0
	cmd=${run_cmd//.\/site_split/$2}
	# Python unbuffered (as many users have it): print() writes a line's
	# newline apart, and mpirun passes on each write of every rank as it comes.
	PYTHONUNBUFFERED=1 timeout -k 10 180 "$LAB" exec --user open1 -- /bin/bash -c "cd '$WORK' && $cmd" >"$out" 2>&1 ||
		rc=$?
	{ grep "^rank " "$out" || true; } | sort >"$WORK/got"
	if [ "$rc" -eq 0 ] && cmp -s <(sort "$WORK/want") "$WORK/got"; then
		note "ok   docs/user.md's $what: every rank's line as the guide says"
	else
		bad "docs/user.md's $what: exit $rc"
		diff <(sort "$WORK/want") "$WORK/got" | head -n 10 | sed 's/^/     | /' >&2 || true
		show "$out" 20
	fi
}
guide_run site_split.c ./site_split
guide_run "Python (mpi4py)" "python3 site_split.py"
for n in $doc_nodes; do kill "${AGENT[$n]}" 2>/dev/null || true; done
for n in $doc_nodes; do wait_exit "${AGENT[$n]}" 15 >/dev/null 2>&1 || true; done
no_user_processes "after the guide's colours"

[ "$failed" -eq 0 ] || fail "$failed colour checks failed"
note "colours: every rank's site and node as the grid names them, the same integers on every rank"
