#!/usr/bin/env python3
"""Checks the JSON output samples a run block shows against what it printed.

    check_samples.py BLOCK_TEXT LOG...

A sample is a comment of the block holding one JSON object, e.g.
`# -> {"event":"sent","peer":0,...}` or `# last line: {...}`.  It passes
when some line of the logs is a JSON object with the same keys, each value
of the same JSON type (the values themselves differ from host to host:
times, techniques).  Prints each sample's verdict; exit 1 when one fails.
"""
import json
import re
import sys

SAMPLE = re.compile(r"#[^{]*(\{.*\})\s*$")


def shape(obj):
    return {k: type(v).__name__ for k, v in obj.items()}


def main():
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
