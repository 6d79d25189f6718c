#!/usr/bin/env bash
#
# docs-admin-guide: the admin guide's (and the user guide's) code blocks,
# run as an administrator pastes them, on one scratch host: every block is
# marked (tests/docs/README.md) and each marked block is run, written as the
# config file it is, or skipped with the reason its marker gives.
#
#   public host + head node + compute node, all in one private network namespace:
#
#     lo: 127.0.0.1, and every address of 198.18.0.0/15, 203.0.113.0/24 and
#         198.51.100.0/24 the marked blocks name (203.0.113.10 the broker,
#         203.0.113.20 the proxy, 198.18.1.10 the head node, 198.18.1.11 node01)
#     /etc/hosts (a private mount): broker.grid.example.org, proxy.grid.example.org
#
# What is changed, and only that (as few substitutions as possible):
#   - paths under /etc/, /var/lib/, /run/, /secure/ and /tmp/ move into a
#     private root (lib.sh, doc_paths), in blocks, config files and units;
#   - QCG_HELPER_SOCKET names the moved helper socket (the one default compiled
#     into the programs that no text names), HOME is a directory of the root;
#   - systemctl is bin/systemctl (the units of systemd/, run from the build
#     tree as the test's user, waited for until ready), and the copy of each
#     host's certificates that §3 asks for is made by it before a start.
# Programs come from the build tree (PATH), qcg-certs from the source tree.
#
# Fails when a marked block fails (a run block exits non-zero, or a part of
# it started in the background does), when a code block has no marker or a
# bad one, when a config block was never loaded by a daemon its unit starts,
# or when a daemon the blocks started is gone at the end.
#
# QCG_DOCTEST_PLAIN=1: the deployment without systemd instead (blocks
# marked only=plain run, only=systemd ones do not): each daemon block runs
# as its own process group, as the guide says (setpriv to the user qcg,
# which a private /etc/passwd and /etc/group add when the host has none),
# and is waited for until its daemon listens (a helper: until registered);
# the copy of the certificates gets the owners §3's table gives.
#
# QCG_DOCTEST_LAB=1 (with QCG_DOCTEST_PLAIN=1; tests/lab/test-docs-plain.sh):
# the same deployment on the lab's hosts instead of one scratch host, the
# network of `qcg-lab up --no-services` as it is (no address is added): a
# block runs in the namespace of the host its role names, the addresses of
# the guide being the lab's own (lab_host below): the public host's broker
# on `broker` (203.0.113.10), its proxy on `proxy` (203.0.113.20), the head
# node on `nata-head` (198.18.1.10, behind the NAT of 203.0.113.66), the
# compute node on `nata1` (198.18.1.11); "each-host" lines each on the host
# of the daemon they name; the CA's (admin) blocks on the machine itself.
# One file system (the private root) serves them all.
#
#   test-admin-guide.sh BUILD_DIR SRC_DIR [DOC...]   (docs/admin.md docs/user.md)
#   exit 0 passed, 1 failed, 77 skipped (not root: no private namespace)

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)
shift 2
here=$src/tests/docs
if (($# == 0)); then set -- "$src/docs/admin.md" "$src/docs/user.md"; fi

# --- into a private network and mount namespace ---------------------------------
if [[ -z ${QCG_DOCTEST_NS:-} ]]; then
	if [[ $(id -u) -ne 0 ]]; then echo "not root: no private namespace, skipping"; exit 77; fi
	command -v unshare >/dev/null || { echo "unshare missing: skipping"; exit 77; }
	net=--net
	if [[ -n ${QCG_DOCTEST_LAB:-} ]]; then net=; fi
	QCG_DOCTEST_NS=1 exec unshare $net --mount --propagation private bash "$0" "$build" "$src" "$@"
fi
plain=${QCG_DOCTEST_PLAIN:-}
lab=${QCG_DOCTEST_LAB:-}
if [[ -n $lab && -z $plain ]]; then echo "QCG_DOCTEST_LAB goes with QCG_DOCTEST_PLAIN" >&2; exit 2; fi
if [[ -n $plain ]]; then
	command -v setpriv >/dev/null || { echo "setpriv missing: skipping"; exit 77; }
fi
for t in python3 ss ip openssl; do
	command -v "$t" >/dev/null || { echo "$t missing: skipping"; exit 77; }
done

root=$(mktemp -d "${TMPDIR:-/tmp}/qcg-doctest.XXXXXX")
export QCG_DOCTEST_ROOT=$root QCG_DOCTEST_SRC=$src QCG_DOCTEST_BUILD=$build
# shellcheck source=tests/docs/lib.sh
. "$here/lib.sh"
failed=0 passed=0 skipped=0

# Stops what the blocks started: each unit's process group (its children
# too: the broker's reflector, the helper's privileged process), SIGTERM
# then, after 5 s, SIGKILL.
cleanup() {
	local f i
	set +e
	for f in "$root"/doctest/parts/*.pid; do
		[[ -f $f ]] && kill -KILL "$(cat "$f")" 2>/dev/null
	done
	for f in "$root"/doctest/units/*.pid; do
		[[ -f $f ]] && kill -TERM -- "-$(cat "$f")" 2>/dev/null
	done
	for f in "$root"/doctest/units/*.pid; do
		[[ -f $f ]] || continue
		for ((i = 0; i < 50; i++)); do kill -0 -- "-$(cat "$f")" 2>/dev/null || break; sleep 0.1; done
		kill -KILL -- "-$(cat "$f")" 2>/dev/null
	done
	if ((failed > 0)) || [[ -n ${QCG_TEST_LOGS:-} ]]; then
		for f in "$root"/doctest/units/*.log; do
			[[ -f $f ]] || continue
			echo "--- ${f##*/} (last 30 lines)"
			tail -n 30 "$f"
		done
	fi
	rm -rf -- "$root"
}
trap cleanup EXIT
trap 'echo "FAIL test-admin-guide.sh line $LINENO: the test itself failed"' ERR
# pass, fail WHAT [LOG]: tests/lib/common.sh.
# shellcheck source=tests/lib/common.sh
. "$here/../lib/common.sh"

mkdir -p "$root"/{etc,var/lib,run,secure,tmp,home,doctest/blocks,doctest/parts,doctest/units}
touch "$root/doctest/loaded"
python3 "$here/doc_blocks.py" "$root/doctest/blocks" "$@"
index=$root/doctest/blocks/index

# The network: lo, and the documentation addresses the marked blocks name
# (in the lab: its hosts have them).
printf '127.0.0.1 localhost\n%s\n' "$doc_hosts" >"$root/hosts"
mount --bind "$root/hosts" /etc/hosts
if [[ -z $lab ]]; then
	ip link set lo up
	for a in $(doc_addresses "$root/doctest/blocks"); do
		ip addr add "$a/32" dev lo
	done
fi

# lab_host ROLE TEXT: the lab namespace a block of ROLE runs in ("" = this
# machine; without the lab, always ""), by the daemon it names where the
# role covers several hosts.
lab_host() {
	[[ -n $lab ]] || return 0
	case $1 in
	public-host | broker | each-host)
		case $(grep -oE 'qcg-(broker|proxy|frontend|helper|cat)' <<<"$2" | tail -n 1) in
		qcg-proxy) echo qcg-proxy ;;
		qcg-frontend) echo qcg-nata-head ;;
		qcg-helper | qcg-cat) echo qcg-nata1 ;;
		*) echo qcg-broker ;;
		esac
		;;
	head-node) echo qcg-nata-head ;;
	compute-node | compute-nodes) echo qcg-nata1 ;;
	esac
}
# in_host NS CMD...: CMD in that namespace (or here).
in_host() {
	if [[ -n $1 ]]; then ip netns exec "$1" "${@:2}"; else "${@:2}"; fi
}

# Without systemd: the user qcg the packages make (a private passwd and group
# file when this host has none), and a root every user can walk through.
if [[ -n $plain ]]; then
	if ! getent passwd qcg >/dev/null; then
		cp /etc/passwd "$root/passwd"
		cp /etc/group "$root/group"
		uid=64999
		while getent passwd "$uid" >/dev/null || getent group "$uid" >/dev/null; do uid=$((uid - 1)); done
		echo "qcg:x:$uid:$uid:qcg-connect daemons:/nonexistent:/usr/sbin/nologin" >>"$root/passwd"
		echo "qcg:x:$uid:" >>"$root/group"
		mount --bind "$root/passwd" /etc/passwd
		mount --bind "$root/group" /etc/group
	fi
	# The broker's reflector runs as qcg-reflector (scripts/install-deps and
	# the broker package make it).
	getent passwd qcg-reflector >/dev/null || {
		echo "FAIL: no user qcg-reflector (scripts/install-deps makes it)" >&2
		exit 1
	}
	chmod 0755 "$root"
	chmod 0755 "$root"/{etc,var,var/lib,run,tmp,home}
fi

export PATH=$here/bin:$build/broker:$build/frontend:$build/helper:$build/proxy:$build/tools:$build/launch:$src/certs:$PATH
export HOME=$root/home QCG_HELPER_SOCKET=$root/run/qcg/helper.sock

# run_part FILE LOG [NS]: one part of a block, with -e (a failing line fails
# it); in the lab on host NS.
run_part() { (cd "$HOME" && in_host "${3:-}" bash -e -o pipefail "$1") </dev/null >"$2" 2>&1; }

# run_lines N TEXT LOG: an "each-host" block in the lab, each line on the
# host of the daemon it names.
run_lines() {
	local n=$1 text=$2 log=$3 line k=0 rc=0
	: >"$log"
	while IFS= read -r line; do
		[[ -n ${line// /} ]] || continue
		k=$((k + 1))
		printf '%s\n' "$line" >"$root/doctest/blocks/$n.line$k.sh"
		run_part "$root/doctest/blocks/$n.line$k.sh" "$root/doctest/blocks/$n.line$k.log" \
			"$(lab_host each-host "$line")" || rc=$?
		cat "$root/doctest/blocks/$n.line$k.log" >>"$log"
		((rc == 0)) || return "$rc"
	done <"$text"
}

# run_block N WHERE ROLE PARTS: a run block; with PARTS, the parts that
# start at "# node X" / "# on node X" run at the same time, the last in the
# foreground, the others in the background (then waited for, 60 s at most).
run_block() {
	local n=$1 where=$2 role=$3 parts=$4 text=$root/doctest/blocks/$1.txt
	local log=$root/doctest/blocks/$n.log p rc=0 bg=() i t0=$SECONDS ns
	doc_paths <"$text" >"$text.sh"
	ns=$(lab_host "$role" "$(cat "$text")")
	# A directory the block writes into that a Debian host has (/etc/sysctl.d).
	for p in $(grep -oE "$root/[^ \"'<>;|)]+" "$text.sh" || true); do
		p=$(dirname "$p")
		if [[ -d ${p#"$root"} ]]; then mkdir -p "$p"; fi
	done
	if [[ $parts == 1 ]]; then
		# What comes before the first part ("export X=$(...)  # the same on
		# both nodes") runs once; every part starts with the values it exported.
		awk '/^#[ \t]*(on )?node [A-Za-z0-9]/ { exit } { print }' "$text.sh" >"$text.pre"
		# shellcheck disable=SC2016 # expanded by the inner bash
		bash -c '. "$1" && for v in $(sed -n "s/^ *export \([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p" "$1"); do
			printf "export %s=%q\n" "$v" "${!v}"; done' sh "$text.pre" >"$text.env" || rc=$?
		awk -v base="$root/doctest/blocks/$n.part" -v env="$text.env" '
			/^#[ \t]*(on )?node [A-Za-z0-9]/ {
				k++
				while ((getline line < env) > 0) print line > (base k ".sh")
				close(env)
			}
			k > 0 { print > (base k ".sh") }' "$text.sh"
		local files=("$root/doctest/blocks/$n.part"*.sh)
		for ((i = 0; i < ${#files[@]} - 1; i++)); do
			run_part "${files[i]}" "${files[i]%.sh}.log" "$ns" &
			bg+=("$!")
			echo "$!" >"$root/doctest/parts/$n.$i.pid"
		done
		run_part "${files[-1]}" "$log" "$ns" || rc=$?
		for p in "${bg[@]}"; do
			for ((i = 0; i < 600; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
			kill "$p" 2>/dev/null && echo "(a background part did not end within 60 s)" >>"$log"
			wait "$p" || { rc=$?; cat "$root/doctest/blocks/$n".part*.log >>"$log"; }
		done
	elif [[ -n $lab && $role == each-host ]]; then
		run_lines "$n" "$text.sh" "$log" || rc=$?
	else
		run_part "$text.sh" "$log" "$ns" || rc=$?
	fi
	if ((rc == 0)); then pass "$where run${role:+ ($role)}, $((SECONDS - t0)) s"
	else fail "$where run${role:+ ($role)}: exit $rc after $((SECONDS - t0)) s" "$log"; fi
	# The JSON samples its comments show, against what it printed.
	if ((rc == 0)) && grep -qE '^[^#]*#[^{]*\{.*\}[[:space:]]*$' "$text"; then
		local logs=("$log") verdict=$root/doctest/blocks/$n.samples
		if [[ $parts == 1 ]]; then logs+=("$root/doctest/blocks/$n".part*.log); fi
		if python3 "$here/check_samples.py" "$text" "${logs[@]}" >"$verdict" 2>&1; then
			pass "$where: its output samples match what it printed"
		else fail "$where: an output sample matches nothing it printed" "$verdict"; fi
	fi
}

# group_listens PGID [NS]: a process of the group has a listening TCP or Unix
# socket (in the lab: in that host's namespace).
group_listens() {
	local p
	for p in $(pgrep -g "$1"); do
		in_host "${2:-}" ss -Hlntxp | grep -q "pid=$p," && return 0
	done
	return 1
}

# run_daemon N WHERE ROLE: a block that starts a daemon in the foreground
# (its last command): run as a process group of its own, as a supervisor
# would, the certificates copied first with §3's owners; waited for until
# the daemon listens and, for a helper, is registered (30 s at most).
run_daemon() {
	local n=$1 where=$2 role=$3 text=$root/doctest/blocks/$1.txt name pid i t0=$SECONDS ns
	doc_paths <"$text" >"$text.sh"
	name=$(grep -oE 'qcg-(broker|proxy|frontend|helper)' "$text.sh" | tail -n 1)
	ns=$(lab_host "$role" "$(cat "$text")")
	doc_deploy
	chgrp qcg "$root"/etc/qcg/*.pem
	if [[ -f $root/etc/qcg/proxy.key ]]; then chown qcg "$root/etc/qcg/proxy.key"; fi
	# Before the block makes its daemon's directory: without it the daemon
	# exits at once, with one line naming the command that makes it.
	if grep -q '^install -d' "$text.sh"; then
		local dir rc=0
		dir=$(awk '/^install -d/ { for (i = 3; i <= NF; i++) if ($i ~ /^\//) { print $i; exit } }' "$text.sh")
		if [[ ! -e $dir ]]; then
			grep -v '^install -d' "$text.sh" >"$text.nodir.sh"
			(cd "$HOME" && in_host "$ns" timeout 20 bash -e -o pipefail "$text.nodir.sh") </dev/null >"$text.nodir.log" 2>&1 || rc=$?
			# Its info lines aside (where it logs, ...), one line: the reason.
			grep -v '^[-0-9T:.Z]* [a-z-]*\[[0-9]*\] info ' "$text.nodir.log" >"$text.nodir.why" || true
			if ((rc != 0)) && [[ $(grep -c . "$text.nodir.why") == 1 ]] &&
				grep -qF "install -d -o qcg -g qcg" "$text.nodir.why"; then
				pass "$where daemon $name without ${dir#"$root"}: exit $rc, one line: $(cut -c 1-90 "$text.nodir.why")..."
			else
				echo "(exit $rc)" >>"$text.nodir.log"
				fail "$where daemon $name without ${dir#"$root"}: want a failure and one line naming install -d" "$text.nodir.log"
			fi
		fi
	fi
	(cd "$HOME" && exec setsid ${ns:+ip netns exec "$ns"} bash -e -o pipefail "$text.sh") </dev/null >>"$root/doctest/units/$name.log" 2>&1 &
	pid=$!
	echo "$pid" >"$root/doctest/units/$name.pid"
	tr '\n' ' ' <"$text.sh" >>"$root/doctest/loaded"
	echo >>"$root/doctest/loaded"
	for ((i = 0; i < 300; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		if group_listens "$pid" "$ns"; then
			[[ $name != qcg-helper ]] && break
			qcg-helper --socket "$QCG_HELPER_SOCKET" --status --json 2>/dev/null |
				grep -q '"upstream_connected":true' && break
		fi
		sleep 0.1
	done
	# The daemon runs as qcg, and said at start where it logs.
	local daemon uid
	daemon=$(pgrep -g "$pid" -x "$name" | head -n 1)
	uid=$(awk '/^Uid:/ { print $2 }' "/proc/${daemon:-0}/status" 2>/dev/null)
	if [[ $uid != "$(id -u qcg)" ]]; then
		fail "$where daemon $name: runs as uid ${uid:-?}, not qcg ($(id -u qcg))" "$root/doctest/units/$name.log"
	elif ! grep -q " ${name#qcg-}\[[0-9]*\] info log_say_where: logging to stderr" "$root/doctest/units/$name.log"; then
		fail "$where daemon $name: it does not say it logs to stderr" "$root/doctest/units/$name.log"
	elif ((i < 300)) && kill -0 "$pid" 2>/dev/null; then
		pass "$where daemon $name${role:+ ($role)}${ns:+ on ${ns#qcg-}} as qcg, logging to stderr, up in $((SECONDS - t0)) s"
	else
		fail "$where daemon $name${role:+ ($role)}: $(kill -0 "$pid" 2>/dev/null && echo "not ready within 30 s" || echo exited)" \
			"$root/doctest/units/$name.log"
	fi
}

configs=()
while IFS=$'\t' read -r n where kind file role parts reason only; do
	[[ $role == - ]] && role=
	where=${where#"$src"/}
	if [[ $only == systemd && -n $plain ]] || [[ $only == plain && -z $plain ]]; then
		skipped=$((skipped + 1))
		printf 'skip %s: only %s\n' "$where" "${only/plain/without systemd}"
		continue
	fi
	case $kind in
	config)
		dest=$(doc_paths <<<"$file")
		mkdir -p "$(dirname "$dest")"
		doc_paths <"$root/doctest/blocks/$n.txt" >"$dest"
		configs+=("$where $file $dest")
		pass "$where config $file written"
		;;
	run)
		if [[ $parts == d ]]; then run_daemon "$n" "$where" "$role"
		else run_block "$n" "$where" "$role" "$parts"; fi
		;;
	skip | sample)
		skipped=$((skipped + 1))
		printf 'skip %s: %s\n' "$where" "$reason"
		;;
	*) fail "$where: $reason" ;;
	esac
done <"$index"

# Every config block was read by the daemon its unit starts with it.
for c in "${configs[@]}"; do
	read -r where file dest <<<"$c"
	if grep -qF -- "--config $dest" "$root/doctest/loaded"; then pass "$where: $file loaded by a unit"
	else fail "$where: $file written but no unit started with it"; fi
done
# Every daemon the blocks started still runs.
for f in "$root"/doctest/units/*.pid; do
	[[ -f $f ]] || continue
	u=$(basename "$f" .pid)
	if kill -0 "$(cat "$f")" 2>/dev/null; then pass "$u still runs at the end"
	else fail "$u is gone at the end" "$root/doctest/units/$u.log"; fi
done

# The pasted proxy config reaches the pasted broker: its beats are heard
# (the broker plans only proxies it hears from once one of them beats).
plog=$root/doctest/units/qcg-proxy.log
if [[ -f $plog ]]; then
	for ((i = 0; i < 100; i++)); do grep -q "hears our beats" "$plog" && break; sleep 0.1; done
	if grep -q "hears our beats" "$plog"; then pass "qcg-proxy: the broker hears its beats"
	else fail "qcg-proxy: the broker hears its beats" "$plog"; fi
fi

echo "passed $passed, failed $failed, skipped $skipped blocks"
if ((failed > 0)); then exit 1; fi
