#!/usr/bin/env python3
"""The --help blocks in docs/*.md, made from the binaries: each fenced block right after a line
`<!-- generated: CMD -->` (CMD one of the project's commands, e.g. `dscached --help`) holds the
exact output of BIN_DIR/CMD.

  tests/docs_help.py BIN_DIR           checks: prints each block that differs, exit 1 if any
  tests/docs_help.py BIN_DIR --write   rewrites the blocks from the binaries
"""
import os
import re
import shlex
import subprocess
import sys

MARK = re.compile(r"^<!-- generated: (.+) -->$")
COMMANDS = ("dscached", "dscache")


def run(bin_dir, cmd):
    argv = shlex.split(cmd)
    if argv[0] not in COMMANDS:
        raise SystemExit("docs_help: %r is not one of %s" % (cmd, ", ".join(COMMANDS)))
    argv[0] = os.path.join(bin_dir, argv[0])
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=30)
    return r.stdout.rstrip("\n").split("\n")


def process(path, bin_dir, write):
    """Returns the (cmd, problem) pairs of one file; with write, fixes them in place."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, problems, i = [], [], 0
    while i < len(lines):
        m = MARK.match(lines[i])
        out.append(lines[i])
        i += 1
        if not m:
            continue
        cmd = m.group(1)
        if i >= len(lines) or not lines[i].startswith("```"):
            problems.append((cmd, "the marker is not followed by a fenced block"))
            continue
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        if end >= len(lines):
            problems.append((cmd, "the fenced block is not closed"))
            continue
        want = run(bin_dir, cmd)
        have = lines[i + 1:end]
        if have != want:
            diff = next(k for k in range(max(len(have), len(want)))
                        if k >= len(have) or k >= len(want) or have[k] != want[k])
            problems.append((cmd, "line %d of the block: docs have %r, the binary prints %r" % (
                diff + 1, have[diff] if diff < len(have) else "(end)",
                want[diff] if diff < len(want) else "(end)")))
        out.append(lines[i])
        out.extend(want if write else have)
        out.append(lines[end])
        i = end + 1
    if write and problems:
        open(path, "w", encoding="utf-8").write("\n".join(out))
    return problems


def main():
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--write"):
        print(__doc__, file=sys.stderr)
        return 2
    bin_dir, write = sys.argv[1], len(sys.argv) == 3
    docs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs")
    bad = blocks = 0
    for name in sorted(os.listdir(docs)):
        if not name.endswith(".md"):
            continue
        path = os.path.join(docs, name)
        blocks += sum(1 for l in open(path, encoding="utf-8") if MARK.match(l.rstrip("\n")))
        for cmd, problem in process(path, bin_dir, write):
            bad += 1
            print("%s docs/%s: `%s`: %s" % ("rewrote" if write else "FAIL:", name, cmd, problem))
    print("%d generated block(s) in docs/, %d %s" % (
        blocks, bad, "rewritten" if write else "out of date"))
    return 1 if bad and not write else 0


if __name__ == "__main__":
    sys.exit(main())
