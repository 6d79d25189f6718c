#!/usr/bin/env python3
"""Extracts the code blocks of Markdown pages with their doctest markers.

    doc_blocks.py OUTDIR DOC...

For each code block (indented by 4 spaces, or fenced with ``` or ~~~) it
writes OUTDIR/NNN.txt (the block's text, indentation removed) and one line
of OUTDIR/index:

    NNN <TAB> DOC:LINE <TAB> KIND <TAB> FILE <TAB> ROLE <TAB> PARTS <TAB> REASON

KIND is config, run or skip (the marker's), or "error" with REASON saying
what is wrong (no marker, an unknown kind or key, a missing file= or
reason=).  The marker convention is in tests/docs/README.md.
"""
import re
import shlex
import sys

KEYS = {"config": {"file"}, "run": {"role", "parts"}, "skip": {"reason"}}
COMMENT = re.compile(r"^\s{0,3}<!--.*-->\s*$")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
LIST_ITEM = re.compile(r"^\s{0,3}([-*+]|\d+[.)])\s")


def parse_marker(comments):
    """The doctest marker among the HTML comment lines right above a block:
    (kind, attributes, error)."""
    for c in comments:
        body = c.strip()[4:-3].strip()
        if not body.startswith("doctest:"):
            continue
        try:
            words = shlex.split(body[len("doctest:"):])
        except ValueError as e:
            return None, {}, "marker does not parse: %s" % e
        if not words or words[0] not in KEYS:
            return None, {}, "marker kind must be one of %s" % ", ".join(sorted(KEYS))
        kind, attrs = words[0], {}
        for w in words[1:]:
            key, _, value = w.partition("=")
            if key not in KEYS[kind]:
                return None, {}, "marker '%s' takes no key '%s'" % (kind, key)
            attrs[key] = value
        if kind == "config" and not attrs.get("file"):
            return None, {}, "a config marker needs file=PATH"
        if kind == "skip" and not attrs.get("reason"):
            return None, {}, "a skip marker needs reason=..."
        return kind, attrs, None
    return None, {}, "a code block without a doctest marker"


def blocks(path):
    """Yields (line number, comment lines above, text) for each code block."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i, prev_blank, in_list, comments = 0, True, False, []
    while i < len(lines):
        line = lines[i]
        m = FENCE.match(line)
        if m:
            start, body = i + 1, []
            i += 1
            while i < len(lines) and not lines[i].lstrip().startswith(m.group(1)):
                body.append(lines[i])
                i += 1
            yield start, comments, "\n".join(body) + "\n"
            i, prev_blank, comments = i + 1, False, []
            continue
        indented = line.startswith("    ") or line.startswith("\t")
        # An indented line after a blank is code, unless it continues a list
        # item (CommonMark); a marker comment ends a paragraph as a blank does.
        if indented and line.strip() and prev_blank and not in_list:
            start, body = i + 1, []
            while i < len(lines) and (lines[i].startswith("    ") or lines[i].startswith("\t")
                                      or not lines[i].strip()):
                body.append(lines[i][4:] if lines[i].startswith("    ") else lines[i][1:])
                i += 1
            while body and not body[-1].strip():
                body.pop()
            yield start, comments, "\n".join(body) + "\n"
            prev_blank, comments = True, []
            continue
        if not line.strip():
            prev_blank = True
        elif COMMENT.match(line):
            comments = comments + [line]
            prev_blank = True
            in_list = in_list and line.startswith(" ")
            i += 1
            continue
        else:
            prev_blank = False
            if LIST_ITEM.match(line):
                in_list = True
            elif not line.startswith(" "):
                in_list = False
        comments = []
        i += 1


def main():
    out, docs = sys.argv[1], sys.argv[2:]
    n = 0
    with open(out + "/index", "w", encoding="utf-8") as index:
        for doc in docs:
            for line, comments, text in blocks(doc):
                n += 1
                kind, attrs, err = parse_marker(comments)
                with open("%s/%03d.txt" % (out, n), "w", encoding="utf-8") as f:
                    f.write(text)
                fields = ["%03d" % n, "%s:%d" % (doc, line), kind or "error",
                          attrs.get("file", "-"), attrs.get("role", "-"),
                          "1" if "parts" in attrs else "0", err or attrs.get("reason", "-")]
                index.write("\t".join(f.replace("\t", " ") for f in fields) + "\n")


if __name__ == "__main__":
    main()
