"""One rank of tests/python/test_dist.py, started by torchrun (gloo).

    torchrun --nproc_per_node 2 dist_worker.py OUTDIR [STEPS]

1. The callbacks TierAdamW(process_group=...) gives backend "user"
   (tierstore.torch._ProcessGroupComm), called through their C function
   pointers as the library calls them, table-driven: reduce_scatter (sum,
   average; f32, bf16, f16; uneven counts, a rank with none), allgatherv
   (every dtype, uneven, in place), allreduce (f64, f32), barrier, and a
   bad dtype (the exception kept, -EIO returned).
2. The digits MLP for STEPS steps: each rank trains on its half of every
   batch.  Reference: DistributedDataParallel + torch.optim.AdamW from the
   same initial weights; TierAdamW(process_group=True) on a plain model
   (its reduce-scatter averages the gradients), its state partitioned and
   streamed through an NVMe file over a tiny DRAM tier.  Parameters and the
   final loss must match within 1e-6 relative; the streaming form
   (overlap_backward) must give the plain step's bits (30 steps); every rank must hold the
   same full parameters; consolidate_state_dict() must match torch's
   state; a failing collective must raise its exception chained to the
   library's error.

Each rank writes OUTDIR/rank<R>.json: {"ok": bool, "failures": [...],
"figures": {...}}; test_dist.py judges them.
"""
import copy
import ctypes
import errno
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import train_digits  # noqa: E402
from tierstore import TierError, _lib  # noqa: E402
from tierstore.torch import TierAdamW, _ProcessGroupComm  # noqa: E402

TOL = 1e-6
# The moments against torch's: each model computes its own gradients from
# its own parameters, so their last-bit differences (TierAdamW's kernel is
# not torch's op for op) feed back into the gradients, and the moments
# drift a little more than the parameters (1.1e-6 after 100 steps).
STATE_TOL = 1e-5
# Steps the streaming form runs beside the plain one (bit for bit).
STREAMED_STEPS = 30
DT = {"f64": (_lib.TIER_COMM_F64, torch.float64), "f32": (_lib.TIER_COMM_F32, torch.float32),
      "bf16": (_lib.TIER_COMM_BF16, torch.bfloat16), "f16": (_lib.TIER_COMM_F16, torch.float16)}

failures = []
figures = {}


def fail(msg):
    failures.append(msg)


def rel_err(a, b):
    a, b = a.detach().double().reshape(-1), b.detach().double().reshape(-1)
    scale = b.abs().max().item() if b.numel() else 0.0
    d = (a - b).abs().max().item() if b.numel() else 0.0
    return d / scale if scale > 0 else d


def values(rank, n, dtype, salt=0):
    """Rank `rank`'s n values: small integers, exact in every dtype and
    in any order of summation."""
    g = torch.Generator().manual_seed(1000 * rank + salt)
    return torch.randint(-8, 9, (n,), generator=g).to(dtype)


def buf(t):
    """A host buffer holding t's bytes, and its address."""
    t = t.contiguous()
    return t, (t.data_ptr() if t.numel() else None)


def sizes(counts):
    return (ctypes.c_size_t * len(counts))(*counts)


# ------------------------------------------------------------ 1. callbacks

RS_CASES = [  # dtype, average, counts per rank (world 2)
    ("f32", False, [3, 70]), ("f32", True, [64, 64]), ("bf16", False, [5, 2]),
    ("bf16", True, [33, 7]), ("f16", True, [0, 9]), ("f16", False, [12, 0]),
]
AG_CASES = [  # dtype, counts, in place
    ("f32", [3, 70], False), ("f32", [64, 0], True), ("f64", [5, 6], True),
    ("bf16", [7, 1], False), ("f16", [0, 4], True),
]


def check_callbacks(rank, world):
    comm = _ProcessGroupComm.open(True)
    assert comm is not None and comm.world == world and comm.rank == rank
    lib = _lib.lib()
    if lib.tier_comm_backend(comm.handle) != b"user":
        fail(f"backend {lib.tier_comm_backend(comm.handle)!r}, want b'user'")
    if (lib.tier_comm_rank(comm.handle), lib.tier_comm_size(comm.handle)) != (rank, world):
        fail("tier_comm_rank/size disagree with the process group")
    rs, ag, ar, barrier = comm._fns

    for k, (name, avg, counts) in enumerate(RS_CASES):
        code, dt = DT[name]
        counts = counts[:world] + [counts[-1]] * (world - len(counts))
        total, off, n = sum(counts), sum(counts[:rank]), counts[rank]
        send, sp = buf(values(rank, total, dt, k))
        recv, rp = buf(torch.full((n,), 99, dtype=dt))
        rc = rs(None, sp, rp, sizes(counts), code, int(avg))
        want = sum(values(r, total, dt, k).float() for r in range(world))[off:off + n]
        if avg:
            want = want / world
        want = want.to(dt)
        if rc != 0 or not torch.equal(recv, want):
            fail(f"reduce_scatter {name} {'avg' if avg else 'sum'} {counts}: rc {rc}, "
                 f"got {recv[:6].tolist()}, want {want[:6].tolist()} ({comm.error!r})")
        if not torch.equal(send, values(rank, total, dt, k)):
            fail(f"reduce_scatter {name}: the send buffer changed")

    for k, (name, counts, in_place) in enumerate(AG_CASES):
        code, dt = DT[name]
        counts = counts[:world] + [counts[-1]] * (world - len(counts))
        total, off, n = sum(counts), sum(counts[:rank]), counts[rank]
        recv = torch.full((total,), -1, dtype=dt)
        mine = values(rank, n, dt, 50 + k)
        if in_place:
            recv[off:off + n] = mine
            sp = recv.data_ptr() + off * recv.element_size() if total else None
        else:
            mine, sp = buf(mine)
        rc = ag(None, sp, recv.data_ptr() if total else None, sizes(counts), code)
        want = torch.cat([values(r, counts[r], dt, 50 + k) for r in range(world)])
        if rc != 0 or not torch.equal(recv, want):
            fail(f"allgatherv {name} {counts} {'in place' if in_place else ''}: rc {rc}, "
                 f"got {recv[:8].tolist()} want {want[:8].tolist()} ({comm.error!r})")

    for name in ("f64", "f32"):
        code, dt = DT[name]
        x = values(rank, 100, dt, 7) + (1e9 if name == "f64" else 0)
        rc = ar(None, x.data_ptr(), 100, code)
        want = sum(values(r, 100, dt, 7) + (1e9 if name == "f64" else 0)
                   for r in range(world))
        if rc != 0 or not torch.equal(x, want):
            fail(f"allreduce {name}: rc {rc}, got {x[:4].tolist()} want {want[:4].tolist()}")
    if ar(None, None, 0, _lib.TIER_COMM_F32) != 0:
        fail("allreduce of 0 elements failed")

    if barrier(None) != 0:
        fail(f"barrier failed: {comm.error!r}")

    # A bad dtype: the callback raises inside; -EIO comes back, the
    # exception is kept (and nothing crossed into C).
    x = torch.zeros(4)
    rc = ar(None, x.data_ptr(), 4, 9)
    e = comm.take_error()
    if rc != -errno.EIO or not isinstance(e, ValueError) or "element type 9" not in str(e):
        fail(f"a callback that raises: rc {rc}, kept {e!r}")
    if comm.take_error() is not None:
        fail("take_error() did not forget the exception")
    if comm.calls["reduce_scatter"] != len(RS_CASES):
        fail(f"calls {comm.calls}")
    comm.close()
    figures["callbacks"] = "ok"


# ----------------------------------------------------------- 2. training

MANIFEST = """version: 1
name: dist-{rank}
gpu:
  device: none
dram:
  capacity: 4MiB
nvme:
  paths:
    - path: {path}/
      capacity: 64MiB
      create: true
optimizer:
  shard_size: 64KiB
  moment_dtype: fp32
  offload_fraction: 1
"""


def groups(model):
    return [{"params": [p for n, p in model.named_parameters() if n.endswith("weight")],
             "weight_decay": 0.05},
            {"params": [p for n, p in model.named_parameters() if n.endswith("bias")],
             "weight_decay": 0.0}]


class Failing:
    """torch.distributed with collectives that raise (the injected fault)."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def _boom(self, *a, **k):
        raise RuntimeError("injected collective failure")

    all_reduce = all_gather = barrier = _boom


def train(rank, world, outdir, steps):
    xtr, ytr, _, _ = train_digits.data()
    model = train_digits.mlp(256, seed=0)
    ref = copy.deepcopy(model)
    streamed = copy.deepcopy(model)
    ddp = torch.nn.parallel.DistributedDataParallel(ref)
    ropt = torch.optim.AdamW(groups(ref), lr=2e-3)
    mpaths = []
    for kind in ("", "-streamed"):
        d = os.path.join(outdir, f"rank{rank}{kind}")
        os.makedirs(d, exist_ok=True)
        mpaths.append(os.path.join(d, "m.yaml"))
        with open(mpaths[-1], "w") as f:
            f.write(MANIFEST.format(rank=rank, path=os.path.join(d, "nvme")))
    mpath = mpaths[0]
    opt = TierAdamW(groups(model), lr=2e-3, manifest=mpath, dram_capacity=256 << 10,
                    process_group=True)
    # The streaming form: each hook pushes its gradient during backward
    # (the library posts the reduce-scatters in an order the ranks agree on).
    sopt = TierAdamW(groups(streamed), lr=2e-3, manifest=mpaths[1],
                     dram_capacity=256 << 10, process_group=True, overlap_backward=True,
                     scratch=True)
    info = opt.info()
    figures["info"] = {k: info[k] for k in ("rank", "world", "part_elems", "total_elems",
                                            "state_bytes")}
    if (info["rank"], info["world"], opt.rank, opt.world) != (rank, world, rank, world):
        fail(f"info rank/world {info['rank']}/{info['world']}, want {rank}/{world}")
    parts = torch.tensor([info["part_elems"]], dtype=torch.float64)
    dist.all_reduce(parts)
    if int(parts.item()) != info["total_elems"]:
        fail(f"the ranks' pieces sum to {int(parts.item())}, total {info['total_elems']}")
    lossf = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(3)
    batch, half = 64, 32
    nvme = 0
    for step in range(steps):
        idx = torch.randint(0, len(xtr), (batch,), generator=gen)[rank * half:(rank + 1) * half]
        x, y = xtr[idx], ytr[idx]
        ropt.zero_grad()
        lossf(ddp(x), y).backward()
        ropt.step()
        opt.zero_grad()
        lossf(model(x), y).backward()
        opt.step()
        nvme += opt.last_step["nvme_read_bytes"]
        if step < STREAMED_STEPS:
            sopt.zero_grad()
            lossf(streamed(x), y).backward()
            sopt.step()
        if step == STREAMED_STEPS - 1:
            for (n, a), b in zip(streamed.named_parameters(), model.parameters()):
                if not torch.equal(a, b):
                    fail(f"step {step + 1}: parameter {n}: the streaming form differs from "
                         f"the plain step ({rel_err(a, b):.3g})")
            sopt.close()
    last = opt.last_step
    figures["last_step"] = {k: last[k] for k in ("rank", "world", "collectives", "comm_bytes",
                                                 "step", "applied")}
    figures["nvme_read_bytes"] = nvme
    if (last["rank"], last["world"]) != (rank, world) or last["collectives"] < 2 \
            or last["comm_bytes"] <= 0 or last["step"] != steps:
        fail(f"last_step {figures['last_step']}")
    if nvme <= 0:
        fail("no state was read from NVMe: the DRAM tier is not small enough")

    worst = 0.0
    for (n, tp), rp in zip(model.named_parameters(), ref.parameters()):
        e = rel_err(tp, rp)
        worst = max(worst, e)
        if e > TOL:
            fail(f"parameter {n}: relative error {e:.3g} against DDP + AdamW")
        # Every rank holds the same full parameter (the all-gathered output).
        r0 = tp.detach().clone()
        dist.broadcast(r0, 0)
        if not torch.equal(r0, tp.detach()):
            fail(f"parameter {n} differs from rank 0's")
    figures["param_rel_err"] = worst
    with torch.no_grad():
        lt = lossf(model(xtr), ytr).item()
        lr_ = lossf(ref(xtr), ytr).item()
    figures["loss"], figures["ref_loss"] = lt, lr_
    if abs(lt - lr_) > TOL * abs(lr_):
        fail(f"final loss {lt!r}, DDP + AdamW {lr_!r}")
    if lt > 0.5:
        fail(f"the model did not train (loss {lt})")

    # The state: consolidated on rank 0 against torch's.
    full = opt.consolidate_state_dict(to=0)
    if rank == 0:
        worst_s = 0.0
        rparams = [p for g in ropt.param_groups for p in g["params"]]
        tparams = [p for g in opt.param_groups for p in g["params"]]
        for i, (rp, tp) in enumerate(zip(rparams, tparams)):
            rs, ts = ropt.state[rp], full["state"][i]
            if int(ts["step"]) != int(rs["step"]):
                fail(f"state {i}: step {ts['step']} vs {rs['step']}")
            for k in ("exp_avg", "exp_avg_sq"):
                e = rel_err(ts[k], rs[k])
                worst_s = max(worst_s, e)
                if e > STATE_TOL:
                    fail(f"consolidated state {i} {k}: relative error {e:.3g}")
            # fp32 parameters: the master weights are the parameter's bits.
            if not torch.equal(ts["master"], tp.detach()):
                fail(f"consolidated state {i}: master differs from the parameter")
        figures["state_rel_err"] = worst_s
    elif full is not None:
        fail("consolidate_state_dict returned a state dict on a rank other than `to`")
    # Each rank's own piece loads back; a full dict loads as pieces.
    mine = opt.state_dict()
    objs = [full]
    dist.broadcast_object_list(objs, src=0)
    opt.load_state_dict(objs[0])
    again = opt.state_dict()
    for i, st in mine["state"].items():
        for k in ("exp_avg", "exp_avg_sq", "master"):
            if not torch.equal(st[k], again["state"][i][k]):
                fail(f"state {i} {k}: the consolidated dict loaded back differs")

    # Another rank's piece is refused, naming both ranges.
    objs = [None] * world
    dist.all_gather_object(objs, mine)
    try:
        opt.load_state_dict(objs[(rank + 1) % world])
        fail("rank {rank} loaded another rank's piece")
    except ValueError as e:
        if "the state dict holds elements [" not in str(e) or f"rank {rank} of {world} keeps" \
                not in str(e):
            fail(f"loading another rank's piece: {e!r}")

    # A checkpoint (collective), and the run resumed from it over a model of
    # other weights: every rank's parameters get every rank's pieces.
    opt.checkpoint()
    opt.close()
    model2 = train_digits.mlp(256, seed=1)
    opt = TierAdamW.resume(groups(model2), manifest=mpath, dram_capacity=256 << 10,
                           process_group=True)
    for (n, a), b in zip(model2.named_parameters(), model.parameters()):
        if not torch.equal(a, b):
            fail(f"resumed parameter {n} differs from the checkpointed one")
    again = opt.state_dict()
    for i, st in mine["state"].items():
        for k in ("exp_avg", "exp_avg_sq", "master", "step"):
            if not torch.equal(st[k], again["state"][i][k]):
                fail(f"resumed state {i} {k} differs from the checkpointed piece")
    if opt.world != world or opt.param_step(next(model2.parameters())) != steps:
        fail(f"resumed: world {opt.world}, step {opt.param_step(next(model2.parameters()))}")
    model = model2

    # A collective that fails: its exception, chained to the library's error.
    opt._comm._dist = Failing(dist)
    opt.zero_grad()
    lossf(model(xtr[:8]), ytr[:8]).backward()
    try:
        opt.step()
        fail("a step whose collective failed did not raise")
    except RuntimeError as e:
        cause = e.__cause__
        named = f"on rank {rank} of {world} (user)"
        if "injected collective failure" not in str(e) or not isinstance(cause, TierError) \
                or cause.errno != errno.EIO or named not in str(cause):
            fail(f"a failed collective raised {e!r} caused by {cause!r}")
        figures["failed_step"] = str(cause)
    try:
        opt.close()
        fail("closing after a failed collective did not report the broken comm")
    except TierError as e:
        if e.errno != errno.EPIPE:
            fail(f"close after a failed collective: {e!r}")


def main():
    outdir = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    phases = sys.argv[3].split(",") if len(sys.argv) > 3 else ["callbacks", "train"]
    try:
        if "callbacks" in phases:
            check_callbacks(rank, world)
        if "train" in phases:
            train(rank, world, outdir, steps)
    except BaseException:
        fail(traceback.format_exc())
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump({"ok": not failures, "failures": failures, "figures": figures}, f, indent=1)
    # No barrier at the end: a rank that failed may have left the others
    # inside a collective; the process group's timeout and torchrun end them.
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
