"""tierstore's Manifest, Store and errors (no torch needed)."""
import errno
import os

import pytest

import tierstore
from conftest import manifest_text


def test_manifest_text_info_emit(scratch):
    m = tierstore.Manifest.from_text(manifest_text(os.path.join(scratch, "n"), dram="8MiB"),
                                     "small.yaml")
    i = m.info()
    assert i["source"] == "small.yaml" and i["name"] == "pytest"
    assert i["gpu"] == -1 and i["dram_capacity"] == 8 << 20 and i["npaths"] == 1
    assert i["shard_size"] == 64 << 10
    text = m.emit()
    # the effective configuration is itself a manifest that parses to the same
    again = tierstore.Manifest.from_text(text, "emitted.yaml").info()
    assert {k: v for k, v in again.items() if k != "source"} == \
        {k: v for k, v in i.items() if k != "source"}
    m.free()
    m.free()
    with pytest.raises(ValueError, match="after free"):
        m.info()


def test_manifest_errors(scratch):
    with pytest.raises(tierstore.TierError) as e:
        tierstore.Manifest.from_text("version: 1\ndram:\n  capacity: 4GiB\n  capacty: 1\n",
                                     "bad.yaml")
    assert e.value.errno == errno.EINVAL
    assert "bad.yaml:4:3: unknown key 'capacty' in dram" in str(e.value)
    assert isinstance(e.value, OSError) and e.value.function == "tier_manifest_parse"
    missing = os.path.join(scratch, "nope.yaml")
    with pytest.raises(tierstore.TierError) as e:
        tierstore.Manifest(missing)
    assert e.value.errno == errno.ENOENT and missing in str(e.value)


def test_store_open_close(scratch):
    m = tierstore.Manifest.from_text(manifest_text(os.path.join(scratch, "n")))
    with tierstore.Store(m, dram_capacity=1 << 20, scratch=True) as s:
        assert s.handle
        # one store per backing file: a second open names the first
        with pytest.raises(tierstore.TierError, match="in use by process") as e:
            tierstore.Store(m)
        assert e.value.errno == errno.EBUSY
    s.close()
    with pytest.raises(ValueError, match="after close"):
        s.handle
    with pytest.raises(TypeError, match="manifest must be"):
        tierstore.Store(42)


def test_default_in_a_directory(scratch):
    """tier_manifest_default_in: the embedded default with its NVMe file
    under the directory named, sized from that file system."""
    d = os.path.join(scratch, "data")
    m = tierstore.Manifest.default(d)
    assert f"path: {d}/" in m.emit() or f'path: "{d}/"' in m.emit()
    assert m.info()["nvme_capacity"] > 0 and m.info()["name"] == "tierstore"
    m.free()
    for bad in (b"", None):
        with pytest.raises(tierstore.TierError, match=r"tier_manifest_default_in: dir is "
                                                      r"(empty|NULL)") as e:
            tierstore._lib.call("tier_manifest_default_in", bad,
                                tierstore._lib.ctypes.byref(tierstore._lib.ctypes.c_void_p()))
        assert e.value.errno == errno.EINVAL


def test_version_features():
    # the binding's version, as the library's, is project()'s in meson.build
    api = f"{tierstore._lib.API_MAJOR}.{tierstore._lib.API_MINOR}."
    assert tierstore.version().startswith(api)
    assert "cuda=" in tierstore.build_features()
    n, why = tierstore.gpu_count()
    assert n >= 0 and (n > 0 or why)
