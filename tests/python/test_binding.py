"""The binding (python/tierstore/_lib.py) against the C headers.

test_abi.py checks the layout of the structs; this checks the rest of what
_lib.py declares by hand, so that a change of the C API that the binding
misses fails here rather than as a wrong call at run time:

- prototypes: each function of _lib._PROTOS is declared with TIER_API in
  the trainer's headers (tierstore.h, tierstore/common.h, tierstore/live.h:
  the binding needs no toolkit call), and its restype and argtypes are the
  ctypes of the declaration's C types (the table below); every library
  function the package calls has a prototype; the callbacks of struct
  tier_comm_callbacks match CommCallbacks' CFUNCTYPEs;
- constants: every TIER_* name _lib.py defines has the value and kind (an
  int, a float for a double) the C compiler gives it (abi_dump's
  "constants"), and abi_dump prints every constant of the trainer's
  headers; API_MAJOR, API_MINOR are the header's TIER_VERSION_MAJOR, _MINOR;
- defaults: each Params.init() gives, field for field, what the library's
  tier_*_params_init gives in C (abi_dump's "defaults").

The headers are parsed as text: comments stripped, one declaration per
TIER_API up to its ";" (over several lines).
"""
import ctypes
import glob
import json
import os
import re
import subprocess

import pytest

from conftest import ROOT
from tierstore import _lib

TRAINER = ["tierstore.h", os.path.join("tierstore", "common.h"),
           os.path.join("tierstore", "live.h")]
# The version's numbers come from the generated tierstore/version.h.
GENERATED = {"TIER_VERSION_MAJOR", "TIER_VERSION_MINOR", "TIER_VERSION_PATCH"}

c_size_t, c_void_p, c_char_p = ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p
P = ctypes.POINTER
# C scalar types (const dropped) and their ctypes.
SCALARS = {
    "int": ctypes.c_int, "unsigned": ctypes.c_uint, "unsigned int": ctypes.c_uint,
    "bool": ctypes.c_bool, "double": ctypes.c_double, "float": ctypes.c_float,
    "size_t": ctypes.c_size_t, "uint32_t": ctypes.c_uint32, "uint64_t": ctypes.c_uint64,
    "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64, "long": ctypes.c_long,
}
TYPE_WORDS = set(SCALARS) | {"const", "char", "void", "FILE", "struct", "enum", "unsigned",
                             "signed", "long", "short"}


def strip_comments(text):
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


def header_text(rel):
    with open(os.path.join(ROOT, "include", rel), encoding="utf-8") as f:
        return strip_comments(f.read())


def split_top(text):
    """@text split at its commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def c_type(decl):
    """The C type of a parameter declaration, its name dropped: a string
    ("const char *", "enum tier_dtype", "struct tier_tensor *"), or
    ("fn", return type, [parameter types]) for a function pointer."""
    decl = " ".join(decl.split())
    fn = re.match(r"^(.*?)\(\s*\*\s*\w*\s*\)\s*\((.*)\)$", decl)
    if fn:
        args = split_top(fn.group(2))
        return ("fn", c_type(fn.group(1)),
                [] if args == ["void"] else [c_type(a) for a in args])
    stars = decl.count("*")
    if re.search(r"\[[^\]]*\]\s*$", decl):     # an array parameter is a pointer
        decl = re.sub(r"\[[^\]]*\]\s*$", "", decl)
        stars += 1
    words = re.findall(r"\w+", decl)
    tagged = {words[i + 1] for i, w in enumerate(words[:-1]) if w in ("struct", "enum")}
    if len(words) > 1 and words[-1] not in TYPE_WORDS and words[-1] not in tagged:
        words = words[:-1]                      # the parameter's name
    base = " ".join(w for w in words if w != "const")
    const = "const " if "const" in words else ""
    return (const + base + (" " + "*" * stars if stars else "")).strip()


def declarations(rels):
    """{function: (return type, [parameter types])} of the TIER_API
    declarations of the headers @rels."""
    out = {}
    for rel in rels:
        # preprocessor lines (with their continuations) out: #define TIER_API
        text = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", "", header_text(rel), flags=re.M)
        for m in re.finditer(r"\bTIER_API\b(.*?);", text, flags=re.S):
            d = re.match(r"^(.*?)\b(tier_\w+)\s*\((.*)\)\s*$", m.group(1).strip(), flags=re.S)
            assert d, f"{rel}: cannot read the declaration 'TIER_API{m.group(1)}'"
            args = split_top(d.group(3))
            out[d.group(2)] = (c_type(d.group(1)),
                               [] if args == ["void"] else [c_type(a) for a in args])
    return out


def accepted(ct, restype=False):
    """The ctypes that may stand for the C type @ct (a tuple, or None for
    void)."""
    if isinstance(ct, tuple):                   # a function pointer
        return "fn"
    base = ct.replace("const ", "").rstrip(" *").strip()
    stars = ct.count("*")
    if stars == 0:
        if base == "void":
            return (None,)
        if base.startswith("enum "):
            return (ctypes.c_int,)
        assert base in SCALARS, f"no ctypes for the C type '{ct}': add it to SCALARS"
        return (SCALARS[base],)
    if stars == 1:
        if base == "char":
            return (c_char_p,) if restype else (c_char_p, c_void_p)
        if base in ("void", "FILE"):
            return (c_void_p,)
        if base.startswith("struct "):
            cls = _lib.STRUCTS.get(base.split()[1])
            return (c_void_p,) + ((P(cls),) if cls else ())
        if base.startswith("enum "):
            return (c_void_p, P(ctypes.c_int))
        assert base in SCALARS, f"no ctypes for the C type '{ct}': add it to SCALARS"
        return (c_void_p, P(SCALARS[base]))
    return (P(c_void_p), P(c_char_p)) if base == "char" else (P(c_void_p),)


def name_of(t):
    return "None" if t is None else getattr(t, "__name__", repr(t))


def check_fn(what, want, restype, argtypes):
    """Problems of ctypes (@restype, @argtypes) standing for the C
    function type @want = (return type, [parameter types])."""
    ret, args = want
    problems = []
    if restype not in accepted(ret, restype=True):
        problems.append(f"{what}: restype {name_of(restype)}, the header returns '{ret}' "
                        f"({' or '.join(name_of(t) for t in accepted(ret, True))})")
    if len(argtypes) != len(args):
        problems.append(f"{what}: {len(argtypes)} argtypes, the header has {len(args)} "
                        f"parameters ({', '.join(map(str, args))})")
        return problems
    for i, (t, ct) in enumerate(zip(argtypes, args)):
        ok = accepted(ct)
        if ok == "fn":
            ok = (c_void_p,) if not hasattr(t, "_argtypes_") else (t,)
            if hasattr(t, "_argtypes_"):
                problems += check_fn(f"{what} argument {i}", (ct[1], ct[2]),
                                     t._restype_, list(t._argtypes_))
        if t not in ok:
            problems.append(f"{what}: argument {i} is {name_of(t)}, the header's is '{ct}' "
                            f"({' or '.join(name_of(x) for x in ok)})")
    return problems


@pytest.fixture(scope="module")
def dump():
    exe = os.environ.get("ABI_DUMP")
    assert exe, "ABI_DUMP is not set (run through meson test)"
    return json.loads(subprocess.run([exe], check=True, capture_output=True,
                                     text=True).stdout)


def test_prototypes():
    decls = declarations(TRAINER)
    problems = []
    for name, (restype, argtypes) in sorted(_lib._PROTOS.items()):
        if name not in decls:
            problems.append(f"_PROTOS: {name} is declared in no trainer's header "
                            f"({', '.join(TRAINER)})")
            continue
        problems += check_fn(name, decls[name], restype, argtypes)
    assert not problems, "\n".join(problems)


def test_every_call_has_a_prototype():
    """A library function called without one would take ctypes' defaults
    (int arguments, an int return)."""
    called = set()
    for f in glob.glob(os.path.join(ROOT, "python", "tierstore", "*.py")):
        with open(f, encoding="utf-8") as fh:
            text = fh.read()
        called |= set(re.findall(r"[\"'](tier_[a-z0-9_]+)[\"']", text))
        called |= set(re.findall(r"\.(tier_[a-z0-9_]+)\b", text))
    every = declarations([os.path.relpath(h, os.path.join(ROOT, "include")) for h in
                          glob.glob(os.path.join(ROOT, "include", "tierstore*.h")) +
                          glob.glob(os.path.join(ROOT, "include", "tierstore", "*.h"))])
    missing = sorted((called & set(every)) - set(_lib._PROTOS))
    assert not missing, f"python/tierstore calls {', '.join(missing)} without a _PROTOS entry"


def test_comm_callbacks():
    text = header_text("tierstore.h")
    body = re.search(r"struct tier_comm_callbacks\s*\{(.*?)\};", text, flags=re.S).group(1)
    problems = []
    for decl in body.split(";"):
        m = re.match(r"^\s*(.*?)\(\s*\*\s*(\w+)\s*\)\s*\((.*)\)\s*$", decl, flags=re.S)
        if not m:
            continue
        ct = c_type(decl)
        t = dict(_lib.CommCallbacks._fields_)[m.group(2)]
        problems += check_fn(f"CommCallbacks.{m.group(2)}", (ct[1], ct[2]), t._restype_,
                             list(t._argtypes_))
    assert not problems, "\n".join(problems)


def header_constants():
    """The TIER_* constants the trainer's headers define: object-like
    #defines of a number, and enum members."""
    names = set()
    for rel in TRAINER:
        text = header_text(rel)
        for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(TIER_[A-Z0-9_]+)[ \t]+(\S.*)$",
                             text, flags=re.M):
            if re.match(r"[(\-\d\\]|UINT|INT", m.group(2)):
                names.add(m.group(1))
        for body in re.findall(r"\benum\b[^{;]*\{(.*?)\}", text, flags=re.S):
            names |= set(re.findall(r"\b(TIER_[A-Z0-9_]+)\s*(?:=|,|$)", body))
    return names


def test_dump_has_every_constant(dump):
    consts = set(dump["constants"])
    hdr = header_constants()
    assert hdr - consts == set(), \
        f"tests/python/abi_dump.c does not print {sorted(hdr - consts)}: add them to constants()"
    assert consts - hdr - GENERATED == set(), \
        f"abi_dump prints {sorted(consts - hdr - GENERATED)}, which no trainer's header defines"


def test_constants(dump):
    consts = dump["constants"]
    problems = []
    for name in sorted(n for n in vars(_lib) if n.startswith("TIER_")):
        ours = getattr(_lib, name)
        if name not in consts:
            problems.append(f"_lib.{name}: no such constant in the trainer's headers")
            continue
        value, kind = consts[name]
        if kind == "double":
            value = float(value)                # JSON writes -1.0 as -1
        if kind == "double" and not isinstance(ours, float):
            problems.append(f"_lib.{name} = {ours!r}: the header's is a double ({value!r})")
        elif kind == "int" and (not isinstance(ours, int) or isinstance(ours, bool)):
            problems.append(f"_lib.{name} = {ours!r}: the header's is an integer ({value!r})")
        if ours != value:
            problems.append(f"_lib.{name} = {ours!r}, the header's is {value!r}")
    assert not problems, "\n".join(problems)


def test_api_version(dump):
    consts = dump["constants"]
    assert (_lib.API_MAJOR, _lib.API_MINOR) == (consts["TIER_VERSION_MAJOR"][0],
                                                consts["TIER_VERSION_MINOR"][0]), \
        "the binding's API version is not the header's (both come from project())"


@pytest.mark.parametrize("name", ["tier_optim_params", "tier_group_params",
                                  "tier_store_params", "tier_comm_params"])
def test_defaults(dump, name):
    cls = _lib.STRUCTS[name]
    c = dump["defaults"][name]
    ours = cls.init()
    assert list(c) == [f for f, _ in cls._fields_], f"{name}: abi_dump's fields differ"
    problems = []
    for f, (value, kind) in c.items():
        value = float(value) if kind == "double" else value
        got = getattr(ours, f)
        if kind == "pointer":
            got = None if not got else "not NULL"
        if got != value or (kind == "bool" and not isinstance(got, bool)):
            problems.append(f"{cls.__name__}.init().{f} = {got!r}, "
                            f"{name}_init gives {value!r}")
    assert not problems, "\n".join(problems)


def test_params_init_sizes():
    """The init functions set size to sizeof as this binding lays the
    struct out."""
    for cls in (_lib.OptimParams, _lib.GroupParams, _lib.StoreParams, _lib.CommParams):
        assert cls.init().size == ctypes.sizeof(cls)
    assert _lib.CommParams.init().device == -1
