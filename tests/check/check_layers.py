#!/usr/bin/env python3
"""check_layers.py - the layer rule of docs/architecture.md, checked on the
sources and on the libraries the build made.

The library's layers, bottom up: common, formats, kernels, tiers, prefetch,
runtime.  A layer's folder may hold rooms, the subfolders ROOMS names
(runtime/manifest/, runtime/optim/, runtime/comm/): a room belongs to its
layer.  Every subfolder of a layer's folder, at any depth, must be a known
room, so that no source escapes the check by living in a new folder.  A
file may use its own layer and the layers below, never one above:

 1. includes: every #include "..." in a layer's folder names a header of
    its own layer or a lower one (by its path from the root, or the public header of
    that layer: tierstore/common.h is common's, tierstore/kernels.h
    kernels', tierstore/tiers.h tiers', tierstore.h and tierstore/live.h
    runtime's), config.h, or a file beside it.  tools/ includes the public
    headers and its own alone.
 2. symbols (with LAYER=LIB arguments, the layers' static libraries): no
    layer's library leaves undefined a symbol that a higher layer's
    library defines, so no call goes up a layer through a declaration
    (a public header, or one written by hand).

Exits 0 when the tree keeps the rule, 1 with one line per break.
    check_layers.py SRCROOT [LAYER=LIBRARY ...]
"""
import os
import re
import subprocess
import sys

LAYERS = ["common", "formats", "kernels", "tiers", "prefetch", "runtime"]
# The subfolders of each layer's folder (and of tools/), each a room of
# that layer.  A subfolder not named here is a break of the rule.
ROOMS = {"runtime": ["manifest", "optim", "comm"]}
RANK = {name: i for i, name in enumerate(LAYERS)}
PUBLIC = {
    "tierstore/common.h": "common",
    "tierstore/version.h": "common",
    "tierstore/pool.h": "common",
    "tierstore/kernels.h": "kernels",
    "tierstore/tiers.h": "tiers",
    "tierstore/live.h": "runtime",
    "tierstore/toolkit.h": "runtime",
    "tierstore.h": "runtime",
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE = re.compile(r"\.(c|h|cu)$")


def sources(root, layer, breaks):
    """The sources of @layer's folder and its rooms, as paths from @root;
    a subfolder that is not a known room adds a break to @breaks."""
    found = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, layer)):
        rel = os.path.relpath(dirpath, root)
        for d in sorted(dirnames):
            sub = os.path.join(rel, d)
            if rel != layer or d not in ROOMS.get(layer, []):
                breaks.append(f"{sub}/: not a room of {layer} (a subfolder of a layer must be "
                              f"one of ROOMS in tests/check/check_layers.py: "
                              f"{', '.join(ROOMS.get(layer, [])) or 'none'})")
        dirnames[:] = [d for d in dirnames if rel == layer and d in ROOMS.get(layer, [])]
        found += [os.path.join(rel, n) for n in sorted(filenames) if SOURCE.search(n)]
    return found


def check_includes(root):
    breaks = []
    for folder in LAYERS + ["tools"]:
        for path in sources(root, folder, breaks):
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                for line_no, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if m:
                        why = include_break(root, folder, os.path.dirname(path), m.group(1))
                        if why:
                            breaks.append(f"{path}:{line_no}: #include \"{m.group(1)}\": {why}")
    return breaks


def include_break(root, folder, here, inc):
    """Why including @inc from a file in @here (a folder of layer @folder)
    breaks the rule, or None."""
    if inc == "config.h" and folder != "tools":
        return None
    if inc in PUBLIC:
        target = PUBLIC[inc]
    elif inc.startswith("tierstore/"):
        return "not a public header of any layer"
    elif "/" in inc and inc.split("/")[0] in RANK:
        target = inc.split("/")[0]
        if not os.path.exists(os.path.join(root, inc)):
            return "no such header"
    elif "/" not in inc:
        if os.path.exists(os.path.join(root, here, inc)):
            return None
        return f"no such header beside it in {here}/"
    else:
        return "outside the layers"
    if folder == "tools":
        return None if inc in PUBLIC else f"tools/ use the public headers alone ({target}/ is internal)"
    if RANK[target] > RANK[folder]:
        return f"{target} is above {folder}: a layer includes only itself and the layers below"
    return None


def symbols(lib):
    """(defined, undefined) global symbols of a static library, by nm: each
    a dict of symbol -> the member that defines or uses it."""
    out = subprocess.run(["nm", "-A", "-g", lib], check=True, capture_output=True,
                         text=True).stdout
    defined, undefined = {}, {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4:      # "lib.a:obj.o: ADDRESS KIND SYMBOL"
            where, kind, sym = parts[0], parts[2], parts[3]
        elif len(parts) == 3:    # "lib.a:obj.o: U SYMBOL"
            where, kind, sym = parts
        else:
            continue
        where = where.rstrip(":")
        if kind == "U":
            undefined.setdefault(sym, where)
        elif kind not in ("w", "v"):
            defined[sym] = where
    return defined, undefined


def check_symbols(libs):
    breaks = []
    tables = {layer: symbols(lib) for layer, lib in libs.items()}
    owner = {}
    for layer in libs:
        for sym in tables[layer][0]:
            owner.setdefault(sym, layer)
    for layer in libs:
        for sym, where in sorted(tables[layer][1].items()):
            above = owner.get(sym)
            if above and RANK[above] > RANK[layer]:
                breaks.append(f"{os.path.basename(where)} ({layer}) uses {sym}, defined in "
                              f"{above}, a layer above it")
    return breaks


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    root = argv[1]
    libs = {}
    for arg in argv[2:]:
        layer, _, lib = arg.partition("=")
        if layer not in RANK or not lib:
            print(f"check_layers.py: {arg}: expected LAYER=LIBRARY, LAYER one of "
                  f"{', '.join(LAYERS)}", file=sys.stderr)
            return 2
        libs[layer] = lib
    breaks = check_includes(root) + check_symbols(libs)
    for b in breaks:
        print(b)
    print(f"layers: {len(breaks)} break(s) of the layer rule"
          f" ({'includes and symbols' if libs else 'includes'} checked)")
    return 1 if breaks else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
