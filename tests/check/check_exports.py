#!/usr/bin/env python3
"""check_exports.py - libtierstore.so exports exactly the functions of the
public headers (include/tierstore.h and include/tierstore/*.h, each
declaration marked TIER_API; no public header defines a tier_ function
static inline: each is a symbol, which a binding can call), each in a
version node of tierstore.map; the map lists exactly those functions; the
newest node is TIERSTORE_X.Y of project()'s version X.Y.Z in meson.build,
and the library's soname libtierstore.so.X.Y; and the docs document every
one of them and no function that is not there (a name written with its
"("): the trainer's functions (tierstore.h, tierstore/common.h,
tierstore/live.h) in docs/api.md, the toolkit's (tierstore/toolkit.h,
tierstore/tiers.h, tierstore/kernels.h, tierstore/pool.h) in docs/toolkit.md.

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
NODE = re.compile(r"\bTIERSTORE_(\d+)\.(\d+)\s*\{")
# The page that documents each public header's functions.
TOOLKIT_HEADERS = ("toolkit.h", "tiers.h", "kernels.h", "pool.h")
PAGES = {"api": os.path.join("docs", "api.md"), "toolkit": os.path.join("docs", "toolkit.md")}


def headers(root):
    return [os.path.join(root, "include", "tierstore.h")] + \
        sorted(glob.glob(os.path.join(root, "include", "tierstore", "*.h")))


def public_functions(root, pattern=DECL, page=None):
    """The functions the public headers declare (of @page's headers when
    given: "api" or "toolkit")."""
    names = set()
    for h in headers(root):
        if page and (os.path.basename(h) in TOOLKIT_HEADERS) != (page == "toolkit"):
            continue
        with open(h, encoding="utf-8") as f:
            names.update(pattern.findall(f.read()))
    return names


def project_version(root):
    """(X, Y) of meson.build's project(version: 'X.Y.Z')."""
    with open(os.path.join(root, "meson.build"), encoding="utf-8") as f:
        m = re.search(r"project\([^)]*?version:\s*'(\d+)\.(\d+)\.(\d+)'", f.read(), re.S)
    if not m:
        sys.exit("check_exports: meson.build: no project(version: 'X.Y.Z')")
    return int(m.group(1)), int(m.group(2))


def newest_node(root):
    """(X, Y) of tierstore.map's newest version node TIERSTORE_X.Y."""
    with open(os.path.join(root, "tierstore.map"), encoding="utf-8") as f:
        text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
    nodes = [(int(a), int(b)) for a, b in NODE.findall(text)]
    return max(nodes) if nodes else None


def soname(lib):
    out = subprocess.run(["readelf", "-d", lib], check=True, capture_output=True,
                         text=True).stdout
    m = re.search(r"\(SONAME\).*\[(.*)\]", out)
    return m and m.group(1)


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
    for s in sorted(public_functions(root, INLINE)):
        problems.append(f"include/: {s} is static inline: declare it TIER_API and define it "
                        f"once in the library (a binding cannot call an inline function)")
    version, node = project_version(root), newest_node(root)
    if node != version:
        problems.append("tierstore.map: the newest version node is %s, project() in meson.build "
                        "says %d.%d: a version adds its node TIERSTORE_%d.%d"
                        % ("TIERSTORE_%d.%d" % node if node else "none", *version, *version))
    want = "libtierstore.so.%d.%d" % version
    got = soname(lib)
    if got != want:
        problems.append(f"{lib}: soname {got}, project()'s version makes it {want}")
    for page, rel in PAGES.items():
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            documented = set(DOC_CALL.findall(f.read()))
        for s in sorted(public_functions(root, page=page) - documented):
            problems.append(f"{rel}: does not document {s}()")
        for s in sorted(documented - public):
            problems.append(f"{rel}: documents {s}(), which no public header declares")
    for p in problems:
        print(p)
    print(f"exports: {len(syms)} symbols exported, {len(public)} public functions, "
          f"{len(problems)} difference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
