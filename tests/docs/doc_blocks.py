#!/usr/bin/env python3
"""Extracts the code blocks of Markdown pages with their doctest markers.

    doc_blocks.py OUTDIR DOC...

For each code block (indented by 4 spaces, or fenced with ``` or ~~~) it
writes OUTDIR/NNN.txt (the block's text, indentation removed) and one line
of OUTDIR/index:

    NNN <TAB> DOC:LINE <TAB> KIND <TAB> FILE <TAB> ROLE <TAB> PARTS <TAB> REASON <TAB> ONLY

KIND is config, run, skip or sample (the marker's), or "error" with REASON saying
what is wrong (no marker, an unknown kind or key, a missing file= or
reason=).  PARTS is 1 (parts), d (daemon) or 0; ONLY is systemd, plain or -.
A config block with from=FILE (a path in the repository: the shipped
example) is written as that file with the block's settings applied: each
`key = value` replaces the file's line of that key (or its commented-out
`# key = ...` line), or is added at the end; the block's comments stay out.
The marker convention is in tests/docs/README.md.
"""
import os
import re
import shlex
import sys

KEYS = {"config": {"file", "from"}, "run": {"role", "parts", "daemon", "only"},
        "skip": {"reason"}, "sample": {"name", "test"}}
ONLY = {"systemd", "plain"}
SETTING = re.compile(r"^\s*([A-Za-z][A-Za-z0-9-]*)\s*=")
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
        if kind == "sample" and not (attrs.get("name") and attrs.get("test")):
            return None, {}, "a sample marker needs name=NAME and test=PATH"
        if "only" in attrs and attrs["only"] not in ONLY:
            return None, {}, "only= must be one of %s" % ", ".join(sorted(ONLY))
        if "parts" in attrs and "daemon" in attrs:
            return None, {}, "a block is parts or daemon, not both"
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


def samples(docs):
    """Yields (doc, line, name, test, text) for each block marked sample."""
    for doc in docs:
        for line, comments, text in blocks(doc):
            kind, attrs, _ = parse_marker(comments)
            if kind == "sample":
                yield doc, line, attrs["name"], attrs["test"], text


def apply_settings(shipped, block):
    """The shipped config's text with the block's `key = value` lines set."""
    lines = shipped.split("\n")
    for setting in block.split("\n"):
        m = SETTING.match(setting)
        if not m:
            continue
        key = m.group(1)
        mine = re.compile(r"^\s*%s\s*=" % re.escape(key))
        commented = re.compile(r"^#\s*%s\s*=" % re.escape(key))
        for pattern in (mine, commented):
            at = next((i for i, l in enumerate(lines) if pattern.match(l)), None)
            if at is not None:
                lines[at] = setting.strip()
                break
        else:
            while lines and lines[-1] == "":
                lines.pop()
            lines += [setting.strip(), ""]
    return "\n".join(lines)


def main():
    out, docs = sys.argv[1], sys.argv[2:]
    n = 0
    with open(out + "/index", "w", encoding="utf-8") as index:
        for doc in docs:
            for line, comments, text in blocks(doc):
                n += 1
                kind, attrs, err = parse_marker(comments)
                if kind == "config" and attrs.get("from"):
                    repo = os.path.dirname(os.path.dirname(os.path.abspath(doc)))
                    try:
                        with open(os.path.join(repo, attrs["from"]), encoding="utf-8") as f:
                            text = apply_settings(f.read(), text)
                    except OSError as e:
                        kind, err = None, "from=%s: %s" % (attrs["from"], e.strerror)
                with open("%s/%03d.txt" % (out, n), "w", encoding="utf-8") as f:
                    f.write(text)
                parts = "1" if "parts" in attrs else "d" if "daemon" in attrs else "0"
                reason = attrs.get("reason", "-")
                if kind == "sample":
                    reason = "output sample %s, checked by %s" % (attrs["name"], attrs["test"])
                fields = ["%03d" % n, "%s:%d" % (doc, line), kind or "error",
                          attrs.get("file", "-"), attrs.get("role", "-"), parts,
                          err or reason, attrs.get("only", "-")]
                index.write("\t".join(f.replace("\t", " ") for f in fields) + "\n")


if __name__ == "__main__":
    main()
