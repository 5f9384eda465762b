#!/usr/bin/env python3
"""TierAdamW with CUDA parameters and gradients (TIER_MEM_DEVICE) against
torch.optim.AdamW, on a manifest with the GPU's HBM tier and both lanes
(offload_fraction 0.5): 100 steps of the digits MLP fed the same gradients,
state through NVMe; parameters and moments within 1e-6 of torch's relative
to each tensor's largest absolute value; then the streaming form
(overlap_backward) gives the bits of the plain step.

Exits 77 (SKIP) without torch, without CUDA in torch, or without a GPU the
library can use.  Run with TIERSTORE_LIBRARY and PYTHONPATH set (meson test
--suite gpu, or tests/gpu/run.sh).
"""
import copy
import math
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


try:
    import torch
except ImportError:
    skip("no torch")
if not torch.cuda.is_available():
    skip("torch has no CUDA device")
import tierstore  # noqa: E402
from tierstore.torch import TierAdamW  # noqa: E402

n, why = tierstore.gpu_count()
if n == 0:
    skip(f"the library sees no GPU: {why}")

try:
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import train_digits  # noqa: E402  (needs scikit-learn)
except ImportError as e:
    skip(f"examples/train_digits.py cannot be imported: {e}")


def rel_err(a, b):
    """max |a - b| over max |b|."""
    a, b = a.detach().float().reshape(-1), b.detach().float().reshape(-1)
    scale = b.abs().max().item()
    d = (a - b).abs().max().item()
    return d / scale if scale > 0 else d


def groups(model, wd_weight, wd_bias):
    return [{"params": [p for n, p in model.named_parameters() if n.endswith("weight")],
             "weight_decay": wd_weight},
            {"params": [p for n, p in model.named_parameters() if n.endswith("bias")],
             "weight_decay": wd_bias}]

MANIFEST = """version: 1
name: pygpu
gpu:
  device: 0
  capacity: 64MiB
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
  offload_fraction: 0.5
"""


def main():
    base = os.environ.get("TIER_TEST_TMPDIR") or None
    if base:
        os.makedirs(base, exist_ok=True)
    d = tempfile.mkdtemp(prefix="py-gpu-", dir=base)
    fails = 0
    try:
        xtr, ytr, _, _ = train_digits.data()
        ref = train_digits.mlp(256)
        model = copy.deepcopy(ref).cuda()
        man = tierstore.Manifest.from_text(MANIFEST.format(path=os.path.join(d, "a")))
        steps = 100
        ropt = torch.optim.AdamW(groups(ref, 0.1, 0.01), lr=2e-3, foreach=False)
        opt = TierAdamW(groups(model, 0.1, 0.01), lr=2e-3, manifest=man,
                        dram_capacity=256 << 10)
        print("info:", opt.info())
        rs = torch.optim.lr_scheduler.LambdaLR(ropt, train_digits.schedule(steps, 10))
        ts = torch.optim.lr_scheduler.LambdaLR(opt, train_digits.schedule(steps, 10))
        gen = torch.Generator().manual_seed(3)
        lossf = torch.nn.CrossEntropyLoss()
        rparams = [p for g in ropt.param_groups for p in g["params"]]
        tparams = [p for g in opt.param_groups for p in g["params"]]
        gpu_shards = 0
        with opt:
            for _ in range(steps):
                idx = torch.randint(0, len(xtr), (64,), generator=gen)
                ropt.zero_grad()
                lossf(ref(xtr[idx]), ytr[idx]).backward()
                for tp, rp in zip(tparams, rparams):
                    tp.grad = rp.grad.cuda()
                ropt.step()
                opt.step()
                rs.step()
                ts.step()
                gpu_shards += opt.last_step["gpu_shards"]
            sd = opt.state_dict()
            worst = {}
            for i, (tp, rp) in enumerate(zip(tparams, rparams)):
                errs = {"param": rel_err(tp.cpu(), rp),
                        "exp_avg": rel_err(sd["state"][i]["exp_avg"], ropt.state[rp]["exp_avg"]),
                        "exp_avg_sq": rel_err(sd["state"][i]["exp_avg_sq"],
                                              ropt.state[rp]["exp_avg_sq"])}
                for k, e in errs.items():
                    worst[k] = max(worst.get(k, 0.0), e)
                    if e > 1e-6:
                        print(f"FAIL: parameter {i}: {k}: relative error {e:.3g}")
                        fails += 1
        print(f"CUDA parity after {steps} steps: largest relative errors {worst}; "
              f"{gpu_shards} shards updated on the GPU lane")
        if gpu_shards == 0:
            print("FAIL: no shard was updated on the GPU lane")
            fails += 1

        # The streaming form with CUDA tensors: the bits of the plain step.
        torch.manual_seed(4)
        batches = [(torch.randn(32, 64).cuda(), torch.randint(0, 10, (32,)).cuda())
                   for _ in range(10)]
        out = []
        for k, overlap in enumerate((False, True)):
            m = copy.deepcopy(ref).cuda()
            man = tierstore.Manifest.from_text(MANIFEST.format(path=os.path.join(d, f"o{k}")))
            with TierAdamW(m.parameters(), lr=1e-3, manifest=man,
                           overlap_backward=overlap) as o:
                for x, y in batches:
                    o.zero_grad()
                    lossf(m(x), y).backward()
                    o.step()
            out.append([p.detach().cpu() for p in m.parameters()])
        for i, (a, b) in enumerate(zip(*out)):
            if not torch.equal(a, b):
                print(f"FAIL: overlap_backward: parameter {i} differs from the plain step")
                fails += 1
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("PASS" if fails == 0 else f"{fails} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
