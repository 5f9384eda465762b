"""TierAdamW: torch.optim.AdamW with its state in tierstore's tiers.

The optimizer state (fp32 master weights, exp_avg, exp_avg_sq) lives in a
tierstore store: HBM over pinned DRAM over NVMe files.  Each step streams
the state shards up the tiers, updates them (AdamW, torch's semantics) and
writes the updated parameters into the parameters' own storage.  See
docs/python.md.
"""
import contextlib
import ctypes
import errno
import math
import numbers
import os
import shutil
import tempfile
import warnings
import weakref

import torch

from . import _lib
from . import Manifest, Store, TierError

__all__ = ["TierAdamW", "TierError"]

_DTYPES = {torch.float32: _lib.TIER_FP32, torch.bfloat16: _lib.TIER_BF16,
           torch.float16: _lib.TIER_FP16}
_MOMENT_NAMES = {"fp32": _lib.TIER_FP32, "bf16": _lib.TIER_BF16, "q8": _lib.TIER_Q8}
_ROUNDING_NAMES = {"nearest": _lib.TIER_ROUND_NEAREST, "stochastic": _lib.TIER_ROUND_STOCHASTIC}
# the dtype of the moments tier_optim_read/write take (q8: fp32 values)
_MOMENT_TORCH = {_lib.TIER_FP32: torch.float32, _lib.TIER_BF16: torch.bfloat16,
                 _lib.TIER_Q8: torch.float32}
_HAS_POST_ACC_HOOK = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")
# Group keys of torch.optim.AdamW that TierAdamW keeps at torch's defaults
# (so its state_dict loads into torch.optim.AdamW and back).
_TORCH_ONLY_KEYS = {"amsgrad": False, "maximize": False, "foreach": None,
                    "capturable": False}


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr())


# ------------------------------------------------------------ several ranks

_COMM_TORCH = {_lib.TIER_COMM_F64: torch.float64, _lib.TIER_COMM_F32: torch.float32,
               _lib.TIER_COMM_BF16: torch.bfloat16, _lib.TIER_COMM_F16: torch.float16}


def _host_view(ptr, n, dtype):
    """The n elements of dtype at host address ptr as a tensor over that
    memory (no copy).  Valid while the library's buffer is: within the
    callback."""
    if n == 0:
        return torch.empty(0, dtype=dtype)
    if not ptr:
        raise ValueError(f"a NULL buffer for {n} elements")
    nbytes = n * torch.empty((), dtype=dtype).element_size()
    return torch.frombuffer((ctypes.c_char * nbytes).from_address(ptr), dtype=dtype, count=n)


def _group_of(process_group):
    """The torch.distributed group process_group names (True: the default
    group, as None in torch.distributed's calls)."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError("TierAdamW: process_group is given but torch.distributed is not "
                         "initialized (call torch.distributed.init_process_group first)")
    return None if process_group is True else process_group


class _ProcessGroupComm:
    """A tier_comm of backend "user" whose collectives run torch.distributed
    collectives on a process group (docs/python.md, "Several ranks").

    The library hands host pointers (backend user is host memory); each
    callback wraps them as tensors without a copy where it can.  With a
    group whose backend is NCCL the buffers are staged through the current
    CUDA device for the collective.  An exception inside a callback never
    crosses into C: it is kept (the first one) and the callback returns
    -EIO; the optimizer's call then fails, and TierAdamW raises the kept
    exception chained to the library's error (take_error).
    """

    def __init__(self, group, rank, world):
        import torch.distributed as dist
        self._dist = dist
        self.group = group
        self.rank, self.world = rank, world
        self.backend = str(dist.get_backend(group))
        self.device = (torch.device("cuda", torch.cuda.current_device())
                       if self.backend == "nccl" else torch.device("cpu"))
        self.error = None
        self.handle = None
        self.calls = {"reduce_scatter": 0, "allgatherv": 0, "allreduce": 0, "barrier": 0}
        cb = _lib.CommCallbacks()
        cb.user = None
        # The CFUNCTYPE objects must live as long as the comm: kept here.
        self._fns = (
            _lib.COMM_REDUCE_SCATTER(self._guard("reduce_scatter", self._reduce_scatter)),
            _lib.COMM_ALLGATHERV(self._guard("allgatherv", self._allgatherv)),
            _lib.COMM_ALLREDUCE(self._guard("allreduce", self._allreduce)),
            _lib.COMM_BARRIER(self._guard("barrier", self._barrier)),
        )
        cb.reduce_scatter, cb.allgatherv, cb.allreduce, cb.barrier = self._fns
        self._cb = cb
        p = _lib.CommParams.init()
        p.backend = b"user"
        p.rank, p.nranks = rank, world
        p.callbacks = ctypes.pointer(cb)
        h = ctypes.c_void_p()
        _lib.call("tier_comm_open", ctypes.byref(p), ctypes.byref(h),
                  what=f"TierAdamW: rank {rank} of {world} ({self.backend} process group)")
        self.handle = h

    @classmethod
    def open(cls, process_group):
        """The comm over process_group, or None for a group of one rank."""
        import torch.distributed as dist
        group = _group_of(process_group)
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        if rank < 0:
            raise ValueError("TierAdamW: this process is not a member of process_group")
        if world <= 1:
            return None
        return cls(group, rank, world)

    def _guard(self, name, fn):
        def callback(user, *args):
            try:
                self.calls[name] += 1
                fn(*args)
                return 0
            except BaseException as e:   # noqa: B902 - nothing may cross into C
                if self.error is None:
                    self.error = e
                return -errno.EIO
        return callback

    def take_error(self):
        """The exception a callback kept (None if none), forgotten."""
        e, self.error = self.error, None
        return e

    def _counts(self, counts):
        return [int(counts[i]) for i in range(self.world)]

    def _dtype(self, dtype, what, allowed):
        dt = _COMM_TORCH.get(dtype)
        if dt not in allowed:
            raise ValueError(f"tier_comm {what}: element type {dtype} is not one of "
                             f"{[str(a) for a in allowed]}")
        return dt

    def _reduce_scatter(self, send, recv, counts, dtype, average):
        dt = self._dtype(dtype, "reduce_scatter",
                         (torch.float32, torch.bfloat16, torch.float16))
        counts = self._counts(counts)
        total, off, n = sum(counts), sum(counts[:self.rank]), counts[self.rank]
        if total == 0:
            return
        # The sum of the whole buffer (gloo has no reduce_scatter), in f32
        # (bf16 and f16 widened), on a copy: send is the caller's gradient.
        buf = _host_view(send, total, dt).to(device=self.device, dtype=torch.float32,
                                             copy=True)
        self._dist.all_reduce(buf, op=self._dist.ReduceOp.SUM, group=self.group)
        mine = buf[off:off + n]
        if average:
            mine.div_(self.world)
        if n:
            _host_view(recv, n, dt).copy_(mine)   # one rounding to dt

    def _allgatherv(self, send, recv, counts, dtype):
        dt = self._dtype(dtype, "allgatherv", tuple(_COMM_TORCH.values()))
        es = torch.empty((), dtype=dt).element_size()
        counts = self._counts(counts)
        total, n, m = sum(counts), counts[self.rank], max(counts)
        if total == 0:
            return
        # Uneven counts: every slice padded to the largest, moved as bytes
        # (any dtype on any backend), then placed.  send may lie in recv.
        mine = torch.zeros(m * es, dtype=torch.uint8, device=self.device)
        if n:
            mine[:n * es].copy_(_host_view(send, n * es, torch.uint8))
        outs = [torch.empty(m * es, dtype=torch.uint8, device=self.device)
                for _ in range(self.world)]
        self._dist.all_gather(outs, mine, group=self.group)
        dst = _host_view(recv, total * es, torch.uint8)
        off = 0
        for c, o in zip(counts, outs):
            if c:
                dst[off * es:(off + c) * es].copy_(o[:c * es])
            off += c

    def _allreduce(self, buf, count, dtype):
        dt = self._dtype(dtype, "allreduce", (torch.float64, torch.float32))
        if count == 0:
            return
        t = _host_view(buf, count, dt)
        if self.device.type == "cpu":
            self._dist.all_reduce(t, op=self._dist.ReduceOp.SUM, group=self.group)
        else:
            d = t.to(self.device)
            self._dist.all_reduce(d, op=self._dist.ReduceOp.SUM, group=self.group)
            t.copy_(d)

    def _barrier(self):
        self._dist.barrier(group=self.group)

    def gather(self, piece, off, numel, what):
        """The flat tensor of numel elements joined from every rank's piece
        (this rank's `piece` starts at element `off`), on every rank.  A
        collective (torch.distributed's, outside the library's)."""
        dist = self._dist
        meta = torch.tensor([off, piece.numel()], dtype=torch.int64, device=self.device)
        metas = [torch.empty_like(meta) for _ in range(self.world)]
        dist.all_gather(metas, meta, group=self.group)
        metas = [(int(x[0]), int(x[1])) for x in metas]
        m = max(c for _, c in metas)
        mine = torch.zeros(max(m, 1), dtype=piece.dtype, device=self.device)
        mine[:piece.numel()] = piece.to(self.device)
        outs = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(outs, mine, group=self.group)
        full = torch.empty(numel, dtype=piece.dtype)
        at = 0
        for (a, c), o in sorted(zip(metas, outs), key=lambda x: x[0][0]):
            if c and a != at:
                raise RuntimeError(f"{what}: the ranks' pieces do not tile the parameter "
                                   f"(a piece at {a}, expected {at})")
            full[a:a + c] = o[:c].cpu()
            at += c
        if at != numel:
            raise RuntimeError(f"{what}: the ranks' pieces cover {at} of {numel} elements")
        return full

    def close(self):
        if self.handle is not None:
            h, self.handle = self.handle, None
            _lib.call("tier_comm_close", h, what=f"TierAdamW: rank {self.rank}: the comm")


# What a TierAdamW holds besides torch's own attributes (param_groups,
# state, defaults).  It lives in one _Core that the optimizer's __dict__
# points to, and TierAdamW's properties of these names forward to it: a
# wrapper that copies the optimizer's __dict__ (PyTorch Lightning's
# LightningOptimizer, a dynamic subclass; copy.copy) shares the core, so
# the two never disagree about a step, a closed store or a counter.
_SHARED = ("_opt", "_store", "_comm", "_manifest", "_own_manifest", "_gpu", "_moment",
           "_closed", "_begun", "_pushed", "_keep", "_staged", "_ids", "_params", "_names",
           "_frozen", "_empty", "_group_cache", "_hooks", "_overlap_off", "_counter",
           "_adopt", "_adopt_next", "_overlap", "last_step")


class _Core:
    """The one owner of an optimizer's library handles (the optimizer, its
    store, the manifest it loaded, the communicator) and of the directory
    a default store made.  It frees them once: at close(), or when the
    last object referring to it (the optimizer and whatever wrappers share
    its core) goes.  Nothing else frees them: TierAdamW has no __del__, so
    a wrapper dropped by a framework frees nothing."""

    def __init__(self):
        self._opt = None
        self._store = None
        self._comm = None
        self._manifest = None
        self._own_manifest = False
        self._gpu = -1
        self._moment = None
        self._closed = False
        self._begun = False
        self._pushed = set()
        self._keep = []
        self._staged = []         # (parameter, contiguous output) staged this step
        self._ids = {}            # parameter -> library id
        self._params = []         # library id -> parameter
        self._names = {}          # library id -> library name
        self._frozen = set()      # library ids frozen
        self._empty = {}          # empty (numel 0) parameter -> its step count
        self._group_cache = []    # torch group index -> hyperparameters last set
        self._hooks = []
        self._overlap_off = 0
        self._counter = 0
        self._adopt = None
        self._adopt_next = 0
        self._overlap = False
        self.last_step = None
        self.data_dir = None      # the directory a default store made (None: none)
        self.keep_dir = False     # it holds a checkpoint: kept after close
        self.pid = os.getpid()    # the process whose handles these are

    def release(self):
        """Destroys the optimizer, closes the store, frees the manifest and
        the communicator, removes the default store's directory unless it
        holds a checkpoint.  Raises the first error; a second call does
        nothing."""
        if self._closed:
            return
        self._closed = True
        if os.getpid() != self.pid:
            # A forked child (a DataLoader worker, say) holds a copy of the
            # parent's handles: freeing them, or removing the directory,
            # would pull the store from under the parent.
            self._opt = self._store = self._comm = self._manifest = None
            self._own_manifest = False
            return
        for h in self._hooks:
            (h[1] if isinstance(h, tuple) else h).remove()
        self._hooks = []
        first = None
        if self._opt is not None:
            h, self._opt = self._opt, None
            try:
                _lib.call("tier_optim_destroy", h)
            except TierError as e:
                first = e
        if self._store is not None:
            s, self._store = self._store, None
            try:
                s.close()
            except TierError as e:
                first = first or e
        if self._own_manifest and self._manifest is not None:
            self._manifest.free()
        if self._comm is not None:
            c, self._comm = self._comm, None
            try:
                c.close()
            except TierError as e:
                first = first or e
        self._keep = []
        self._staged = []
        if self.data_dir is not None and not self.keep_dir and first is None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        if first is not None:
            raise first

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass

    def __reduce__(self):
        _refuse_copy()


def _refuse_copy():
    raise TypeError("TierAdamW cannot be pickled or deep-copied: its state lives in a "
                    "store it owns; save state_dict() (torch.save) and load it into a "
                    "new TierAdamW, or use checkpoint() / export()")


def _forward(name):
    # self._core, not self.__dict__: a proxy whose __getattr__ forwards to
    # the real optimizer finds the real one's core.
    def get(self):
        return getattr(self._core, name)

    def put(self, value):
        setattr(self._core, name, value)
    return property(get, put)


class TierAdamW(torch.optim.Optimizer):
    r"""AdamW (torch.optim.AdamW's update, decoupled weight decay) whose state
    lives in a tierstore store: HBM over pinned DRAM over NVMe files, so it
    may be many times larger than memory.

    Arguments as torch.optim.AdamW: ``params`` (tensors or dicts of param
    groups), ``lr``, ``betas``, ``eps``, ``weight_decay`` (amsgrad,
    maximize, foreach, capturable are not supported and stay at torch's
    defaults).  Keyword-only:

    - ``manifest``: a :class:`tierstore.Manifest`, a path to a YAML tier
      manifest, or None ($TIER_MANIFEST, else the embedded default, whose
      NVMe file lives under $TIER_DATA or ./tier-data/).
    - ``moment_dtype``: 'fp32', 'bf16', 'q8' (8-bit codes with a scale
      per block of 256: 6 bytes of state a parameter), or None (the
      manifest's).  ``state_dict`` holds q8 moments as float32 values.
    - ``rounding``: how bf16 moments are rounded: 'stochastic' (the
      manifest's default: unbiased, so the moments decay as fp32's do),
      'nearest', or None (the manifest's).  ``seed``: the stochastic
      rounding's seed (None: the manifest's, 0 by default); the results
      are reproducible bit for bit for a given seed.
    - ``offload_fraction``: the CPU's share of the update (float in [0, 1]),
      'auto', or None (the manifest's).
    - ``max_grad_norm``: clip by the total norm of every group's gradients
      (None: no clipping).
    - ``loss_scale``: None (none), a number (a static scale: gradients
      arrive multiplied by it), or 'dynamic' (Megatron's dynamic scaler from
      2**16: a step with an inf or nan gradient is skipped and the scale
      backs off).
    - ``dram_capacity``: bytes of the DRAM tier, overriding the manifest's.
    - ``shard_size``: bytes of state per shard (None: the manifest's).
    - ``threads``: CPU update threads (None: $TIER_THREADS, else one per CPU).
    - ``overlap_backward``: the streaming form (below).
    - ``scratch``: remove on close the NVMe files this store created.
    - ``process_group``: a torch.distributed process group, or True for the
      default one (None: one rank).  With more than one rank the state is
      partitioned (below).

    Semantics, as torch.optim.AdamW:

    - Each torch param group is one library group; ``add_param_group`` works
      at any time between steps, and a new parameter's first update is its
      step 1.  ``step()`` reads every group's lr, betas, eps and weight_decay
      (so LR schedulers work unchanged).
    - A parameter whose ``.grad`` is None is not updated, and its own step
      count does not advance (bias correction per parameter, as torch).
    - The updated parameter is written in place into the parameter's storage
      in its dtype (fp32, bf16 or fp16).  The fp32 master copy is the one
      the optimizer holds, initialised from the parameters' values at
      construction: change a parameter's values between steps only through
      ``load_state_dict``.  ``self.state`` stays empty: the state is in the
      store (``state_dict()`` reads it out).
    - Parameters and gradients must be contiguous float32, bfloat16 or
      float16; CPU tensors are host memory, CUDA tensors device memory of
      the manifest's GPU.  Misuse raises TypeError or ValueError naming the
      parameter; a library failure raises :class:`tierstore.TierError`
      (an OSError) with the library's detail.
    - ``self.last_step`` is the last step's ``struct tier_step_result`` as a
      dict (applied, step, grad_norm, nvme_read_bytes, nvme_write_bytes,
      step_s, ...).

    **Streaming form** (``overlap_backward=True``): a hook on every
    parameter fires when backward has accumulated its gradient.  The first
    hook of a backward begins the step (with the groups' hyperparameters as
    they are then) and every hook pushes its parameter's gradient at once,
    so the state starts streaming up the tiers while backward still runs.
    ``step()`` then pushes any parameter whose gradient is set but was not
    pushed, and ends the step.  Between the backward and ``step()``, do not
    change the gradients (clip with ``max_grad_norm``, not
    clip_grad_norm_) nor the hyperparameters (a scheduler's step comes after
    ``optimizer.step()``, as usual).  For gradient accumulation, run the
    backward of every micro-batch but the last inside ``with
    opt.no_overlap():``, where the hooks do nothing; a second backward
    before ``step()`` outside it raises RuntimeError.  A gradient refused by
    a hook (wrong dtype, size) raises from backward and leaves the step
    begun: ``step()`` raises it again; fix the gradient, or ``close()``.

    **Several ranks** (``process_group``): each rank keeps the state of its
    piece of every parameter (about 1/N of it) in its own store, under its
    own manifest.  Every rank builds the same TierAdamW over the same
    parameters and makes the same calls in the same order; each pushes the
    gradients of its own backward (do not wrap the model in
    DistributedDataParallel: the step averages the gradients itself, by a
    reduce-scatter into each rank's pieces), and after ``step()`` every
    rank's parameters hold the full updated values.  The collectives are
    torch.distributed's on that group, run by the library through
    callbacks (backend "user", host memory: CUDA gradients and parameters
    are staged through host copies).  An exception in a collective is
    raised by the call that ran it, chained to the library's error, and
    the optimizer then refuses further steps.  ``state_dict()`` holds this
    rank's pieces; ``consolidate_state_dict(to)`` gathers the full one.

    **State**: ``state_dict()`` / ``load_state_dict()`` use torch's format
    (state per parameter index: 'step', 'exp_avg', 'exp_avg_sq', plus
    'master', the fp32 master weights), so a torch.optim.AdamW state dict
    loads (the master weights are then the parameters' current values) and
    this one loads into torch.optim.AdamW.  They hold the whole state in
    memory: for states larger than memory use ``checkpoint()`` (durable, in
    the store's files) and ``TierAdamW.resume()``, or ``export(path)`` and
    ``TierAdamW.import_(path, ...)`` (a safetensors file written and read
    shard by shard).
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, *,
                 manifest=None, moment_dtype=None, rounding=None, seed=None,
                 offload_fraction=None, max_grad_norm=None,
                 loss_scale=None, dram_capacity=None, shard_size=None, threads=None,
                 overlap_backward=False, scratch=False, process_group=None, _adopt=None):
        # Set first, so close() works whatever fails below.
        self._core = _Core()
        self._adopt = _adopt
        self._overlap = bool(overlap_backward)
        if isinstance(params, torch.Tensor):
            raise TypeError("TierAdamW: params must be an iterable of tensors or of dicts "
                            f"(param groups), not a tensor (of shape {tuple(params.shape)})")
        params = _listed(params)

        _check_hyper("TierAdamW", lr, betas, eps, weight_decay)
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        **_TORCH_ONLY_KEYS)

        p = _lib.OptimParams.init()
        p.lr, (p.beta1, p.beta2), p.eps, p.weight_decay = lr, betas, eps, weight_decay
        p.decoupled = True
        if moment_dtype is not None:
            if moment_dtype not in _MOMENT_NAMES:
                raise ValueError(f"TierAdamW: moment_dtype {moment_dtype!r} must be 'fp32', "
                                 "'bf16', 'q8' or None (the manifest's)")
            p.moment_dtype = _MOMENT_NAMES[moment_dtype]
        if rounding is not None:
            if rounding not in _ROUNDING_NAMES:
                raise ValueError(f"TierAdamW: rounding {rounding!r} must be 'stochastic', "
                                 "'nearest' or None (the manifest's)")
            p.rounding = _ROUNDING_NAMES[rounding]
        if seed is not None:
            if (not isinstance(seed, numbers.Integral) or isinstance(seed, bool)
                    or not 0 <= seed < 2**63):
                raise ValueError(f"TierAdamW: seed {seed!r} must be an integer in [0, 2**63)")
            p.seed = int(seed)
        if offload_fraction is None:
            p.offload_fraction = _lib.TIER_OFFLOAD_MANIFEST
        elif offload_fraction == "auto":
            p.offload_fraction = _lib.TIER_OFFLOAD_AUTO
        elif isinstance(offload_fraction, numbers.Real) and 0 <= offload_fraction <= 1:
            p.offload_fraction = float(offload_fraction)
        else:
            raise ValueError(f"TierAdamW: offload_fraction {offload_fraction!r} must be a "
                             "number in [0, 1], 'auto' or None (the manifest's)")
        if max_grad_norm is not None:
            if not (isinstance(max_grad_norm, numbers.Real) and max_grad_norm > 0):
                raise ValueError(f"TierAdamW: max_grad_norm {max_grad_norm!r} must be a "
                                 "number > 0 or None")
            p.max_grad_norm = float(max_grad_norm)
        if loss_scale == "dynamic":
            p.dynamic_loss_scale = True
            p.loss_scale = 2.0 ** 16
        elif loss_scale is not None:
            if not (isinstance(loss_scale, numbers.Real) and math.isfinite(loss_scale)
                    and loss_scale > 0):
                raise ValueError(f"TierAdamW: loss_scale {loss_scale!r} must be a finite "
                                 "number > 0, 'dynamic' or None")
            p.loss_scale = float(loss_scale)
        if shard_size is not None:
            p.shard_size = int(shard_size)
        if threads is not None:
            if int(threads) <= 0:
                raise ValueError(f"TierAdamW: threads {threads!r} must be > 0")
            p.threads = int(threads)

        try:
            self._open(params, defaults, p, manifest, dram_capacity, scratch, process_group,
                       _adopt)
        except BaseException:
            # A failed construction leaves no store open (its backing file
            # would stay busy until the garbage collector ran).
            try:
                self.close()
            except Exception:
                pass
            raise

    def _open(self, params, defaults, p, manifest, dram_capacity, scratch, process_group,
              _adopt):
        if process_group is not None and process_group is not False:
            # Opened first and closed last: the comm outlives the optimizer.
            self._comm = _ProcessGroupComm.open(process_group)
            if self._comm is not None:
                p.comm = self._comm.handle
        own_manifest = not isinstance(manifest, Manifest)
        sized = manifest is None and not os.environ.get("TIER_MANIFEST")
        if not sized:
            m = Manifest(manifest) if own_manifest else manifest
        elif os.environ.get("TIER_DATA"):
            m = Manifest.default()
        elif _adopt is not None and _adopt[0] == "resume":
            raise ValueError("TierAdamW.resume: no manifest, $TIER_MANIFEST or $TIER_DATA: "
                             "a store made without a manifest lives in a directory of its own; "
                             "pass manifest= the manifest.yaml that its checkpoint() wrote "
                             "there (its warning named it), or the manifest it was made with")
        else:
            self._core.data_dir = _data_dir()
            m = Manifest.default(self._core.data_dir)
        self._manifest, self._own_manifest = m, own_manifest
        info = m.info()
        self._gpu = info["gpu"]
        hbm_capacity = None
        if sized:
            # The embedded default, sized from the state it will hold.
            mom = (p.moment_dtype if p.moment_dtype != _lib.TIER_DTYPE_MANIFEST
                   else info["moment_dtype"])
            need = _state_bytes(params, _MOMENT_BYTES[mom])
            if dram_capacity is None:
                dram_capacity = min(need, info["dram_capacity"])
            if self._gpu >= 0 and info["hbm_capacity"]:
                hbm_capacity = min(need, info["hbm_capacity"])
        self._store = Store(m, dram_capacity=dram_capacity, hbm_capacity=hbm_capacity,
                            scratch=scratch)
        h = ctypes.c_void_p()
        if _adopt is None:
            self._call("tier_optim_create", self._store.handle, ctypes.byref(p), ctypes.byref(h))
        elif _adopt[0] == "resume":
            self._call("tier_optim_resume", self._store.handle, ctypes.byref(p), ctypes.byref(h))
        else:
            self._call("tier_optim_import", self._store.handle, os.fsencode(_adopt[1]),
                       ctypes.byref(p), ctypes.byref(h), what=f"import {_adopt[1]}")
        self._opt = h
        info = _lib.OptimInfo()
        _lib.call("tier_optim_info", h, ctypes.byref(info))
        self._moment = info.moment_dtype
        super().__init__(params, defaults)
        if _adopt is not None:
            n = _lib.lib().tier_optim_nparams(h)
            if self._adopt_next != n:
                raise ValueError(f"TierAdamW.{_adopt[0]}: the store's optimizer has {n} "
                                 f"parameters, the params given {self._adopt_next}")
            self._adopt = None

    def _call(self, name, *args, what=None):
        """_lib.call; a failure a process-group callback caused raises that
        callback's exception, chained to the library's error."""
        try:
            return _lib.call(name, *args, what=what)
        except TierError as err:
            cause = self._comm.take_error() if self._comm is not None else None
            if cause is None:
                raise
            raise cause from err

    @property
    def rank(self):
        """This process's rank in the process group (0 without one)."""
        return self._comm.rank if self._comm is not None else 0

    @property
    def world(self):
        """The number of ranks the state is partitioned over (1: not
        partitioned)."""
        return self._comm.world if self._comm is not None else 1

    # ------------------------------------------------------------ groups

    @property
    def handle(self):
        if self._opt is None:
            raise ValueError("TierAdamW: the optimizer is closed (close() was called on it or "
                             "on a wrapper of it)")
        return self._opt

    def add_param_group(self, param_group):
        """torch's add_param_group; the group becomes a library group and
        its parameters get state (master = their values, moments zero, step
        count 0).  Between steps only."""
        self._live("add_param_group")
        if self._begun:
            raise RuntimeError("TierAdamW.add_param_group: inside a step (a backward with "
                               "overlap_backward began one); call step() first")
        super().add_param_group(param_group)
        gi = len(self.param_groups) - 1
        g = self.param_groups[gi]
        try:
            for k, v in _TORCH_ONLY_KEYS.items():
                if g.get(k, v) != v:
                    raise ValueError(f"TierAdamW: param group {gi}: {k}={g[k]!r} is not "
                                     "supported")
            _check_hyper(f"TierAdamW: param group {gi}", g["lr"], g["betas"], g["eps"],
                         g["weight_decay"])
            for j, p in enumerate(g["params"]):
                self._check_param(p, f"param group {gi} parameter {j}")
            if self._adopt is not None:
                self._adopt_group(gi, g)
            else:
                self._create_group(gi, g)
        except BaseException:
            self.param_groups.pop()
            raise
        if self._overlap:
            for p in g["params"]:
                if p.requires_grad:   # no gradient, no hook: step() skips it
                    self._hook(p)

    def _create_group(self, gi, g):
        lib = _lib.lib()
        gp = _group_params(g)
        if gi < lib.tier_optim_ngroups(self.handle):
            self._call("tier_optim_set_group", self.handle, gi, ctypes.byref(gp),
                       what=f"param group {gi}")
        else:
            gid = _lib.u32()
            self._call("tier_optim_add_group", self.handle, ctypes.byref(gp), ctypes.byref(gid),
                       what=f"param group {gi}")
            if gid.value != gi:
                raise RuntimeError(f"TierAdamW: param group {gi} became library group "
                                   f"{gid.value}")
        while len(self._group_cache) <= gi:
            self._group_cache.append(None)
        self._group_cache[gi] = _hyper(g)
        added = []
        try:
            for p in g["params"]:
                if p.numel() == 0:
                    # Nothing to update: torch keeps only a step count.
                    self._empty[p] = 0
                    continue
                init = p.detach().to(device="cpu", dtype=torch.float32).contiguous()
                name = f"param.{self._counter}"
                pid = _lib.u32()
                self._call("tier_optim_add_param_to", self.handle, gi, name.encode(),
                           p.numel(), _ptr(init), ctypes.byref(pid),
                           what=f"param group {gi}: {name}")
                self._counter += 1
                added.append(p)
                self._ids[p] = pid.value
                self._names[pid.value] = name
                self._params.append(p)
        except BaseException:
            # Take back what this group added, so the library and torch agree.
            for p in reversed(added):
                pid = self._ids.pop(p)
                self._params.pop()
                lib.tier_optim_remove_param(self.handle, pid)
            raise

    def _adopt_group(self, gi, g):
        """Resume / import: the library has the parameters; map the torch
        group's parameters to them in order, take the group's
        hyperparameters from the library, and copy the master weights into
        the parameters."""
        lib = _lib.lib()
        what = f"TierAdamW.{self._adopt[0]}"
        if gi >= lib.tier_optim_ngroups(self.handle):
            raise ValueError(f"{what}: param group {gi}: the store's optimizer has "
                             f"{lib.tier_optim_ngroups(self.handle)} groups")
        gp = _lib.GroupParams.init()
        self._call("tier_optim_get_group", self.handle, gi, ctypes.byref(gp))
        g["lr"], g["betas"], g["eps"], g["weight_decay"] = (
            gp.lr, (gp.beta1, gp.beta2), gp.eps, gp.weight_decay)
        while len(self._group_cache) <= gi:
            self._group_cache.append(None)
        self._group_cache[gi] = _hyper(g)
        n = lib.tier_optim_nparams(self.handle)
        for j, p in enumerate(g["params"]):
            if p.numel() == 0:
                self._empty[p] = 0     # never in the store (_create_group)
                continue
            pid = self._adopt_next
            if pid >= n:
                raise ValueError(f"{what}: param group {gi} parameter {j}: the store's "
                                 f"optimizer has {n} parameters only")
            info = self._info(pid)
            if info.numel != p.numel() or info.group != gi:
                raise ValueError(f"{what}: param group {gi} parameter {j} (numel "
                                 f"{p.numel()}) does not match the store's parameter {pid} "
                                 f"{info.name.decode()!r} (numel {info.numel}, group "
                                 f"{info.group})")
            if self._comm is None:
                master = torch.empty(p.numel(), dtype=torch.float32)
                self._call("tier_optim_read", self.handle, pid, _ptr(master), None, None,
                           what=f"{what}: {info.name.decode()}")
            else:
                # This rank's piece, joined with the other ranks' (every
                # rank adopts the same parameters in the same order).
                piece = torch.empty(info.part_numel, dtype=torch.float32)
                if info.part_numel:
                    self._call("tier_optim_read", self.handle, pid, _ptr(piece), None, None,
                               what=f"{what}: {info.name.decode()}")
                master = self._comm.gather(piece, int(info.part_off), p.numel(),
                                           f"{what}: {info.name.decode()}")
            with torch.no_grad():
                p.copy_(master.view_as(p))
            self._ids[p] = pid
            self._names[pid] = info.name.decode()
            self._params.append(p)
            self._adopt_next += 1
        self._counter = max(self._counter, self._adopt_next)
        # A new parameter's name must not collide with the store's.
        names = {self._info(i).name.decode() for i in range(n)}
        while f"param.{self._counter}" in names:
            self._counter += 1

    def _check_param(self, p, where):
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"TierAdamW: {where} is a {type(p).__name__}, not a tensor")
        if p.dtype not in _DTYPES:
            raise TypeError(f"TierAdamW: {where} has dtype {p.dtype}; tierstore takes "
                            "float32, bfloat16 or float16 parameters")
        if p.is_sparse:
            raise ValueError(f"TierAdamW: {where} (shape {tuple(p.shape)}) is sparse; "
                             "tierstore takes dense parameters")
        # Not contiguous (channels_last, a transposed weight): each step
        # goes through a row-major copy (_push).
        self._check_device(p, where)

    def _check_device(self, t, where):
        if t.device.type == "cpu":
            return _lib.TIER_MEM_HOST
        if t.device.type != "cuda":
            raise ValueError(f"TierAdamW: {where} is on {t.device}; tierstore takes CPU or "
                             "CUDA tensors")
        if self._gpu < 0:
            raise ValueError(f"TierAdamW: {where} is on {t.device}, but the manifest "
                             f"{self._manifest.info()['source']!r} has no GPU (gpu.device: "
                             "none, or no GPU or CUDA in this build); keep the parameters "
                             "on the CPU or name the GPU in the manifest")
        idx = t.device.index if t.device.index is not None else torch.cuda.current_device()
        if idx != self._gpu:
            raise ValueError(f"TierAdamW: {where} is on {t.device}, but the manifest's GPU "
                             f"is cuda:{self._gpu}")
        return _lib.TIER_MEM_DEVICE

    def _info(self, pid):
        info = _lib.ParamInfo()
        self._call("tier_optim_param_info", self.handle, pid, ctypes.byref(info))
        return info

    def _where(self, p):
        if p in self._empty:
            return f"an empty parameter (shape {tuple(p.shape)})"
        pid = self._ids[p]
        return f"parameter {pid} ({self._names[pid]}, shape {tuple(p.shape)})"

    def _sync_groups(self):
        for gi, g in enumerate(self.param_groups):
            h = _hyper(g)
            if h != self._group_cache[gi]:
                _check_hyper(f"TierAdamW: param group {gi}", g["lr"], g["betas"], g["eps"],
                             g["weight_decay"])
                gp = _group_params(g)
                self._call("tier_optim_set_group", self.handle, gi, ctypes.byref(gp),
                           what=f"param group {gi}")
                self._group_cache[gi] = h

    # -------------------------------------------------------------- steps

    def _check_grad(self, p):
        g = p.grad
        where = self._where(p)
        if self._ids[p] in self._frozen:
            raise ValueError(f"TierAdamW: {where} is frozen but has a gradient; thaw it "
                             "(freeze(p, False)) or set its .grad to None")
        if g.dtype not in _DTYPES:
            raise TypeError(f"TierAdamW: the gradient of {where} has dtype {g.dtype}; "
                            "tierstore takes float32, bfloat16 or float16 gradients")
        if g.is_sparse:
            raise ValueError(f"TierAdamW: the gradient of {where} is sparse")
        if g.numel() != p.numel():
            raise ValueError(f"TierAdamW: the gradient of {where} has {g.numel()} elements, "
                             f"the parameter {p.numel()}")
        if p.data.is_sparse:
            raise ValueError(f"TierAdamW: {where} is sparse (was .data replaced?)")
        if g.device != p.device:
            raise ValueError(f"TierAdamW: the gradient of {where} is on {g.device}, the "
                             f"parameter on {p.device}")
        self._check_device(g, f"the gradient of {where}")

    def _begin(self):
        self._sync_groups()
        self._call("tier_optim_begin", self.handle, _lib.TIER_LR_KEEP)
        self._begun = True

    def _push(self, p):
        pid = self._ids[p]
        g = p.grad
        mem = _lib.TIER_MEM_DEVICE if g.is_cuda else _lib.TIER_MEM_HOST
        if g.is_cuda:
            torch.cuda.current_stream(g.device).synchronize()
        out = p.data
        staged = False
        if g.is_cuda and self._comm is not None:
            # Backend "user" is host memory: the gradient goes through a
            # host copy, and the output lands in a host copy of the
            # parameter (its values, in case the step is skipped) that
            # step() copies back.
            g = g.to("cpu")
            out = p.data.to("cpu", copy=True)
            staged = True
            mem = _lib.TIER_MEM_HOST
        # The library takes elements in row-major order: a gradient or a
        # parameter stored otherwise (channels_last, transposed) goes
        # through a row-major copy, the parameter's copied back by step().
        if not g.is_contiguous():
            g = g.contiguous()
        if not out.is_contiguous():
            out = out.contiguous()
            staged = True
        if staged:
            self._staged.append((p, out))
        gt = _lib.Tensor(g.data_ptr(), _DTYPES[g.dtype], mem, g.numel())
        ot = _lib.Tensor(out.data_ptr(), _DTYPES[p.dtype], mem, p.numel())
        self._keep.append(g)
        self._call("tier_optim_push", self.handle, pid, ctypes.byref(gt), ctypes.byref(ot),
                   what=self._where(p))
        self._pushed.add(pid)

    @torch.no_grad()
    def step(self, closure=None):
        """One AdamW step over every parameter whose .grad is not None.
        Returns the closure's loss (None without one)."""
        self._live("step")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        todo = [p for p in self._params
                if p.grad is not None and self._ids[p] not in self._pushed]
        for p in todo:
            self._check_grad(p)
        if not self._begun:
            self._begin()
        # A push the library refuses raises here and leaves the step begun
        # with what was pushed: the next step() pushes the rest and ends it.
        for p in todo:
            self._push(p)
        res = _lib.StepResult()
        try:
            self._call("tier_optim_end", self.handle, ctypes.byref(res))
            for p, out in self._staged:
                p.data.copy_(out.view_as(p))
            if res.applied:
                for p in self._empty:
                    if p.grad is not None:
                        self._empty[p] += 1
        finally:
            # After end, done or failed, no step is begun (a step that failed
            # part way is completed by running it again).
            self._end_bookkeeping()
        self.last_step = res.as_dict()
        return loss

    def zero_grad(self, *args, **kwargs):
        """torch's zero_grad (its set_to_none default is the installed
        torch's)."""
        self._live("zero_grad")
        return super().zero_grad(*args, **kwargs)

    def _end_bookkeeping(self):
        self._begun = False
        self._pushed.clear()
        self._keep.clear()
        self._staged.clear()

    # ---------------------------------------------------- streaming form

    def _hook(self, p):
        wself = weakref.ref(self)

        def fire(*_):
            opt = wself()
            if opt is None or opt._closed or opt._overlap_off or p.grad is None:
                return
            opt._hook_push(p)

        if _HAS_POST_ACC_HOOK:
            self._hooks.append(p.register_post_accumulate_grad_hook(lambda t: fire()))
        else:
            # torch < 2.1: the AccumulateGrad node's hook runs after the
            # gradient is accumulated into p.grad.  The tensor holds its
            # node weakly: keep a reference, or the hook goes with it.
            with torch.enable_grad():   # even when built under no_grad()
                node = p.expand_as(p).grad_fn.next_functions[0][0]
            self._hooks.append((node, node.register_hook(fire)))

    def _hook_push(self, p):
        pid = self._ids.get(p)
        if pid is None:
            return
        if pid in self._pushed:
            raise RuntimeError(f"TierAdamW: a second backward reached {self._where(p)} "
                               "before step(); run the backward of gradient-accumulation "
                               "micro-batches inside `with optimizer.no_overlap():`")
        self._check_grad(p)
        if not self._begun:
            self._begin()
        self._push(p)

    @contextlib.contextmanager
    def no_overlap(self):
        """Within it the streaming form's hooks do nothing (gradient
        accumulation micro-batches); the gradients are pushed by the next
        backward outside it, or by step()."""
        self._live("no_overlap")
        self._overlap_off += 1
        try:
            yield self
        finally:
            self._overlap_off -= 1

    # ------------------------------------------------------------- state

    def _param_index(self):
        """Parameters in state_dict order: the groups' order, as torch."""
        return [p for g in self.param_groups for p in g["params"]]

    def state_dict(self):
        """torch's format: {'state': {index: {'step', 'exp_avg', 'exp_avg_sq',
        'master'}}, 'param_groups': [...]}, plus 'tierstore' (the loss
        scaler, the moment dtype).  A parameter never updated has no state,
        as in torch.  Holds the whole state in memory.

        Partitioned (a process group of several ranks): this rank's piece
        only.  Each state's tensors are flat, of the piece's 'part_numel'
        elements starting at element 'part_off' of the parameter (of
        'numel'), and 'tierstore' has 'rank' and 'world'.  It loads back
        into the same rank of the same partitioning; consolidate_state_dict()
        gathers the full one onto one rank."""
        self._live("state_dict")
        if self._begun:
            raise RuntimeError("TierAdamW.state_dict: inside a step; call step() first")
        state = {}
        groups = []
        idx = 0
        mdt = _MOMENT_TORCH[self._moment]
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = list(range(idx, idx + len(g["params"])))
            groups.append(packed)
            for p in g["params"]:
                if p in self._empty:
                    if self._empty[p] > 0:
                        state[idx] = {"step": torch.tensor(float(self._empty[p])),
                                      "exp_avg": torch.empty(p.shape, dtype=mdt),
                                      "exp_avg_sq": torch.empty(p.shape, dtype=mdt),
                                      "master": torch.empty(p.shape, dtype=torch.float32)}
                        if self._comm is not None:
                            state[idx].update(part_off=0, part_numel=0, numel=0)
                    idx += 1
                    continue
                pid = self._ids[p]
                info = self._info(pid)
                if info.step > 0:
                    shape = p.shape if self._comm is None else (info.part_numel,)
                    master = torch.empty(shape, dtype=torch.float32)
                    ea = torch.empty(shape, dtype=mdt)
                    eas = torch.empty(shape, dtype=mdt)
                    if master.numel():
                        self._call("tier_optim_read", self.handle, pid, _ptr(master),
                                   _ptr(ea), _ptr(eas), what=self._where(p))
                    state[idx] = {"step": torch.tensor(float(info.step)), "exp_avg": ea,
                                  "exp_avg_sq": eas, "master": master}
                    if self._comm is not None:
                        state[idx].update(part_off=int(info.part_off),
                                          part_numel=int(info.part_numel),
                                          numel=int(info.numel))
                idx += 1
        sc = _lib.LossScaler()
        self._call("tier_optim_get_scaler", self.handle, ctypes.byref(sc))
        ts = {"scaler": sc.as_dict(),
              "moment_dtype": {_lib.TIER_BF16: "bf16", _lib.TIER_Q8: "q8"}.get(self._moment,
                                                                             "fp32")}
        if self._comm is not None:
            ts.update(rank=self.rank, world=self.world)
        return {"state": state, "param_groups": groups, "tierstore": ts}

    def consolidate_state_dict(self, to=0):
        """The full state dict (every rank's pieces joined, in torch's
        format as an unpartitioned TierAdamW's state_dict()) on rank `to` of
        the process group, None on the others.  A collective: every rank
        calls it.  Without a process group, state_dict().  (torch's
        ZeroRedundancyOptimizer keeps the result for a later state_dict();
        this returns it.)"""
        self._live("consolidate_state_dict")
        sd = self.state_dict()
        if self._comm is None:
            return sd
        import torch.distributed as dist
        if not 0 <= int(to) < self.world:
            raise ValueError(f"TierAdamW.consolidate_state_dict: to={to} is not a rank of "
                             f"the group (0 to {self.world - 1})")
        group = self._comm.group
        dst = int(to)
        if group is not None:
            dst = dist.distributed_c10d._get_global_rank(group, dst)
        pieces = [None] * self.world if self.rank == to else None
        dist.gather_object(sd, pieces, dst=dst, group=group)
        if self.rank != to:
            return None
        return _join_pieces(pieces, self._param_index())

    @torch.no_grad()
    def load_state_dict(self, state_dict):
        """Loads a state dict of TierAdamW or torch.optim.AdamW (torch's
        checks on the groups).  Without 'master' (torch's), the master
        weights are the parameters' current values.  A parameter without
        state starts over (moments zero, step 0).

        Partitioned: a full state dict (torch's, an unpartitioned
        TierAdamW's, or consolidate_state_dict()'s), of which each rank
        takes its piece, or the piece this rank's state_dict() saved."""
        self._live("load_state_dict")
        if self._begun:
            raise RuntimeError("TierAdamW.load_state_dict: inside a step; call step() first")
        groups = self.param_groups
        saved = state_dict["param_groups"]
        if len(groups) != len(saved):
            raise ValueError(f"TierAdamW.load_state_dict: the state dict has {len(saved)} "
                             f"param groups, the optimizer {len(groups)}")
        for gi, (g, sg) in enumerate(zip(groups, saved)):
            if len(g["params"]) != len(sg["params"]):
                raise ValueError(f"TierAdamW.load_state_dict: param group {gi} has "
                                 f"{len(sg['params'])} parameters in the state dict, "
                                 f"{len(g['params'])} in the optimizer")
        mdt = _MOMENT_TORCH[self._moment]
        for gi, (g, sg) in enumerate(zip(groups, saved)):
            for j, (p, key) in enumerate(zip(g["params"], sg["params"])):
                st = state_dict["state"].get(key)
                where = f"param group {gi} parameter {j}"
                if p in self._empty:
                    step = 0 if st is None else st["step"]
                    step = int(step.item() if isinstance(step, torch.Tensor) else step)
                    if step < 0:
                        raise ValueError(f"TierAdamW.load_state_dict: {where}: step {step}")
                    self._empty[p] = step
                    continue
                pid = self._ids[p]
                # The elements this rank keeps: all, or its piece.
                if self._comm is None:
                    off, n = 0, p.numel()
                else:
                    info = self._info(pid)
                    off, n = int(info.part_off), int(info.part_numel)
                if st is None:
                    master = p.detach().to(device="cpu", dtype=torch.float32).reshape(-1)
                    master = master[off:off + n].contiguous()
                    ea = torch.zeros(n, dtype=mdt)
                    eas = torch.zeros(n, dtype=mdt)
                    step = 0
                else:
                    piece = self._comm is not None and "part_off" in st
                    if piece and (int(st["part_off"]), int(st["part_numel"])) != (off, n):
                        raise ValueError(
                            f"TierAdamW.load_state_dict: {where}: the state dict holds "
                            f"elements [{st['part_off']}, "
                            f"{int(st['part_off']) + int(st['part_numel'])}) of the "
                            f"parameter, rank {self.rank} of {self.world} keeps "
                            f"[{off}, {off + n}): load the state dict this rank saved, or a "
                            "full one (consolidate_state_dict())")
                    if piece:
                        src = st["master"]
                    else:
                        src = st.get("master", p.detach())
                    master = _host(src, torch.float32, p, f"{where}: master", off, n, piece)
                    ea = _host(st["exp_avg"], mdt, p, f"{where}: exp_avg", off, n, piece)
                    eas = _host(st["exp_avg_sq"], mdt, p, f"{where}: exp_avg_sq", off, n,
                                piece)
                    step = st["step"]
                    step = int(step.item() if isinstance(step, torch.Tensor) else step)
                    if step < 0:
                        raise ValueError(f"TierAdamW.load_state_dict: {where}: step {step}")
                if n:
                    self._call("tier_optim_write", self.handle, pid, _ptr(master), _ptr(ea),
                               _ptr(eas), what=f"load_state_dict {where}")
                self._call("tier_optim_set_param_step", self.handle, pid, step,
                           what=f"load_state_dict {where}")
        for gi, (g, sg) in enumerate(zip(groups, saved)):
            for k, v in sg.items():
                if k != "params":
                    g[k] = v
        self._group_cache = [None] * len(groups)
        self._sync_groups()
        ts = state_dict.get("tierstore")
        if ts and "scaler" in ts:
            sc = _lib.LossScaler(**ts["scaler"])
            self._call("tier_optim_set_scaler", self.handle, ctypes.byref(sc),
                       what="load_state_dict: the loss scaler")

    def freeze(self, params, frozen=True):
        """Freezes parameters (a tensor or an iterable of them) that will
        get no gradient for a while, or thaws them (frozen=False): a frozen
        parameter keeps its state and step count and is not streamed by the
        steps, which a parameter merely without a gradient still is.  A
        frozen parameter with a gradient at step() is refused.  Between
        steps."""
        self._live("freeze")
        if self._begun:
            raise RuntimeError("TierAdamW.freeze: inside a step; call step() first")
        if isinstance(params, torch.Tensor):
            params = [params]
        for p in params:
            pid = self._ids.get(p)
            if pid is None and p in self._empty:
                continue      # nothing streams for an empty parameter
            if pid is None:
                raise ValueError("TierAdamW.freeze: a tensor this optimizer does not hold")
            self._call("tier_optim_freeze", self.handle, pid, bool(frozen),
                       what=self._where(p))
            if frozen:
                self._frozen.add(pid)
            else:
                self._frozen.discard(pid)

    def param_step(self, p):
        """Parameter p's own step count (its bias-correction count)."""
        self._live("param_step")
        if p in self._empty:
            return self._empty[p]
        return self._info(self._ids[p]).step

    def info(self):
        """struct tier_optim_info as a dict (shard size, window, state bytes...)."""
        self._live("info")
        out = _lib.OptimInfo()
        self._call("tier_optim_info", self.handle, ctypes.byref(out))
        return out.as_dict()

    # ------------------------------------------- checkpoints, export, import

    def checkpoint(self):
        """Makes the state durable in the store's files, atomically
        (tier_optim_checkpoint); returns the commit's generation.  Costs the
        dirty shards, not a copy of the state.  Between steps."""
        self._live("checkpoint")
        if self._begun:
            raise RuntimeError("TierAdamW.checkpoint: inside a step; call step() first")
        gen = _lib.u64()
        self._call("tier_optim_checkpoint", self.handle, ctypes.byref(gen))
        core = self._core
        if core.data_dir is not None and not core.keep_dir:
            # The default store's directory now holds data: kept after
            # close(), with the manifest that reopens it.
            path = os.path.join(core.data_dir, "manifest.yaml")
            with open(path, "w") as f:
                f.write(self._manifest.emit())
            with open(os.path.join(core.data_dir, "KEEP"), "w") as f:
                f.write("a checkpoint of a TierAdamW made without a manifest; resume it "
                        f"with TierAdamW.resume(params, manifest={path!r})\n")
            core.keep_dir = True
            warnings.warn(f"TierAdamW.checkpoint: the store (made without a manifest) is in "
                          f"{core.data_dir}, which is kept after close() because it now holds "
                          f"a checkpoint: resume with TierAdamW.resume(params, "
                          f"manifest={path!r}) and remove the directory when done; give a "
                          "manifest or set TIER_DATA to choose the place", stacklevel=2)
        return gen.value

    @classmethod
    def resume(cls, params, *, manifest=None, dram_capacity=None, threads=None,
               offload_fraction=None, overlap_backward=False, process_group=None):
        """The optimizer checkpointed in the store of `manifest` (its files
        reopen at the last checkpoint), over `params` given as at the
        original construction (same order, same groups, same sizes).  The
        groups' hyperparameters and the step counts are the checkpoint's
        (those given are replaced), its master weights are copied into the
        parameters, and the next step is the one the checkpointed run would
        have taken.  threads and offload_fraction may differ.  A partitioned
        run resumes with the same process group (its size and this rank's
        place in it must be the checkpoint's; a collective: every rank
        resumes), each rank from its own manifest; the parameters get the
        pieces of every rank."""
        return cls(params, manifest=manifest, dram_capacity=dram_capacity, threads=threads,
                   offload_fraction=offload_fraction, overlap_backward=overlap_backward,
                   process_group=process_group, _adopt=("resume", None))

    def export(self, path):
        """Writes the full state to a safetensors file (tier_optim_export),
        shard by shard: a state larger than DRAM exports too."""
        self._live("export")
        if self._begun:
            raise RuntimeError("TierAdamW.export: inside a step; call step() first")
        self._call("tier_optim_export", self.handle, os.fsencode(path), what=f"export {path}")

    @classmethod
    def import_(cls, path, params, *, manifest=None, dram_capacity=None, threads=None,
                offload_fraction=None, shard_size=None, overlap_backward=False, scratch=False):
        """A new optimizer on a fresh store (of any geometry) holding the
        state export() wrote to `path`, over `params` given as at the
        original construction.  The file's master weights are copied into
        the parameters."""
        return cls(params, manifest=manifest, dram_capacity=dram_capacity, threads=threads,
                   offload_fraction=offload_fraction, shard_size=shard_size,
                   overlap_backward=overlap_backward, scratch=scratch,
                   _adopt=("import_", path))

    # -------------------------------------------------------------- close

    def close(self):
        """Destroys the optimizer, closes the store (its dirty state goes
        home), frees the manifest this optimizer loaded and removes the
        directory a default store made (unless it holds a checkpoint).
        Raises the first error; a second call does nothing.  Every other
        method of a closed optimizer raises ValueError.  Closing through a
        wrapper that shares this optimizer's core closes this one."""
        self._core.release()

    @property
    def closed(self):
        """True after close()."""
        return self._closed

    @property
    def data_dir(self):
        """The directory the store's NVMe file is in when no manifest was
        given and $TIER_DATA is not set (made for this optimizer, removed
        by close() unless checkpoint() wrote into it); None otherwise."""
        return self._core.data_dir

    def _live(self, what):
        if self._closed:
            raise ValueError(f"TierAdamW.{what}: the optimizer is closed (close() was "
                             "called on it or on a wrapper of it)")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # A copy shares the core (a view of the same optimizer that owns
    # nothing more); a deep copy or a pickle would need a second store.
    def __copy__(self):
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo):
        _refuse_copy()

    def __reduce_ex__(self, protocol):
        _refuse_copy()


for _name in _SHARED:
    setattr(TierAdamW, _name, _forward(_name))
del _name


# Bytes of state per element (master + the two moments; q8's per-block
# scales rounded up) by moment dtype.
_MOMENT_BYTES = {_lib.TIER_FP32: 12, _lib.TIER_BF16: 8, _lib.TIER_Q8: 7}
_MIB = 1 << 20


def _state_bytes(params, per_elem):
    """The DRAM tier a default store needs to hold the state of params
    resident: each parameter's state as the store allocates it (64-element
    aligned, in blocks of a power of two up to the largest shard, 64 MiB),
    plus an eighth (at least 8 MiB) for the lookahead's working room,
    rounded up to 2 MiB.  At least 16 MiB: four shards of the smallest
    size with room to spare."""
    total = 0
    for x in params:
        ps = x.get("params", []) if isinstance(x, dict) else [x]
        for t in ([ps] if isinstance(ps, torch.Tensor) else ps):
            n = t.numel() if isinstance(t, torch.Tensor) else 0
            if not n:
                continue
            b = -(-n // 64) * 64 * per_elem
            if b > 64 * _MIB:
                total += -(-b // (64 * _MIB)) * 64 * _MIB
            else:
                total += max(4096, 1 << (b - 1).bit_length())
    total += max(8 * _MIB, total // 8)
    total = -(-total // (2 * _MIB)) * 2 * _MIB
    return max(total, 16 * _MIB)


def _data_root():
    """Where default stores make their directories: $XDG_CACHE_HOME/tierstore
    (~/.cache/tierstore), else the temporary directory."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = os.path.join(base, "tierstore")
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        if os.access(root, os.W_OK | os.X_OK):
            return root
    except OSError:
        pass
    return tempfile.gettempdir()


def _data_dir():
    """A new directory for a default store: ROOT/run-PID-XXXX.  Directories
    of processes that are gone are removed first, unless they hold a
    checkpoint (a file KEEP)."""
    root = _data_root()
    try:
        names = os.listdir(root)
    except OSError:
        names = []
    for name in names:
        parts = name.split("-")
        if len(parts) != 3 or parts[0] != "run" or not parts[1].isdigit():
            continue
        path = os.path.join(root, name)
        if os.path.exists(os.path.join(path, "KEEP")) or _alive(int(parts[1])):
            continue
        shutil.rmtree(path, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"run-{os.getpid()}-", dir=root)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True


def _listed(params):
    """params as torch's Optimizer takes them, with every iterable made a
    list (it is read twice: to size the default store, then by torch)."""
    out = []
    for x in params:
        if isinstance(x, dict):
            x = dict(x)
            ps = x.get("params")
            if ps is not None and not isinstance(ps, torch.Tensor):
                x["params"] = list(ps)
        out.append(x)
    return out


def _hyper(g):
    b1, b2 = g["betas"]
    return (float(g["lr"]), float(b1), float(b2), float(g["eps"]), float(g["weight_decay"]))


def _group_params(g):
    gp = _lib.GroupParams.init()
    gp.lr, gp.beta1, gp.beta2, gp.eps, gp.weight_decay = _hyper(g)
    gp.decoupled = True
    return gp


def _check_hyper(where, lr, betas, eps, weight_decay):
    lr = float(lr)
    if not (math.isfinite(lr) and lr >= 0):
        raise ValueError(f"{where}: invalid learning rate {lr}")
    if not float(eps) > 0:
        raise ValueError(f"{where}: invalid epsilon {eps}")
    if len(betas) != 2 or not all(0.0 <= float(b) < 1.0 for b in betas):
        raise ValueError(f"{where}: invalid betas {betas}")
    if not float(weight_decay) >= 0:
        raise ValueError(f"{where}: invalid weight_decay {weight_decay}")


def _host(t, dtype, p, where, off=0, n=None, piece=False):
    """Elements [off, off + n) of t (p's numel; or t is that piece already)
    as a contiguous flat host tensor of dtype."""
    if n is None:
        n = p.numel()
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"TierAdamW.load_state_dict: {where} is a {type(t).__name__}")
    want = n if piece else p.numel()
    if t.numel() != want:
        raise ValueError(f"TierAdamW.load_state_dict: {where} has {t.numel()} elements, "
                         + (f"the piece {n}" if piece else f"the parameter {p.numel()}"))
    flat = t.detach().to(device="cpu", dtype=dtype).reshape(-1)
    if not piece:
        flat = flat[off:off + n]
    return flat.contiguous()


def _join_pieces(pieces, params):
    """The full state dict from every rank's partitioned state_dict()
    (consolidate_state_dict): each parameter's pieces in order, which must
    cover it exactly."""
    state = {}
    for idx in sorted(set().union(*(sd["state"].keys() for sd in pieces))):
        have = sorted((sd["state"][idx] for sd in pieces if idx in sd["state"]),
                      key=lambda st: st["part_off"])
        p = params[idx]
        at = 0
        for st in have:
            if st["part_off"] != at or st["numel"] != p.numel():
                raise RuntimeError(f"TierAdamW.consolidate_state_dict: parameter {idx}: the "
                                   f"ranks' pieces do not cover its {p.numel()} elements "
                                   f"(a piece at {st['part_off']}, expected {at})")
            at += st["part_numel"]
        if at != p.numel():
            raise RuntimeError(f"TierAdamW.consolidate_state_dict: parameter {idx}: the "
                               f"pieces cover {at} of its {p.numel()} elements")
        steps = {float(st["step"]) for st in have}
        if len(steps) != 1:
            raise RuntimeError(f"TierAdamW.consolidate_state_dict: parameter {idx}: the "
                               f"ranks' step counts differ ({sorted(steps)})")
        state[idx] = {"step": have[0]["step"].clone()}
        for k in ("exp_avg", "exp_avg_sq", "master"):
            state[idx][k] = torch.cat([st[k].reshape(-1) for st in have]).view(p.shape)
    ts = {k: v for k, v in pieces[0]["tierstore"].items() if k not in ("rank", "world")}
    return {"state": state, "param_groups": pieces[0]["param_groups"], "tierstore": ts}
