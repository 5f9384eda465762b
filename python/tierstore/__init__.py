"""tierstore: optimizer state in tiers (HBM over pinned DRAM over NVMe).

A ctypes binding of libtierstore (its trainer's API, include/tierstore.h)
and, in tierstore.torch, the PyTorch optimizer TierAdamW.  docs/python.md
describes both.

    import tierstore
    m = tierstore.Manifest("node.yaml")        # or Manifest.from_text(yaml)
    print(m.emit())                            # the effective configuration
"""
import ctypes
import errno
import os

from . import _lib
from ._lib import TierError

__all__ = ["TierError", "Manifest", "Store", "version", "build_features", "gpu_count",
           "library_path"]


def version():
    """The library's version, "MAJOR.MINOR.PATCH"."""
    return _lib.lib().tier_version().decode()


def build_features():
    """The library build's features ("cuda=yes nccl=no fault_sites=no ...")."""
    return _lib.lib().tier_build_features().decode()


def library_path():
    """The file of the loaded library."""
    _lib.lib()
    return _lib._path


def gpu_count():
    """(count, why): CUDA devices this process can use, and the reason when
    there are none."""
    n = ctypes.c_int()
    why = ctypes.create_string_buffer(256)
    _lib.call("tier_gpu_count", ctypes.byref(n), why, len(why))
    return n.value, why.value.decode(errors="replace")


class Manifest:
    """A tier manifest, parsed, validated against this machine and with
    every default resolved.

    Manifest(path) loads a file; Manifest() resolves as the tools do
    ($TIER_MANIFEST, else the embedded default); Manifest.from_text(yaml)
    parses text; Manifest.default() is the embedded default.  An invalid
    manifest raises TierError whose message has FILE:LINE:COL for each
    problem.
    """

    def __init__(self, path=None, *, _handle=None):
        self._h = None
        if _handle is not None:
            self._h = _handle
            return
        h = ctypes.c_void_p()
        if path is None:
            _lib.call("tier_manifest_resolve", None, ctypes.byref(h))
        else:
            _lib.call("tier_manifest_load", os.fsencode(path), ctypes.byref(h))
        self._h = h

    @classmethod
    def from_text(cls, text, name="<text>"):
        """Parses a manifest held in a string; name stands for the file in
        messages."""
        b = text.encode() if isinstance(text, str) else bytes(text)
        h = ctypes.c_void_p()
        _lib.call("tier_manifest_parse", b, len(b), name.encode(), 0, ctypes.byref(h))
        return cls(_handle=h)

    @classmethod
    def default(cls, directory=None):
        """The embedded default manifest for this machine; with directory,
        its NVMe file under that directory instead of $TIER_DATA (sized
        from the free space there)."""
        h = ctypes.c_void_p()
        if directory is None:
            _lib.call("tier_manifest_default", ctypes.byref(h))
        else:
            _lib.call("tier_manifest_default_in", os.fsencode(directory), ctypes.byref(h),
                      what=f"the default manifest in {os.fsdecode(directory)!r}")
        return cls(_handle=h)

    @property
    def handle(self):
        if self._h is None:
            raise ValueError("tierstore.Manifest: used after free()")
        return self._h

    def info(self):
        """The effective configuration (struct tier_manifest_info) as a dict."""
        out = _lib.ManifestInfo()
        _lib.call("tier_manifest_info", self.handle, ctypes.byref(out))
        return out.as_dict()

    def emit(self):
        """The effective configuration as YAML (itself a valid manifest)."""
        rc, text = _lib.emit_to_string(_lib.lib().tier_manifest_emit, self.handle)
        _lib.check(rc, "tier_manifest_emit")
        return text

    def free(self):
        if self._h is not None:
            _lib.lib().tier_manifest_free(self._h)
            self._h = None

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass

    def __repr__(self):
        if self._h is None:
            return "<tierstore.Manifest (freed)>"
        i = self.info()
        return f"<tierstore.Manifest {i['source']!r} name={i['name']!r}>"


class Store:
    """A store over a manifest's tiers (tier_store_open).

    dram_capacity (bytes) overrides the manifest's DRAM tier; scratch=True
    removes the NVMe backing files this open created when it closes.  Files
    that hold a committed store reopen at their last commit.  The manifest
    is kept alive as long as the store.
    """

    def __init__(self, manifest=None, *, dram_capacity=None, hbm_backend=None,
                 hbm_capacity=None, scratch=False, generation=None):
        if manifest is None or isinstance(manifest, (str, bytes, os.PathLike)):
            manifest = Manifest(manifest)
        if not isinstance(manifest, Manifest):
            raise TypeError(f"tierstore.Store: manifest must be a tierstore.Manifest, a path "
                            f"or None, not {type(manifest).__name__}")
        self.manifest = manifest
        self._h = None
        p = _lib.StoreParams.init()
        if dram_capacity is not None:
            if int(dram_capacity) <= 0:
                raise ValueError(f"tierstore.Store: dram_capacity {dram_capacity} must be > 0")
            p.dram_capacity = int(dram_capacity)
        if hbm_backend is not None:
            p.hbm_backend = hbm_backend.encode()
        if hbm_capacity is not None:
            p.hbm_capacity = int(hbm_capacity)
        if scratch:
            p.flags |= _lib.TIER_STORE_SCRATCH
        if generation is not None:
            p.generation = int(generation)
        h = ctypes.c_void_p()
        _lib.call("tier_store_open", manifest.handle, ctypes.byref(p), ctypes.byref(h))
        self._h = h

    @property
    def handle(self):
        if self._h is None:
            raise ValueError("tierstore.Store: used after close()")
        return self._h

    def close(self):
        """Writes every dirty byte home and frees the store.  A store with
        an optimizer still on it is refused (EBUSY) and stays open."""
        if self._h is not None:
            h, self._h = self._h, None
            try:
                _lib.call("tier_store_close", h)
            except TierError as e:
                if e.errno == errno.EBUSY:
                    self._h = h
                raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
