# shellcheck shell=bash
# log_sample --block NAME LOG:TEXT...: passes when the guide's log-line sample
# NAME (a `<!-- doctest: sample -->` block) is what the daemons logged, else
# fails (pass, fail and $out of loopback-grid.sh).  Each LOG:TEXT picks the
# first line of LOG holding TEXT; the lines, in that order, without what the
# logger puts first (time, daemon[pid], level, function) and with the test's
# directories ($live, $ca, $work) written as the guide's /etc/qcg/, go to
# tests/docs/check_samples.py.
# shellcheck disable=SC2154 # src, work, out: set by the test and loopback-grid.sh
log_sample() {
	local name=$2 desc spec log text line dir tmp
	desc="docs/admin.md's sample $name is what the daemon logs"
	shift 2
	tmp=$work/log-sample-$name
	: >"$tmp"
	for spec in "$@"; do
		log=${spec%%:*} text=${spec#*:}
		if ! line=$(grep -m1 -F -- "$text" "$log"); then
			echo "no line with \"$text\" in $log" >"$out"
			fail "$desc"
			return 0
		fi
		line=$(sed -E 's/^[^ ]+ [^ ]+\[[0-9]+\] [a-z]+ [A-Za-z0-9_]+: //' <<<"$line")
		for dir in ${live:+"$live"} ${ca:+"$ca"} ${work:+"$work"}; do
			line=${line//"$dir/"//etc/qcg/}
		done
		printf '%s\n' "$line" >>"$tmp"
	done
	if python3 "$src/tests/docs/check_samples.py" --block "$name" "$tmp" >"$out" 2>&1; then
		pass "$desc"
	else
		fail "$desc"
	fi
}
