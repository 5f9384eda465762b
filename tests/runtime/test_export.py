"""tierstore's optimizer export against Python's safetensors and torch.

Run by meson (test 'export_py') as `python3 -m pytest tests/runtime/test_export.py`
with OPTIM_TOOL set to the built tests/optim_tool and TIER_TEST_TMPDIR to
a scratch directory.  optim_tool trains a run whose state is larger than
its store's DRAM tier and dumps what tier_optim_read returns; these tests
check that:

- safetensors.torch and safetensors.numpy read tier_optim_export's file,
  and every tensor equals tier_optim_read's bytes, for fp32 and bf16
  moments; the metadata carries the step and the parameters' order;
- a file Python writes (the export loaded, then saved again by
  safetensors.torch with another layout) imports into a store of another
  geometry, and 10 more steps there equal the uninterrupted run bit for
  bit.
"""
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.numpy import load_file as np_load
from safetensors.torch import load_file as torch_load
from safetensors.torch import save_file as torch_save

TOOL = os.environ.get("OPTIM_TOOL", "")
PARAMS = ["layer.0.weight", "layer.0.bias", "head"]
NUMEL = {"layer.0.weight": 700000, "layer.0.bias": 333333, "head": 257}
PARTS = ["master", "exp_avg", "exp_avg_sq"]


@pytest.fixture
def scratch():
    base = os.environ.get("TIER_TEST_TMPDIR") or None
    if base:
        os.makedirs(base, exist_ok=True)
    d = tempfile.mkdtemp(prefix="export-py-", dir=base)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def tool(*args):
    assert TOOL, "OPTIM_TOOL is not set (run through meson test)"
    r = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, f"optim_tool {' '.join(map(str, args))}: {r.stderr}"


def dumped(prefix, name, part, moment):
    dt = np.float32 if part == "master" or moment == "fp32" else np.uint16
    return np.fromfile(f"{prefix}.{name}.{part}.bin", dtype=dt)


def as_bits(t):
    """A tensor's bytes as integers, so comparisons are bit for bit."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy().view(np.uint32)


@pytest.mark.parametrize("moment", ["fp32", "bf16"])
def test_export_read_by_safetensors_and_torch(scratch, moment):
    f = os.path.join(scratch, "state.safetensors")
    dump = os.path.join(scratch, "read")
    tool("train", os.path.join(scratch, "s"), moment, 5, f, dump)

    tensors = torch_load(f)
    assert sorted(tensors) == sorted(f"{p}.{n}" for p in PARTS for n in PARAMS)
    for n in PARAMS:
        for p in PARTS:
            t = tensors[f"{p}.{n}"]
            want = torch.float32 if p == "master" or moment == "fp32" else torch.bfloat16
            assert t.dtype == want and tuple(t.shape) == (NUMEL[n],)
            d = dumped(dump, n, p, moment)
            got = as_bits(t)
            ref = d.view(np.uint32) if d.dtype == np.float32 else d
            assert np.array_equal(got, ref), f"{p}.{n} differs from tier_optim_read"
    with safe_open(f, framework="pt") as sf:
        meta = sf.metadata()
    assert meta["format"] == "tierstore.optimizer"
    assert meta["step"] == "5"
    assert meta["moment_dtype"] == moment
    assert [meta[f"param.{i}"] for i in range(int(meta["nparams"]))] == PARAMS
    if moment == "fp32":  # numpy has no bfloat16
        arrays = np_load(f)
        for n in PARAMS:
            for p in PARTS:
                assert np.array_equal(arrays[f"{p}.{n}"].view(np.uint32),
                                      dumped(dump, n, p, moment).view(np.uint32))


@pytest.mark.parametrize("moment", ["fp32", "bf16"])
def test_python_written_file_imports_and_resumes_exactly(scratch, moment):
    exported = os.path.join(scratch, "state.safetensors")
    tool("train", os.path.join(scratch, "a"), moment, 5, exported, os.path.join(scratch, "five"))
    # Python writes the state again: its own layout, the same metadata.
    tensors = torch_load(exported)
    with safe_open(exported, framework="pt") as sf:
        meta = sf.metadata()
    rewritten = os.path.join(scratch, "rewritten.safetensors")
    torch_save({k: tensors[k].clone() for k in reversed(sorted(tensors))}, rewritten,
               metadata=meta)
    assert open(rewritten, "rb").read() != open(exported, "rb").read()

    tool("import", rewritten, os.path.join(scratch, "b"), 15, os.path.join(scratch, "imp"))
    tool("train", os.path.join(scratch, "c"), moment, 15, "-", os.path.join(scratch, "ref"))
    for n in PARAMS:
        for p in PARTS:
            a = dumped(os.path.join(scratch, "imp"), n, p, moment)
            b = dumped(os.path.join(scratch, "ref"), n, p, moment)
            assert a.tobytes() == b.tobytes(), f"{p}.{n}: imported + 10 steps != 15 steps"


def test_import_refuses_a_model_checkpoint(scratch):
    f = os.path.join(scratch, "model.safetensors")
    torch_save({"layer.0.weight": torch.zeros(4)}, f, metadata={"format": "pt"})
    r = subprocess.run([TOOL, "import", f, os.path.join(scratch, "x"), "1",
                        os.path.join(scratch, "d")], capture_output=True, text=True)
    assert r.returncode == 1
    assert "not a tierstore optimizer export" in r.stderr
    assert "model.safetensors" in r.stderr
