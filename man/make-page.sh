#!/bin/sh
# make-page.sh TEMPLATE OUT VERSION -- COMMAND [ARGS...]
#
# Writes the man page OUT from TEMPLATE (hand-written roff: NAME, DESCRIPTION,
# FILES, SEE ALSO) and what COMMAND prints, so that the options have one
# source, the program itself.  TEMPLATE lines that are only a placeholder:
#   @SYNOPSIS@     COMMAND's output (roff: a program's hidden --man) up to its
#                  ".SH OPTIONS" line
#   @OPTIONS@      the rest of it, or all of it without @SYNOPSIS@
#   @HELP@         COMMAND's output as preformatted text (a tool's --help),
#                  but for its "usage:" lines (and the lines indented under
#                  them), which @SYNOPSIS@ prints, and its "exit status:"
#                  paragraph, which it must have
#   @EXIT_STATUS@  that paragraph; for an @OPTIONS@ page, exit-status.roff
#                  next to this script: the daemons' common statuses
# and @VERSION@ anywhere.  Fails, leaving no OUT, if COMMAND fails or prints
# nothing.
set -eu
[ $# -ge 5 ] && [ "$4" = -- ] || { echo "usage: make-page.sh TEMPLATE OUT VERSION -- COMMAND..." >&2; exit 2; }
template=$1 out=$2 version=$3
shift 4
here=$(cd "$(dirname "$0")" && pwd)
body=$out.body.tmp
trap 'rm -f "$body" "$out.tmp"' EXIT
"$@" >"$body" </dev/null || { echo "make-page.sh: '$*' failed" >&2; exit 1; }
[ -s "$body" ] || { echo "make-page.sh: '$*' printed nothing" >&2; exit 1; }
awk -v body="$body" -v exits="$here/exit-status.roff" -v version="$version" '
# Plain text in roff: a backslash is \e, and no line may start a request.
function roff(l) { gsub(/\\/, "\\e", l); return "\\&" l }
# The output; in it, a paragraph starting "exit status:" (a --help text says
# so) is kept apart for the EXIT STATUS section.
BEGIN {
	while ((getline l < body) > 0) {
		if (l ~ /^[Uu]sage: /) {
			sub(/^[Uu]sage: */, "", l)
			inusage = 1
		} else if (inusage && l !~ /^     /) {
			inusage = 0
		}
		if (inusage) {
			# flush left, continuations indented under the name
			if (l ~ /^ *[a-z]/)
				sub(/^ +/, "", l)
			else
				sub(/^ +/, "    ", l)
			nusage++
			usage[nusage] = l
			continue
		}
		if (l ~ /^[ \t]*[Ee]xit status:/) {
			sub(/^[ \t]*[Ee]xit status:[ \t]*/, "", l)
			inexit = 1
		} else if (l ~ /^[ \t]*$/) {
			inexit = 0
		}
		if (inexit) {
			sub(/^[ \t]+/, "", l)
			nexit++
			exitline[nexit] = l
		} else {
			n++
			line[n] = l
		}
	}
	while (n > 0 && line[n] ~ /^[ \t]*$/)
		n--
	for (k = 1; k <= n && line[k] != ".SH OPTIONS"; k++)
		;
}
$0 == "@SYNOPSIS@" && nusage > 0 {
	print ".SH SYNOPSIS\n.nf"
	for (i = 1; i <= nusage; i++) print roff(usage[i])
	print ".fi"
	next
}
$0 == "@SYNOPSIS@" && line[1] != ".SH SYNOPSIS" {
	print "make-page.sh: no \"usage:\" line and no .SH SYNOPSIS in the output" > "/dev/stderr"
	exit 1
}
$0 == "@SYNOPSIS@" { for (i = 1; i < k; i++) print line[i]; from = k; next }
$0 == "@OPTIONS@" { for (i = from ? from : 1; i <= n; i++) print line[i]; next }
$0 == "@HELP@" {
	while (n > 0 && line[1] ~ /^[ \t]*$/) {
		for (i = 1; i < n; i++) line[i] = line[i + 1]
		n--
	}
	print ".PP\n.nf"
	for (i = 1; i <= n; i++) print roff(line[i])
	print ".fi"
	help = 1
	next
}
$0 == "@EXIT_STATUS@" {
	if (help && nexit == 0) {
		print "make-page.sh: the --help text has no \"exit status:\" paragraph" > "/dev/stderr"
		exit 1
	}
	for (i = 1; i <= nexit; i++) print roff(exitline[i])
	if (nexit == 0)
		while ((getline l < exits) > 0) print l
	next
}
{ gsub(/@VERSION@/, version); print }
' "$template" >"$out.tmp"
mv "$out.tmp" "$out"
