# shellcheck shell=bash
# tests/docs/lib.sh: what test-admin-guide.sh and its systemctl stand-in
# (bin/systemctl) share: the private root the guide's paths are moved into,
# and the copy of each host's certificates into /etc/qcg.
#
# doc_paths and doc_deploy need QCG_DOCTEST_ROOT (the private root) in the
# environment; tests/packages uses doc_hosts and doc_addresses too.

# Host names the guide's blocks dial, with the addresses §3 gives them.
doc_hosts="203.0.113.10 broker.grid.example.org
203.0.113.20 proxy.grid.example.org"

# doc_addresses DIR: the documentation addresses (198.18.0.0/15,
# 203.0.113.0/24, 198.51.100.0/24) that the run and config blocks extracted
# into DIR (doc_blocks.py) name, and those of doc_hosts: one a line, sorted.
doc_addresses() {
	local dir=$1
	{
		awk -F'\t' '$3 == "run" || $3 == "config" { print $1 }' "$dir/index" |
			while read -r n; do cat "$dir/$n.txt"; done |
			grep -oE '(198\.1[89]\.[0-9]{1,3}|203\.0\.113|198\.51\.100)\.[0-9]{1,3}(/[0-9]+)?' |
			grep -v / || true
		awk '{ print $1 }' <<<"$doc_hosts"
	} | sort -u
}

# The path map, the only change made to a block's text: each absolute path
# under these directories moves into the private root.  Everything else
# (addresses, ports, host names, options) runs as written.
doc_dirs=(/etc/ /var/lib/ /run/ /secure/ /tmp/)

# doc_paths: stdin to stdout with the path map applied.
doc_paths() {
	local alt
	alt=$(IFS='|'; echo "${doc_dirs[*]}")
	# One pass: the root itself may lie under one of these directories.
	sed -E "s#(^|[^A-Za-z0-9_.~/-])($alt)#\\1$QCG_DOCTEST_ROOT\\2#g"
}

# doc_deploy: what §3 says to copy to each host (ca.crt, the .pem files and
# proxy.key from the CA directory into /etc/qcg, with the table's modes; one
# host here holds them all).  The owner stays the test's user.
doc_deploy() {
	local from=$QCG_DOCTEST_ROOT/secure/grid to=$QCG_DOCTEST_ROOT/etc/qcg f
	[[ -f $from/ca.crt ]] || return 0
	install -d -m 0755 "$to"
	install -m 0644 "$from/ca.crt" "$to/"
	for f in "$from"/*.pem; do [[ -f $f ]] && install -m 0640 "$f" "$to/"; done
	if [[ -f $from/proxy.key ]]; then install -m 0600 "$from/proxy.key" "$to/"; fi
}
