#!/usr/bin/env python3
"""check_exports.py - libtierstore.so exports exactly the functions of the
public headers (include/tierstore.h and include/tierstore/*.h, each
declaration marked TIER_API), each in a version node of tierstore.map; the
map lists exactly those functions; and docs/api.md documents every one of
them (and the static inline tier_*_params_init) and no function that is
not there (a name written with its "(").

Exits 0 when they agree, 1 with one line per difference.
    check_exports.py SRCROOT LIBTIERSTORE.so
"""
import glob
import os
import re
import subprocess
import sys

DECL = re.compile(r"^TIER_API\b[^(]*?\b(tier_[a-z0-9_]+)\s*\(", re.M)
INLINE = re.compile(r"^static inline\b[^(]*?\b(tier_[a-z0-9_]+)\s*\(", re.M)
DOC_CALL = re.compile(r"\b(tier_[a-z0-9_]+)\(")


def public_functions(root, pattern=DECL):
    names = set()
    headers = [os.path.join(root, "include", "tierstore.h")] + \
        sorted(glob.glob(os.path.join(root, "include", "tierstore", "*.h")))
    for h in headers:
        with open(h, encoding="utf-8") as f:
            names.update(pattern.findall(f.read()))
    return names


def map_nodes(root):
    """{symbol: node} of tierstore.map's global lists."""
    with open(os.path.join(root, "tierstore.map"), encoding="utf-8") as f:
        text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
    nodes = {}
    for node, body in re.findall(r"([A-Za-z_][\w.]*)\s*\{(.*?)\}", text, flags=re.S):
        glob_part = body.split("local:")[0].replace("global:", "")
        for sym in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*;", glob_part):
            nodes[sym] = node
    return nodes


def exported(lib):
    """{symbol: version} of what the shared library exports."""
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) != 3 or parts[1] == "A":   # "A NODE": the version node itself
            continue
        name, _, version = parts[2].partition("@@")
        if not version:
            name, _, version = parts[2].partition("@")
        syms[name] = version
    return syms


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    root, lib = argv[1], argv[2]
    public, nodes, syms = public_functions(root), map_nodes(root), exported(lib)
    problems = []
    for s in sorted(set(syms) - public):
        problems.append(f"{lib}: exports {s}, which no public header declares with TIER_API")
    for s in sorted(public - set(syms)):
        problems.append(f"{lib}: does not export {s}, declared in a public header")
    for s in sorted(public - set(nodes)):
        problems.append(f"tierstore.map: {s} is public but in no version node")
    for s in sorted(set(nodes) - public):
        problems.append(f"tierstore.map: {s} is in node {nodes[s]} but no public header declares it")
    for s in sorted(set(syms) & set(nodes)):
        if syms[s] != nodes[s]:
            problems.append(f"{lib}: {s} has version '{syms[s] or 'none'}', "
                            f"tierstore.map puts it in {nodes[s]}")
    inline = public_functions(root, INLINE)
    with open(os.path.join(root, "docs", "api.md"), encoding="utf-8") as f:
        documented = set(DOC_CALL.findall(f.read()))
    for s in sorted((public | inline) - documented):
        problems.append(f"docs/api.md: does not document {s}()")
    for s in sorted(documented - public - inline):
        problems.append(f"docs/api.md: documents {s}(), which no public header declares")
    for p in problems:
        print(p)
    print(f"exports: {len(syms)} symbols exported, {len(public)} public functions, "
          f"{len(problems)} difference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
