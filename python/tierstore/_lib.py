"""ctypes declarations of libtierstore (include/tierstore.h, the trainer's
header).

The library is the copy bundled next to this package (a wheel built by
meson-python installs it there), else the file $TIERSTORE_LIBRARY names
(the tests point it at the build tree's libtierstore.so).  Every struct here
mirrors the header field for field; tests/python/test_abi.py compares the
layout with what the C compiler gives (tests/python/abi_dump.c), and
tests/python/test_binding.py the prototypes, constants and defaults with
the headers.  The defaults of the parameter structs are the library's:
each Params.init() calls the exported tier_*_params_init, which sets size =
sizeof as this struct has it (the library refuses a size it does not know,
which catches a struct that drifted).

The API version this binding speaks is project()'s in meson.build, the one
place it is written: meson generates _version.py from it into an installed
package; run from the source tree (PYTHONPATH=python), the binding reads
that meson.build itself.
"""
import ctypes
import errno
import os
import re


def _api_version():
    """(major, minor) of the API this binding was made with."""
    try:
        from ._version import VERSION
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        build = os.path.join(os.path.dirname(os.path.dirname(here)), "meson.build")
        try:
            with open(build, encoding="utf-8") as f:
                text = f.read()
        except OSError:
            raise ImportError(
                f"tierstore: no _version.py beside {__file__} (meson generates it when it "
                f"installs the package) and no source tree's meson.build at {build}") from None
        m = re.search(r"project\(\s*'tierstore'[^)]*?version:\s*'([^']+)'", text, re.S)
        if not m:
            raise ImportError(f"tierstore: {build}: no project('tierstore', version: ...)")
        VERSION = m.group(1)
    major, minor = VERSION.split(".")[:2]
    return int(major), int(minor)


API_MAJOR, API_MINOR = _api_version()

# enum tier_dtype
TIER_FP32, TIER_BF16, TIER_FP16, TIER_Q8 = 0, 1, 2, 3
# enum tier_mem
TIER_MEM_HOST, TIER_MEM_DEVICE = 0, 1
TIER_OFFLOAD_AUTO = -1.0
TIER_DTYPE_MANIFEST = -1
TIER_OFFLOAD_MANIFEST = -2.0
# enum tier_rounding
TIER_ROUND_NEAREST, TIER_ROUND_STOCHASTIC = 0, 1
TIER_ROUND_MANIFEST = -1
TIER_SEED_MANIFEST = 2**64 - 1
TIER_LR_KEEP = -1.0
TIER_MANIFEST_NO_PROBE = 1
TIER_STORE_SCRATCH = 1
# enum tier_comm_dtype
TIER_COMM_F64, TIER_COMM_F32, TIER_COMM_BF16, TIER_COMM_F16 = 0, 1, 2, 3

c_size_t = ctypes.c_size_t
u32, u64, i32 = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32
dbl = ctypes.c_double
c_bool = ctypes.c_bool
c_int = ctypes.c_int
c_uint = ctypes.c_uint
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p


def _params_init(cls, function):
    """A struct cls filled by the library's tier_*_params_init: the
    defaults live there alone."""
    p = cls()
    getattr(lib(), function)(ctypes.byref(p))
    return p


class TierError(OSError):
    """A libtierstore call failed: errno is the error, strerror the
    library's detail (tier_last_error()), function the call."""

    def __init__(self, err, detail, function=None):
        super().__init__(err, detail)
        self.function = function

    def __str__(self):
        name = errno.errorcode.get(self.errno, str(self.errno))
        return f"{self.strerror} [{name}]"


class OptimParams(ctypes.Structure):
    """struct tier_optim_params"""
    _fields_ = [
        ("size", u32),
        ("lr", dbl), ("beta1", dbl), ("beta2", dbl), ("eps", dbl), ("weight_decay", dbl),
        ("decoupled", c_bool),
        ("moment_dtype", c_int),
        ("rounding", c_int), ("out_rounding", c_int),
        ("seed", u64),
        ("offload_fraction", dbl),
        ("max_grad_norm", dbl),
        ("loss_scale", dbl),
        ("dynamic_loss_scale", c_bool),
        ("min_loss_scale", dbl), ("growth_factor", dbl), ("backoff_factor", dbl),
        ("growth_interval", u32), ("hysteresis", u32),
        ("shard_size", u64),
        ("threads", c_uint),
        ("comm", c_void_p),       # struct tier_comm *
    ]

    @classmethod
    def init(cls):
        """The defaults: tier_optim_params_init"""
        return _params_init(cls, "tier_optim_params_init")


class GroupParams(ctypes.Structure):
    """struct tier_group_params"""
    _fields_ = [
        ("size", u32),
        ("lr", dbl), ("beta1", dbl), ("beta2", dbl), ("eps", dbl), ("weight_decay", dbl),
        ("decoupled", c_bool),
    ]

    @classmethod
    def init(cls):
        """The defaults: tier_group_params_init"""
        return _params_init(cls, "tier_group_params_init")


class Tensor(ctypes.Structure):
    """struct tier_tensor"""
    _fields_ = [("ptr", c_void_p), ("dtype", c_int), ("mem", c_int), ("numel", c_size_t)]


class StepResult(ctypes.Structure):
    """struct tier_step_result"""
    _fields_ = [
        ("applied", c_bool),
        ("step", u64),
        ("grad_norm", dbl), ("loss_scale", dbl), ("next_loss_scale", dbl),
        ("clip_coef", dbl), ("offload_fraction", dbl),
        ("cpu_shards", u32), ("gpu_shards", u32),
        ("step_s", dbl),
        ("stall_s", dbl), ("cpu_stall_s", dbl), ("gpu_stall_s", dbl),
        ("nvme_read_bytes", u64), ("nvme_write_bytes", u64),
        ("h2d_bytes", u64), ("d2h_bytes", u64),
        ("nvme_read_Bps", dbl), ("nvme_write_Bps", dbl), ("h2d_Bps", dbl), ("d2h_Bps", dbl),
        ("params_updated", u32), ("params_skipped", u32),
        ("rank", c_int), ("world", c_int),
        ("collectives", u32),
        ("comm_bytes", u64),
        ("comm_s", dbl), ("comm_wait_s", dbl),
    ]

    def as_dict(self):
        return {name: getattr(self, name) for name, _ in self._fields_}


class ParamInfo(ctypes.Structure):
    """struct tier_param_info"""
    _fields_ = [
        ("name", c_char_p), ("numel", c_size_t), ("group", u32), ("nshards", u32),
        ("step", u64), ("frozen", c_bool),
        ("part_off", c_size_t), ("part_numel", c_size_t),
    ]


class LossScaler(ctypes.Structure):
    """struct tier_loss_scaler"""
    _fields_ = [
        ("scale", dbl), ("min_scale", dbl), ("growth_factor", dbl), ("backoff_factor", dbl),
        ("growth_interval", u32), ("hysteresis", u32),
        ("growth_tracker", u32), ("hysteresis_tracker", i32),
    ]

    def as_dict(self):
        return {name: getattr(self, name) for name, _ in self._fields_}


class StoreParams(ctypes.Structure):
    """struct tier_store_params"""
    _fields_ = [
        ("size", u32),
        ("dram_capacity", u64),
        ("hbm_backend", c_char_p),
        ("hbm_capacity", u64),
        ("hbm_bandwidth", dbl),
        ("policy", c_int),
        ("flags", c_uint),
        ("generation", u64),
    ]

    @classmethod
    def init(cls):
        """The defaults: tier_store_params_init"""
        return _params_init(cls, "tier_store_params_init")


class OptimInfo(ctypes.Structure):
    """struct tier_optim_info"""
    _fields_ = [
        ("moment_dtype", c_int),
        ("bytes_per_elem", u32),
        ("block_bytes", u32),
        ("shard_elems", u64), ("shard_bytes", u64),
        ("window_bytes", u64), ("hbm_budget", u64),
        ("write_behind", u32),
        ("threads", c_uint),
        ("offload_fraction", dbl),
        ("auto_split", c_bool), ("gpu_lane", c_bool),
        ("nparams", u32), ("nshards", u32),
        ("state_bytes", u64),
        ("rank", c_int), ("world", c_int),
        ("part_elems", u64),
        ("total_elems", u64),
        ("rounding", c_int), ("out_rounding", c_int),
        ("seed", u64),
    ]

    def as_dict(self):
        return {name: getattr(self, name) for name, _ in self._fields_}


class Rank(ctypes.Structure):
    """struct tier_rank"""
    _fields_ = [
        ("rank", c_int), ("local_rank", c_int),
        ("world_size", c_int), ("local_world_size", c_int),
    ]

    def as_dict(self):
        return {name: getattr(self, name) for name, _ in self._fields_}


class ManifestInfo(ctypes.Structure):
    """struct tier_manifest_info"""
    _fields_ = [
        ("source", c_char_p), ("name", c_char_p),
        ("gpu", c_int),
        ("hbm_capacity", u64), ("dram_capacity", u64),
        ("numa_node", c_int),
        ("npaths", u32),
        ("nvme_capacity", u64), ("stripe_unit", u64),
        ("checksum", c_bool),
        ("keep_commits", u32),
        ("lookahead", u64),
        ("write_behind", u32),
        ("offload_fraction", dbl),
        ("moment_dtype", c_int),
        ("rounding", c_int), ("out_rounding", c_int),
        ("seed", u64),
        ("shard_size", u64),
        ("rank", Rank),
    ]

    def as_dict(self):
        d = {name: getattr(self, name) for name, _ in self._fields_}
        d["rank"] = self.rank.as_dict()
        for k in ("source", "name"):
            d[k] = d[k].decode() if d[k] is not None else None
        return d


# struct tier_comm_callbacks' functions.  The buffers arrive as ints (or
# None); counts is a size_t[nranks].
COMM_REDUCE_SCATTER = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p,
                                       ctypes.POINTER(c_size_t), c_int, c_int)
COMM_ALLGATHERV = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p,
                                   ctypes.POINTER(c_size_t), c_int)
COMM_ALLREDUCE = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_int)
COMM_BARRIER = ctypes.CFUNCTYPE(c_int, c_void_p)


class CommCallbacks(ctypes.Structure):
    """struct tier_comm_callbacks (backend "user")"""
    _fields_ = [
        ("user", c_void_p),
        ("reduce_scatter", COMM_REDUCE_SCATTER),
        ("allgatherv", COMM_ALLGATHERV),
        ("allreduce", COMM_ALLREDUCE),
        ("barrier", COMM_BARRIER),
    ]


class CommParams(ctypes.Structure):
    """struct tier_comm_params"""
    _fields_ = [
        ("size", u32),
        ("backend", c_char_p),
        ("mpi_comm", c_void_p), ("nccl_comm", c_void_p), ("nccl_id", c_void_p),
        ("rank", c_int), ("nranks", c_int),
        ("device", c_int),
        ("timeout_s", dbl),
        ("callbacks", ctypes.POINTER(CommCallbacks)),
    ]

    @classmethod
    def init(cls):
        """The defaults: tier_comm_params_init"""
        return _params_init(cls, "tier_comm_params_init")


# The structs the ABI test compares with the C layout: C name -> class.
STRUCTS = {
    "tier_optim_params": OptimParams,
    "tier_group_params": GroupParams,
    "tier_tensor": Tensor,
    "tier_step_result": StepResult,
    "tier_param_info": ParamInfo,
    "tier_loss_scaler": LossScaler,
    "tier_store_params": StoreParams,
    "tier_optim_info": OptimInfo,
    "tier_manifest_info": ManifestInfo,
    "tier_rank": Rank,
    "tier_comm_callbacks": CommCallbacks,
    "tier_comm_params": CommParams,
}

P = ctypes.POINTER
vp = c_void_p
# name: (restype, argtypes).  Functions returning int return 0 or -errno.
_PROTOS = {
    "tier_version": (c_char_p, []),
    "tier_build_features": (c_char_p, []),
    "tier_version_number": (c_uint, []),
    "tier_version_check": (c_int, [c_uint, c_uint]),
    "tier_strerror": (c_char_p, [c_int]),
    "tier_last_error": (c_char_p, []),
    "tier_gpu_count": (c_int, [P(c_int), ctypes.c_char_p, c_size_t]),
    "tier_manifest_load": (c_int, [c_char_p, P(vp)]),
    "tier_manifest_parse": (c_int, [c_char_p, c_size_t, c_char_p, c_uint, P(vp)]),
    "tier_manifest_resolve": (c_int, [c_char_p, P(vp)]),
    "tier_manifest_default": (c_int, [P(vp)]),
    "tier_manifest_default_in": (c_int, [c_char_p, P(vp)]),
    "tier_manifest_emit": (c_int, [vp, vp]),
    "tier_manifest_info": (c_int, [vp, P(ManifestInfo)]),
    "tier_manifest_free": (None, [vp]),
    "tier_store_params_init": (None, [P(StoreParams)]),
    "tier_store_open": (c_int, [vp, P(StoreParams), P(vp)]),
    "tier_store_close": (c_int, [vp]),
    "tier_optim_params_init": (None, [P(OptimParams)]),
    "tier_optim_create": (c_int, [vp, P(OptimParams), P(vp)]),
    "tier_group_params_init": (None, [P(GroupParams)]),
    "tier_optim_add_group": (c_int, [vp, P(GroupParams), P(u32)]),
    "tier_optim_set_group": (c_int, [vp, u32, P(GroupParams)]),
    "tier_optim_get_group": (c_int, [vp, u32, P(GroupParams)]),
    "tier_optim_ngroups": (u32, [vp]),
    "tier_optim_add_param_to": (c_int, [vp, u32, c_char_p, c_size_t, vp, P(u32)]),
    "tier_optim_freeze": (c_int, [vp, u32, c_bool]),
    "tier_optim_remove_param": (c_int, [vp, u32]),
    "tier_optim_nparams": (u32, [vp]),
    "tier_optim_param_info": (c_int, [vp, u32, P(ParamInfo)]),
    "tier_optim_set_param_step": (c_int, [vp, u32, u64]),
    "tier_optim_begin": (c_int, [vp, dbl]),
    "tier_optim_push": (c_int, [vp, u32, P(Tensor), P(Tensor)]),
    "tier_optim_end": (c_int, [vp, P(StepResult)]),
    "tier_optim_read": (c_int, [vp, u32, vp, vp, vp]),
    "tier_optim_write": (c_int, [vp, u32, vp, vp, vp]),
    "tier_optim_get_scaler": (c_int, [vp, P(LossScaler)]),
    "tier_optim_set_scaler": (c_int, [vp, P(LossScaler)]),
    "tier_optim_info": (c_int, [vp, P(OptimInfo)]),
    "tier_optim_checkpoint": (c_int, [vp, P(u64)]),
    "tier_optim_resume": (c_int, [vp, P(OptimParams), P(vp)]),
    "tier_optim_export": (c_int, [vp, c_char_p]),
    "tier_optim_import": (c_int, [vp, c_char_p, P(OptimParams), P(vp)]),
    "tier_optim_step_count": (u64, [vp]),
    "tier_optim_destroy": (c_int, [vp]),
    "tier_comm_params_init": (None, [P(CommParams)]),
    "tier_comm_open": (c_int, [P(CommParams), P(vp)]),
    "tier_comm_close": (c_int, [vp]),
    "tier_comm_rank": (c_int, [vp]),
    "tier_comm_size": (c_int, [vp]),
    "tier_comm_backend": (c_char_p, [vp]),
}

# libc, for tier_manifest_emit's FILE *.
_libc = ctypes.CDLL(None, use_errno=True)
_libc.open_memstream.restype = vp
_libc.open_memstream.argtypes = [P(c_void_p), P(c_size_t)]
_libc.fclose.restype = c_int
_libc.fclose.argtypes = [vp]
_libc.free.restype = None
_libc.free.argtypes = [vp]

_lib = None
_path = None
# Functions the loaded library does not export: calling one raises
# TierError(ENOSYS) naming it (the version check passed, so only a library
# built from a tree that declares the API before implementing it).
_missing = set()


def library_path():
    """The library file this package loads: the bundled copy, else
    $TIERSTORE_LIBRARY."""
    here = os.path.dirname(os.path.abspath(__file__))
    bundled = os.path.join(here, "libtierstore.so")
    if os.path.exists(bundled):
        return bundled
    env = os.environ.get("TIERSTORE_LIBRARY")
    if env:
        return env
    raise ImportError(
        f"tierstore: no library: {bundled} is missing (install the package with pip, "
        "which builds and bundles it) and TIERSTORE_LIBRARY is not set (point it at a "
        "build tree's libtierstore.so)")


def lib():
    """The loaded library, its functions declared and its version checked."""
    global _lib, _path
    if _lib is not None:
        return _lib
    path = library_path()
    try:
        handle = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(f"tierstore: cannot load {path}: {e}") from e
    missing = []
    for name, (restype, argtypes) in _PROTOS.items():
        try:
            fn = getattr(handle, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    if handle.tier_version_check(API_MAJOR, API_MINOR) != 0:
        raise ImportError(f"tierstore: {path}: {handle.tier_last_error().decode()}")
    _missing.update(missing)
    _lib, _path = handle, path
    return _lib


def last_error():
    return lib().tier_last_error().decode(errors="replace")


def check(rc, function, what=None):
    """Raises TierError for a non-zero return: errno -rc, the library's
    detail (or what, when the library left none)."""
    if rc == 0:
        return
    detail = last_error()
    if not detail:
        detail = f"{function}: {lib().tier_strerror(rc).decode()}"
    if what:
        detail = f"{what}: {detail}"
    raise TierError(-rc if rc < 0 else rc, detail, function)


def call(name, *args, what=None):
    handle = lib()
    if name in _missing:
        raise TierError(errno.ENOSYS, f"{name}: not in {_path} (a library without API "
                        f"{API_MAJOR}.{API_MINOR}'s implementation)", name)
    rc = getattr(handle, name)(*args)
    check(rc, name, what)
    return rc


def emit_to_string(fn, *args):
    """Runs fn(*args, FILE *) into a memory stream and returns the text."""
    buf = c_void_p()
    size = c_size_t()
    f = _libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if not f:
        raise OSError(ctypes.get_errno(), "open_memstream failed")
    try:
        rc = fn(*args, f)
    finally:
        _libc.fclose(f)
        text = ctypes.string_at(buf, size.value).decode(errors="replace") if buf else ""
        _libc.free(buf)
    return rc, text
