#!/usr/bin/env python3
"""check_sizes.py - the size limits CONTRIBUTING.md sets, on the sources of
the library's layers and tools/ (suite unit; no build needed):

 1. no source (.c, .cu, .h, .cuh) over MAX_LINES lines;
 2. no function over MAX_FUNC lines, from the first line of its signature
    to its closing brace.  A function is a top-level { ... } block whose
    opening follows a signature ending in ')' (over several lines, static
    or not); comments, strings, character literals and preprocessor lines
    are blanked first, so braces in them do not count.

A file too long is split along its seams (a reader and a writer, commit
and recover), a function too long into named steps.  Prints each break
with its place; exit 1 when there is one.
    check_sizes.py SRCROOT
"""
import os
import re
import sys

MAX_LINES = 1000
MAX_FUNC = 150
FOLDERS = ["common", "formats", "kernels", "tiers", "prefetch", "runtime", "tools"]
SOURCE = (".c", ".cu", ".h", ".cuh")
SIGNATURE_END = re.compile(r"(\)\s*(const)?|__attribute__\s*\(\(.*\)\))\s*$")
NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def blank(src):
    """@src with comments, strings and character literals replaced by
    spaces (newlines kept), and preprocessor lines emptied."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            out.append(c)
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", src[i:j]))
        i = j
    lines, cont = [], False
    for line in "".join(out).split("\n"):
        if cont or line.lstrip().startswith("#"):
            cont = line.rstrip().endswith("\\")
            lines.append("")
        else:
            lines.append(line)
    return "\n".join(lines)


def functions(text):
    """(name, first line, last line) of each function defined in @text."""
    found, depth, opened = [], 0, None
    line = 1
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c == "{":
            if depth == 0:
                before = text[:i].rstrip()
                opened = None
                if SIGNATURE_END.search(before):
                    k, par = len(before), 0
                    while k > 0:
                        ch = before[k - 1]
                        if ch == ")":
                            par += 1
                        elif ch == "(":
                            par -= 1
                        elif par == 0 and ch in ";}":
                            break
                        k -= 1
                    sig = before[k:]
                    m = NAME.search(sig)
                    if m and m.group(1) not in ("if", "for", "while", "switch"):
                        start = text.count("\n", 0, k + len(sig) - len(sig.lstrip())) + 1
                        opened = (m.group(1), start)
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0 and opened:
                found.append((opened[0], opened[1], line))
                opened = None
    return found


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    root = argv[1]
    breaks = []
    for folder in FOLDERS:
        for dirpath, _, filenames in os.walk(os.path.join(root, folder)):
            for f in sorted(filenames):
                if not f.endswith(SOURCE):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                src = open(path, encoding="utf-8", errors="replace").read()
                n = src.count("\n")
                if n > MAX_LINES:
                    breaks.append(f"{rel}: {n} lines, more than {MAX_LINES}: split it along a seam")
                for name, first, last in functions(blank(src)):
                    if last - first + 1 > MAX_FUNC:
                        breaks.append(f"{rel}:{first}: {name} is {last - first + 1} lines, more "
                                      f"than {MAX_FUNC}: split it into named steps")
    for b in breaks:
        print(b)
    print(f"sizes: {len(breaks)} source(s) or function(s) over the limits "
          f"({MAX_LINES} lines a source, {MAX_FUNC} a function)")
    return 1 if breaks else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
