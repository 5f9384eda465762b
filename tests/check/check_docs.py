#!/usr/bin/env python3
"""The docs against the code (suite unit; no build needed).

    check_docs.py SOURCE_ROOT

1. The API version.  The version lives in meson.build's project(version:
   'X.Y.Z') alone; meson generates the public header's tierstore/version.h
   (TIER_VERSION_MAJOR, _MINOR, _PATCH), the soname and the binding's
   _version.py from it.  Here every statement of a version in README.md,
   CONTRIBUTING.md and docs/*.md must be project()'s: "API X.Y", "API version X.Y", "(version X.Y)" in a
   heading, "version (X, Y, Z)",
   the soname "libtierstore.so.X.Y[.Z]", a tool's "tierstore X.Y.Z" and a
   quoted "X.Y.Z" where tier_version's text is meant.  A mention of an
   older version is history, not a statement, when its sentence says so
   before it ("before", "since", "from", "until", "added", "introduced",
   "written by", "built against", "was", a commit id of the build it
   measured, ...; a heading anywhere in it) or when it sits in a
   "Changes in X.Y" section; a version newer than project()'s is an error
   wherever it is.  Also: no header or binding source writes the version
   by hand (a #define TIER_VERSION_MAJOR in include/, an API_MAJOR = N in
   python/tierstore/), and every version node TIERSTORE_X.Y a doc names is
   one of tierstore.map's.
2. The file map.  docs/architecture.md's table of folders names every
   .c, .cu and .h file of common/ formats/ kernels/ tiers/ prefetch/
   runtime/ tools/ and their rooms (runtime/optim/ ...: a file of a room is
   named by its path from the row's folder, `optim/optim.c`) (a header beside a .c or .cu file of the same name goes with it, as the
   page says internal headers do), and names no file that is not there.

Prints each problem with its file and line; exit 1 when there is one.
"""
import os
import re
import sys

LAYERS = ["common", "formats", "kernels", "tiers", "prefetch", "runtime", "tools"]
SOURCE_EXT = (".c", ".cu", ".h")

# A version stated: (pattern, how many parts it compares: 2 = X.Y, 3 = X.Y.Z)
MENTIONS = [
    (re.compile(r"\bAPI\s+(?:is\s+)?(?:version\s+)?(\d+)\.(\d+)(?![\d.]*\d)"), 2),
    (re.compile(r"\(version\s+(\d+)\.(\d+)\)"), 2),
    (re.compile(r"\blibtierstore\.so\.(\d+)\.(\d+)(?:\.(\d+))?"), 0),
    (re.compile(r"\btierstore\s+(\d+)\.(\d+)\.(\d+)\b"), 3),
    (re.compile(r"\bversion\s+\((\d+),\s*(\d+),\s*(\d+)\)"), 3),
]
# a quoted "X.Y.Z" on a line about the library's version text
QUOTED = re.compile(r"\"(\d+)\.(\d+)\.(\d+)\"")
QUOTED_CONTEXT = re.compile(r"tier_version\b|library's version|tierstore\.version\(\)")
HISTORY = re.compile(
    r"\b(before|since|from|until|up to|earlier|older|former|added|introduced|written by|"
    r"built against|was|were|changed in|changes in)\b|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])"
    r"[0-9a-f]{7,40}\b", re.I)
NODE = re.compile(r"\bTIERSTORE_(\d+)\.(\d+)\b")
SENTENCE_END = re.compile(r"[.;!?](?=\s)|\|")


def project_version(root):
    """(X, Y, Z) of meson.build's project(version: 'X.Y.Z')."""
    text = open(os.path.join(root, "meson.build")).read()
    m = re.search(r"project\([^)]*?version:\s*'(\d+)\.(\d+)\.(\d+)'", text, re.S)
    if not m:
        sys.exit("check_docs: meson.build: no project(version: 'X.Y.Z')")
    return tuple(int(g) for g in m.groups())


def paragraphs(path):
    """(first line number, text, is_heading, is_code) of each paragraph:
    prose lines joined by blanks, each heading and each code line alone."""
    out, buf, start, code = [], [], 0, False
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            if buf:
                out.append((start, " ".join(buf), False, False))
                buf = []
            code = not code
            continue
        if code:
            out.append((n, line, False, True))
        elif line.startswith("#"):
            if buf:
                out.append((start, " ".join(buf), False, False))
                buf = []
            out.append((n, line, True, False))
        elif not line.strip():
            if buf:
                out.append((start, " ".join(buf), False, False))
                buf = []
        else:
            if not buf:
                start = n
            buf.append(line.strip())
    if buf:
        out.append((start, " ".join(buf), False, False))
    return out


def check_versions(root, ver, problems):
    docs = [os.path.join(root, "README.md"), os.path.join(root, "CONTRIBUTING.md")] + sorted(
        os.path.join(root, "docs", f) for f in os.listdir(os.path.join(root, "docs"))
        if f.endswith(".md"))
    full, mm = ver, ver[:2]
    nodes = set(NODE.findall(open(os.path.join(root, "tierstore.map")).read()))
    for path in docs:
        rel = os.path.relpath(path, root)
        changes = None  # the level of the "Changes in" heading we are under
        for n, text, heading, _code in paragraphs(path):
            if heading:
                level = len(text) - len(text.lstrip("#"))
                if changes is not None and level <= changes:
                    changes = None
                if re.match(r"#+\s+Changes in \d", text):
                    changes = level
            for a, b in NODE.findall(text):
                if (a, b) not in nodes:
                    problems.append("%s:%d: version node TIERSTORE_%s.%s is not in tierstore.map"
                                    % (rel, n, a, b))
            found = []
            for pat, parts in MENTIONS:
                for m in pat.finditer(text):
                    found.append((m, parts))
            if QUOTED_CONTEXT.search(text):
                found += [(m, 3) for m in QUOTED.finditer(text)]
            for m, parts in found:
                got = tuple(int(g) for g in m.groups() if g is not None)
                if parts == 0:  # a soname: X.Y, or a file name X.Y.Z
                    parts = len(got)
                want = full[:parts]
                if got == want:
                    continue
                where = "%s:%d: %r" % (rel, n, m.group(0))
                if got[:2] > mm or (got[:2] == mm and got > want):
                    problems.append("%s states version %s, newer than project()'s %s"
                                    % (where, ".".join(map(str, got)), ".".join(map(str, want))))
                    continue
                if changes is not None:
                    continue
                if heading:
                    before = text
                else:
                    ends = [e.end() for e in SENTENCE_END.finditer(text, 0, m.start())]
                    before = text[ends[-1] if ends else 0:m.start()]
                if HISTORY.search(before):
                    continue
                problems.append("%s states version %s; project() in meson.build "
                                "says %s (or say what makes it history: 'before', 'added in', ...)"
                                % (where, ".".join(map(str, got)), ".".join(map(str, want))))


def check_other_versions(root, ver, problems):
    """No second copy of the version: project() is the one place."""
    hand = [(os.path.join("include", "tierstore.h"),
             re.compile(r"^\s*#\s*define\s+TIER_VERSION_(MAJOR|MINOR|PATCH|STRING)\b", re.M))]
    for d, pat in (("include/tierstore", r"^\s*#\s*define\s+TIER_VERSION_(MAJOR|MINOR|PATCH|STRING)\b"),
                   ("python/tierstore", r"^\s*API_(MAJOR|MINOR)\s*=\s*\d")):
        for f in sorted(os.listdir(os.path.join(root, d))):
            if f.endswith((".h", ".py")):
                hand.append((os.path.join(d, f), re.compile(pat, re.M)))
    for rel, pat in hand:
        m = pat.search(open(os.path.join(root, rel)).read())
        if m:
            problems.append("%s: writes the version by hand (%r): it is project()'s in "
                            "meson.build, generated from there" % (rel, m.group(0).strip()))


def check_file_map(root, problems):
    path = os.path.join(root, "docs", "architecture.md")
    named = {}
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        m = re.match(r"\|\s*`([a-z]+)/`\s*\|", line)
        if not m or m.group(1) not in LAYERS:
            continue
        folder = m.group(1)
        cells = line.split("|")
        files_cell = cells[3] if len(cells) > 3 else ""
        for f in re.findall(r"`([A-Za-z0-9_.+/-]+\.(?:c|cu|h))`", files_cell):
            named.setdefault(os.path.join(folder, f), n)
    if not named:
        problems.append("docs/architecture.md: no file map (a table of | `folder/` | owns | files |)")
        return
    for f, n in sorted(named.items()):
        if not os.path.isfile(os.path.join(root, f)):
            problems.append("docs/architecture.md:%d: the file map names %s, which is not there"
                            % (n, f))
    for folder in LAYERS:
        tree = []
        for dirpath, _, filenames in os.walk(os.path.join(root, folder)):
            tree += [os.path.relpath(os.path.join(dirpath, f), root) for f in filenames]
        for rel in sorted(tree):
            f = os.path.basename(rel)
            if not f.endswith(SOURCE_EXT):
                continue
            if rel in named:
                continue
            stem = os.path.splitext(rel)[0]
            if f.endswith(".h") and (stem + ".c" in named or stem + ".cu" in named):
                continue
            problems.append("docs/architecture.md: the file map leaves out %s (one line in "
                            "the %s/ row: what it owns, from its top comment)" % (rel, folder))


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: check_docs.py SOURCE_ROOT")
    root = argv[1]
    ver = project_version(root)
    problems = []
    check_versions(root, ver, problems)
    check_other_versions(root, ver, problems)
    check_file_map(root, problems)
    for p in problems:
        print("FAIL:", p)
    print("check_docs: API %d.%d.%d; %s" % (ver + ("%d problems" % len(problems) if problems else "ok",)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
