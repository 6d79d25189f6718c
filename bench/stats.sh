# shellcheck shell=bash
# The benches' statistics of numbers on standard input, one a line (lines
# "-", a round that measured nothing, are left out):
#   median   the middle one, or the mean of the two middle ones; "-" for none
#   spread   "LOW-HIGH"; "-" for none
# Sourced: . "$(dirname "$0")/stats.sh"
median() {
	sort -g | awk '$1 != "-" { v[++n] = $1 }
		END { if (!n) print "-"; else if (n % 2) print v[(n + 1) / 2]; else print (v[n / 2] + v[n / 2 + 1]) / 2 }'
}
spread() {
	sort -g | awk '$1 != "-" { if (!n++) lo = $1; hi = $1 } END { if (n) print lo "-" hi; else print "-" }'
}
