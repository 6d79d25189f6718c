#!/usr/bin/env bash
# docs-shipped-configs: each daemon's shipped etc/qcg-X.conf against the
# daemon's own option table (README.md here).  It fails when the daemon takes
# a setting the file does not name (set, or commented out as `# key = value`),
# when a commented-out key does not show the daemon's default, or when the
# daemon refuses the file with every commented-out line switched on
# (`--check-config`: an unknown or command-line-only name, a malformed value).
#
#   test-shipped-configs.sh BUILD SRC [FILE...]   (FILE: another copy of a
#   shipped file, named qcg-X.conf, to check instead)
set -euo pipefail
build=$1 src=$2
shift 2
files=("$@")
[ ${#files[@]} -gt 0 ] || files=("$src"/etc/qcg-{broker,frontend,helper,proxy}.conf)

tmp=$(mktemp -d /tmp/qcg-shipped-configs.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/lib/common.sh
. "$(dirname "$0")/../lib/common.sh"

for file in "${files[@]}"; do
    name=$(basename "$file" .conf) # qcg-broker
    bin="$build/${name#qcg-}/$name"
    [ -x "$bin" ] || { fail "$name: no binary at $bin"; continue; }
    # The table's settings, `NAME [DEFAULT]` a line.
    "$bin" --man=keys >"$tmp/keys"
    [ -s "$tmp/keys" ] || { fail "$name: --man=keys printed nothing"; continue; }
    # What the file names: `key = value` (set) and `# key = value` (off) lines.
    kv='([a-z][a-z0-9-]*)[[:blank:]]*=[[:blank:]]*(.*)$'
    { sed -nE "s/^$kv/set \1 \2/p" "$file"
      sed -nE "s/^#[[:blank:]]*$kv/off \1 \2/p" "$file"; } >"$tmp/named"
    while read -r key def; do
        grep -qE "^(set|off) $key " "$tmp/named" ||
            fail "$file: does not mention $key (the daemon's default: ${def:-none})"
    done <"$tmp/keys"
    while read -r how key value; do
        line=$(grep -E "^$key( |$)" "$tmp/keys" || true)
        [ -n "$line" ] || {
            fail "$file: names $key, which is not a setting of $name"
            continue
        }
        def=${line#"$key"}
        def=${def# }
        # A commented-out key shows the default the daemon uses without it.
        if [ "$how" = off ] && [ -n "$def" ] && [ "$value" != "$def" ]; then
            fail "$file: \"# $key = $value\" but $name's default is $def"
        fi
    done <"$tmp/named"
    # Every line switched on must be read by the daemon itself.
    sed -E 's/^#[[:blank:]]*([a-z][a-z0-9-]*[[:blank:]]*=)/\1/' "$file" >"$tmp/$name.conf"
    if ! out=$("$bin" --config "$tmp/$name.conf" --check-config 2>&1); then
        fail "$file with every key on: $out"
    fi
    [ "$failed" = 0 ] && echo "ok: $file: $(wc -l <"$tmp/keys") settings, each named"
done
[ "$failed" -eq 0 ]
