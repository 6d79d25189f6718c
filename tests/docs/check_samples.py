#!/usr/bin/env python3
"""Checks the output samples the docs show against what the programs print.

    check_samples.py BLOCK_TEXT LOG...
    check_samples.py --block NAME OUTPUT [DOC...]
    check_samples.py --row KEY OUTPUT [DOC...]
    check_samples.py --list [DOC...]

The first form: the JSON samples in a run block's comments.
A sample is a comment of the block holding one JSON object, e.g.
`# -> {"event":"sent","peer":0,...}` or `# last line: {...}`.  It passes
when some line of the logs is a JSON object with the same keys, each value
of the same JSON type (the values themselves differ from host to host:
times, techniques).  Prints each sample's verdict; exit 1 when one fails.

--block: the block a `<!-- doctest: sample name=NAME test=PATH -->` marker
stands above (DOC: README.md, docs/user.md and docs/admin.md by default)
against OUTPUT, a file of what the program printed.  A JSON block must have
the shape of OUTPUT's JSON (the same keys at every level, each value of the
same type; a null matches any, a list's elements the sample's first).  Any
other block must match a run of consecutive lines of OUTPUT, in order, each
line word for word except: a word with a digit matches any word (times,
ports, addresses, ids), the word after it may gain or lose a plural "s",
"..." matches anything, and blanks match any blanks.  --list prints each
sample's DOC:LINE, NAME and PATH.

--row: the table row of DOC whose first cell is a code span holding KEY
(e.g. the "you see" column of a table of messages) against OUTPUT: some
line of OUTPUT must match that cell as a block's line does.
"""
import os
import json
import re
import sys

SAMPLE = re.compile(r"#[^{]*(\{.*\})\s*$")


def shape(obj):
    return {k: type(v).__name__ for k, v in obj.items()}


HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DOCS = [os.path.join(REPO, d) for d in ("README.md", "docs/user.md", "docs/admin.md")]


def line_pattern(line):
    """One sample line as a regular expression (see the module's text)."""
    if not line.strip():
        return re.compile(r"\s*")
    out, after_number = [r"\s*"], False
    for word in line.split():
        if re.search(r"[0-9]", word):
            out.append(r"\S+")
        elif after_number and re.fullmatch(r"[A-Za-z]+[,;:.)]?", word):
            # "4 nodes," matches "1 node,": the plural s before any punctuation.
            base, punct = re.fullmatch(r"([A-Za-z]+)(.?)", word).groups()
            out.append(re.escape(base[:-1] if base.endswith("s") else base) + "s?" + re.escape(punct))
        else:
            out.append(".*".join(re.escape(p) for p in word.split("...")))
        after_number = bool(re.search(r"[0-9]", word))
        out.append(r"\s+")
    out[-1] = r"\s*"
    return re.compile("".join(out))


def kind(value):
    """A JSON value's type: int and float are both numbers, bool is not."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "number"
    return type(value).__name__


def same_shape(sample, got, where="$"):
    """None, or where the JSON got differs in shape from sample."""
    if sample is None or got is None:
        return None
    if kind(sample) != kind(got):
        return "%s: %s in the docs, %s in the output" % (where, kind(sample), kind(got))
    if isinstance(sample, dict):
        if set(sample) != set(got):
            return "%s: keys only in the docs %s, only in the output %s" % (
                where, sorted(set(sample) - set(got)), sorted(set(got) - set(sample)))
        for k in sample:
            diff = same_shape(sample[k], got[k], "%s.%s" % (where, k))
            if diff:
                return diff
    if isinstance(sample, list) and sample:
        for i, g in enumerate(got):
            diff = same_shape(sample[0], g, "%s[%d]" % (where, i))
            if diff:
                return diff
    return None


def check_block(name, output, docs):
    sys.path.insert(0, HERE)
    import doc_blocks
    found = [s for s in doc_blocks.samples(docs) if s[2] == name]
    if len(found) != 1:
        print("sample %s: %d blocks have that name, not 1" % (name, len(found)))
        return 1
    doc, line, _, _, text = found[0]
    where = "%s:%d" % (os.path.relpath(doc, REPO), line)
    got = open(output, encoding="utf-8", errors="replace").read()
    try:
        sample = json.loads(text)
    except ValueError:
        sample = None
    if sample is not None:
        try:
            objs = [json.loads(got)]
        except ValueError:
            objs = [json.loads(l) for l in got.split("\n") if l.startswith("{")]
        diffs = [same_shape(sample, o) for o in objs] or ["no JSON in the output"]
        if None in diffs:
            print("sample %s (%s): the output has its shape" % (name, where))
            return 0
        print("sample %s (%s) differs from the output: %s" % (name, where, diffs[0]))
        return 1
    want = text.rstrip("\n").split("\n")
    pats = [line_pattern(w) for w in want]
    lines = got.rstrip("\n").split("\n")
    best, best_at = -1, 0
    for at in range(max(1, len(lines) - len(want) + 1)):
        k = 0
        while k < len(want) and at + k < len(lines) and pats[k].fullmatch(lines[at + k].rstrip()):
            k += 1
        if k == len(want):
            print("sample %s (%s): %d lines match the output from its line %d"
                  % (name, where, k, at + 1))
            return 0
        if k > best:
            best, best_at = k, at
    print("sample %s (%s) does not match the output: its line %d" % (name, where, best + 1))
    print("  docs:   %s" % want[best])
    got_line = lines[best_at + best] if best_at + best < len(lines) else "(the output ends)"
    print("  output: %s" % got_line)
    print("  (the whole output:)")
    for l in lines:
        print("    " + l)
    return 1


ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|")


def check_row(key, output, docs):
    cells = []
    for doc in docs:
        with open(doc, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                m = ROW.match(line)
                if m and key in m.group(1):
                    cells.append(("%s:%d" % (os.path.relpath(doc, REPO), n), m.group(1)))
    if len(cells) != 1:
        print("row %r: %d table rows hold it, not 1" % (key, len(cells)))
        return 1
    where, cell = cells[0]
    pat = line_pattern(cell)
    lines = open(output, encoding="utf-8", errors="replace").read().split("\n")
    for l in lines:
        if pat.fullmatch(l.rstrip()):
            print("row %s: the output has it: %s" % (where, l.rstrip()))
            return 0
    print("row %s matches no line of the output" % where)
    print("  docs:   %s" % cell)
    for l in lines:
        print("    " + l)
    return 1


def main():
    if sys.argv[1:2] == ["--list"]:
        sys.path.insert(0, HERE)
        import doc_blocks
        for doc, line, name, test, _ in doc_blocks.samples(sys.argv[2:] or DOCS):
            print("%s:%d\t%s\t%s" % (os.path.relpath(doc, REPO), line, name, test))
        return 0
    if sys.argv[1:2] == ["--row"]:
        return check_row(sys.argv[2], sys.argv[3], sys.argv[4:] or DOCS)
    if sys.argv[1:2] == ["--block"]:
        return check_block(sys.argv[2], sys.argv[3], sys.argv[4:] or DOCS)
    text, logs = sys.argv[1], sys.argv[2:]
    seen = []
    for path in logs:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(obj, dict):
                        seen.append(obj)
    failed = 0
    with open(text, encoding="utf-8") as f:
        for line in f:
            m = SAMPLE.search(line)
            if not m:
                continue
            try:
                sample = json.loads(m.group(1))
            except ValueError as e:
                print("sample is not JSON (%s): %s" % (e, m.group(1)))
                failed += 1
                continue
            if any(shape(o) == shape(sample) for o in seen):
                print("sample matches the output: %s" % m.group(1))
            else:
                print("sample matches no output line: %s" % m.group(1))
                for o in seen:
                    print("  output: %s" % json.dumps(o, separators=(",", ":")))
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
