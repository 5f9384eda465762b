"""Shared fixtures of the Python binding's tests (tests/python/).

meson runs them with TIERSTORE_LIBRARY set to the build tree's
libtierstore.so, PYTHONPATH to python/, ABI_DUMP to the built abi_dump and
TIER_TEST_TMPDIR to a scratch directory.
"""
import os
import shutil
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def scratch():
    base = os.environ.get("TIER_TEST_TMPDIR") or None
    if base:
        os.makedirs(base, exist_ok=True)
    d = tempfile.mkdtemp(prefix="py-", dir=base)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def manifest_text(path, dram="4MiB", gpu="none", shard="64KiB", moment="fp32"):
    """A small manifest whose NVMe file lives under path."""
    return f"""version: 1
name: pytest
gpu:
  device: {gpu}
dram:
  capacity: {dram}
nvme:
  paths:
    - path: {path}/
      capacity: 64MiB
      create: true
optimizer:
  shard_size: {shard}
  moment_dtype: {moment}
  offload_fraction: 1
"""


@pytest.fixture
def manifest(scratch):
    """A manifest file whose NVMe path is a scratch directory."""
    f = os.path.join(scratch, "m.yaml")
    with open(f, "w") as fh:
        fh.write(manifest_text(os.path.join(scratch, "nvme")))
    return f
