#!/usr/bin/env python3
"""safetensors_check.py - formats/safetensors_*.c against the official
safetensors package (Python, over its Rust loader).

    safetensors_check.py ST_TOOL TMPDIR

 a. st_tool writes its deterministic file; the official loader must accept
    it (safetensors.deserialize, safe_open, safetensors.numpy.load_file and,
    when torch imports, safetensors.torch.load_file), and every tensor's
    bytes, dtype and shape, and the metadata, must be what the generator
    (mirrored below from st_tool.c) says.
 b. safetensors.numpy.save_file (and safetensors.torch.save_file for BF16
    when torch imports) writes files of many dtypes and shapes with
    metadata; `st_tool dump` must print what Python computes from the same
    arrays (FNV-1a 64 of each tensor's bytes, metadata in hex).

Exits 0 on success, 1 on a mismatch, 77 (meson's SKIP) when the
safetensors package or numpy is missing, saying so.
"""
import os
import struct
import subprocess
import sys

try:
    import numpy as np
    import safetensors
    from safetensors import safe_open
    from safetensors.numpy import load_file as np_load, save_file as np_save
except ImportError as e:
    print(f"SKIP: {sys.executable} cannot import safetensors/numpy ({e}); "
          "pip install safetensors numpy to run this check")
    sys.exit(77)

try:
    import torch
    from safetensors.torch import load_file as pt_load, save_file as pt_save
except ImportError:
    torch = None

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


# --- the generator of st_tool.c: (name, dtype, shape) in its table order
GEN = [
    ("adam.m", "F32", [3, 5]),
    ("w.bf16", "BF16", [4, 3, 2]),
    ("w.f16", "F16", [7]),
    ("step.i64", "I64", [5]),
    ("mask.u8", "U8", [13]),
    ("scalar", "F32", []),
    ("empty", "F32", [0, 4]),
    ("f64", "F64", [2, 2]),
    ("i32", "I32", [3]),
    ("flags", "BOOL", [5]),
    ("deep", "F32", [2, 1, 3, 2]),
]
META = {
    "format": "tierstore",
    "note": "quote \" backslash \\ tab\t newline\n unicode \u00e9 \u2713 \U0001F600",
    "step": "42",
}


def gen_bytes(j, dtype, shape):
    n = 1
    for d in shape:
        n *= d
    k = np.arange(n, dtype=np.int64)
    fl = (((k * 7 + j * 13) % 251) - 125).astype(np.float32) / np.float32(8)
    iv = k * 1000003 - j * 7
    if dtype == "F32":
        return fl.astype("<f4").tobytes()
    if dtype == "F64":
        return fl.astype("<f8").tobytes()
    if dtype == "F16":
        return fl.astype("<f2").tobytes()
    if dtype == "BF16":
        return (fl.view(np.uint32) >> 16).astype("<u2").tobytes()
    if dtype == "I64":
        return iv.astype("<i8").tobytes()
    if dtype == "I32":
        return iv.astype("<i4").tobytes()
    if dtype == "U8":
        return ((k * 31 + j) & 255).astype(np.uint8).tobytes()
    if dtype == "BOOL":
        return ((k + j) % 2).astype(np.uint8).tobytes()
    raise ValueError(dtype)


NP_DT = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4",
         "U8": "u1", "BOOL": "?"}


def part_a(tool, tmp):
    path = os.path.join(tmp, "from_c.safetensors")
    subprocess.run([tool, "write", path], check=True)
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    check(n % 8 == 0, f"header length {n} is a multiple of 8")
    got = {name: info for name, info in safetensors.deserialize(raw)}
    check(sorted(got) == sorted(g[0] for g in GEN), f"tensor names {sorted(got)}")
    for j, (name, dtype, shape) in enumerate(GEN):
        info = got.get(name)
        if info is None:
            continue
        check(info["dtype"] == dtype, f"{name}: dtype {info['dtype']}, expected {dtype}")
        check(list(info["shape"]) == shape, f"{name}: shape {info['shape']}, expected {shape}")
        check(bytes(info["data"]) == gen_bytes(j, dtype, shape), f"{name}: data differs")
    with safe_open(path, framework="np") as f:
        check(f.metadata() == META, f"metadata {f.metadata()!r}")
    # numpy has no bfloat16: load_file refuses the file, so values are
    # checked per tensor through safe_open for the others
    with safe_open(path, framework="np") as f:
        for j, (name, dtype, shape) in enumerate(GEN):
            if dtype == "BF16":
                continue
            a = f.get_tensor(name)
            want = np.frombuffer(gen_bytes(j, dtype, shape), dtype=NP_DT[dtype]).reshape(shape)
            check(a.shape == tuple(shape) and np.array_equal(a, want),
                  f"{name}: numpy values differ: {a!r} vs {want!r}")
    if torch is not None:
        t = pt_load(path)
        bf = t["w.bf16"].to(torch.float32).numpy().ravel()
        want = np.frombuffer(gen_bytes(1, "F32", [24]), dtype="<f4")
        check(np.array_equal(bf, want), "w.bf16 via torch differs")
    else:
        print("note: torch does not import; the BF16 tensor is checked by its bytes alone")


def dump(tool, path):
    out = subprocess.run([tool, "dump", path], check=True, capture_output=True, text=True)
    return out.stdout.splitlines()


def expect_lines(tensors, meta):
    lines = []
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        lines.append(f"{name} {dtype} [{','.join(str(d) for d in shape)}] {fnv1a64(data)}")
    for k in sorted(meta):
        lines.append(f"meta {k.encode().hex()} {meta[k].encode().hex()}")
    return lines


def part_b(tool, tmp):
    rng = np.random.default_rng(17)
    arrays = {
        "f32": rng.standard_normal((4, 5)).astype("<f4"),
        "f64": rng.standard_normal(7).astype("<f8"),
        "f16": rng.standard_normal((2, 3, 4)).astype("<f2"),
        "i64": rng.integers(-2**62, 2**62, 9).astype("<i8"),
        "i32": rng.integers(-2**31, 2**31 - 1, (3, 3)).astype("<i4"),
        "i16": rng.integers(-30000, 30000, 11).astype("<i2"),
        "i8": rng.integers(-128, 127, 5).astype("i1"),
        "u8": rng.integers(0, 255, (1, 1, 1, 17)).astype("u1"),
        "u16": rng.integers(0, 65535, 3).astype("<u2"),
        "u32": rng.integers(0, 2**32 - 1, 3).astype("<u4"),
        "u64": rng.integers(0, 2**63 - 1, 3).astype("<u8"),
        "bool": rng.integers(0, 2, 6).astype("?"),
        "scalar": np.array(2.5, dtype="<f4"),
        "empty": np.zeros((3, 0), dtype="<f8"),
        "empty1": np.zeros(0, dtype="u1"),
    }
    names = {np.dtype("<f4"): "F32", np.dtype("<f8"): "F64", np.dtype("<f2"): "F16",
             np.dtype("<i8"): "I64", np.dtype("<i4"): "I32", np.dtype("<i2"): "I16",
             np.dtype("i1"): "I8", np.dtype("u1"): "U8", np.dtype("<u2"): "U16",
             np.dtype("<u4"): "U32", np.dtype("<u8"): "U64", np.dtype("?"): "BOOL"}
    meta = {"a": "1", "quote\"back\\slash": "tab\tnl\n\u00e9\U0001F600", "": "empty key",
            "emptyval": ""}
    cases = [
        ("all", arrays, meta),
        ("nometa", {"only": arrays["f32"]}, None),
        ("none", {}, {"just": "metadata"}),
        ("nothing", {}, None),
    ]
    for label, tensors, md in cases:
        path = os.path.join(tmp, f"from_py_{label}.safetensors")
        np_save(tensors, path, metadata=md)
        want = expect_lines({k: (names[v.dtype], list(v.shape), v.tobytes())
                             for k, v in tensors.items()}, md or {})
        got = dump(tool, path)
        check(got == want, f"dump of {label}:\n  got  {got}\n  want {want}")
    if torch is not None:
        path = os.path.join(tmp, "from_py_bf16.safetensors")
        t = {"bf": torch.randn(3, 4).to(torch.bfloat16), "f": torch.randn(5)}
        pt_save(t, path, metadata={"framework": "pt"})
        want = expect_lines({
            "bf": ("BF16", [3, 4], t["bf"].view(torch.int16).numpy().astype("<i2").tobytes()),
            "f": ("F32", [5], t["f"].numpy().astype("<f4").tobytes())}, {"framework": "pt"})
        got = dump(tool, path)
        check(got == want, f"dump of bf16:\n  got  {got}\n  want {want}")


def main():
    tool, tmp = sys.argv[1], sys.argv[2]
    os.makedirs(tmp, exist_ok=True)
    print(f"python {sys.executable}, safetensors {safetensors.__version__}, numpy "
          f"{np.__version__}, torch {torch.__version__ if torch else 'absent'}")
    part_a(tool, tmp)
    part_b(tool, tmp)
    if failures:
        print(f"{len(failures)} failures")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
