"""The ctypes structs of python/tierstore/_lib.py against the C layout.

abi_dump (tests/python/abi_dump.c, built by meson) prints ("structs")
sizeof, alignof and every field's offset and size as the compiler lays
them out; each must equal the ctypes struct's.  The field names are also read from the public
headers, so a field added to the header but to neither abi_dump nor _lib.py
is caught too.
"""
import ctypes
import json
import os
import re
import subprocess

import pytest

from conftest import ROOT
from tierstore import _lib


@pytest.fixture(scope="module")
def dump():
    exe = os.environ.get("ABI_DUMP")
    assert exe, "ABI_DUMP is not set (run through meson test)"
    return json.loads(subprocess.run([exe], check=True, capture_output=True,
                                     text=True).stdout)["structs"]


def header_fields(struct):
    """The member names of struct `struct` in include/ (comments stripped)."""
    for f in ("tierstore.h", "tierstore/common.h", "tierstore/live.h",
              "tierstore/toolkit.h", "tierstore/kernels.h", "tierstore/tiers.h"):
        text = open(os.path.join(ROOT, "include", f)).read()
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        m = re.search(r"\bstruct\s+" + struct + r"\s*\{(.*?)\};", text, flags=re.S)
        if m:
            names = []
            for decl in m.group(1).split(";"):
                decl = decl.strip()
                if not decl:
                    continue
                # "int (*barrier)(void *user)" -> barrier
                fn = re.match(r"[^(]*\(\s*\*\s*([A-Za-z_]\w*)\s*\)\s*\(", decl)
                if fn:
                    names.append(fn.group(1))
                    continue
                # "double lr, beta1" -> the last identifier of each part
                for part in decl.split(","):
                    part = re.sub(r"\[.*?\]", "", part)
                    names.append(re.findall(r"[A-Za-z_]\w*", part)[-1])
            return names
    raise AssertionError(f"struct {struct} not found in include/")


@pytest.mark.parametrize("name", sorted(_lib.STRUCTS))
def test_layout(dump, name):
    cls = _lib.STRUCTS[name]
    c = dump[name]
    assert header_fields(name) == [f for f, _ in cls._fields_], \
        f"struct {name}: the header's fields differ from _lib.py's"
    assert list(c["fields"]) == [f for f, _ in cls._fields_], \
        f"struct {name}: abi_dump's fields differ from _lib.py's"
    assert ctypes.sizeof(cls) == c["size"], f"sizeof(struct {name})"
    assert ctypes.alignment(cls) == c["align"], f"alignof(struct {name})"
    for f, (off, size) in c["fields"].items():
        d = getattr(cls, f)
        assert (d.offset, d.size) == (off, size), \
            f"struct {name}.{f}: ctypes (offset, size) {(d.offset, d.size)}, C {(off, size)}"


def test_version_check():
    lib = _lib.lib()
    assert lib.tier_version_check(_lib.API_MAJOR, _lib.API_MINOR) == 0
    assert lib.tier_version_check(_lib.API_MAJOR, _lib.API_MINOR + 1) != 0
    assert "0.%d" % (_lib.API_MINOR + 1) in _lib.last_error()
