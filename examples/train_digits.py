#!/usr/bin/env python3
"""Trains a small MLP on scikit-learn's digits with tierstore's TierAdamW,
its optimizer state streaming through an NVMe file several times larger than
its DRAM tier, and beside it, from the same initial weights and the same
batches, with torch.optim.AdamW; prints both losses as they go, the NVMe
bytes each step moved, and at the end both final training losses and test
accuracies.

    python examples/train_digits.py [--steps 300] [--data DIR] [--dram BYTES]

The model is 64 -> 512 -> 512 -> 10 by default (301,066 parameters: 3.6 MB of fp32
state, 12 bytes a parameter) over a DRAM tier of 1 MiB, so every step reads
and writes most of the state on NVMe.  Two parameter groups (weights with
weight decay, biases without) and a cosine schedule with a linear warm-up
from lr 0 (LambdaLR).  The dataset ships with scikit-learn: no download.
--data is the directory of the NVMe file (default: a temporary directory,
removed at the end).
"""
import argparse
import copy
import errno
import json
import math
import os
import shutil
import sys
import tempfile

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

try:
    from tierstore import TierError
    from tierstore.torch import TierAdamW
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    from tierstore import TierError
    from tierstore.torch import TierAdamW

# A step that fails part way with an error that may pass (an I/O error that
# outlasted the NVMe tier's own retries, a timeout, an interrupted call) is
# completed by calling step() again with the same gradients, before the
# scheduler or anything else touches the optimizer: the state then ends bit
# for bit as if it had not failed (docs/optimizer.md, "A step that fails").
# Any other error is raised at once.
TRANSIENT = {errno.EIO, errno.ETIMEDOUT, errno.EILSEQ, errno.EAGAIN, errno.EINTR}
STEP_TRIES = 3


def step_retrying(opt, step):
    """opt.step(), called again while it raises a TierError whose errno is
    transient, up to STEP_TRIES calls in all; each retry is said on stderr.
    Any optimizer: a torch one never raises TierError."""
    for tries in range(1, STEP_TRIES + 1):
        try:
            return opt.step()
        except TierError as e:
            if e.errno not in TRANSIENT or tries == STEP_TRIES:
                raise
            print(f"step {step} failed with a transient error "
                  f"({errno.errorcode.get(e.errno, e.errno)}: {e.strerror}); running it "
                  f"again with the same gradients (try {tries + 1} of {STEP_TRIES})",
                  file=sys.stderr)

MANIFEST = """version: 1
name: train-digits
gpu:
  device: none
dram:
  capacity: 64MiB       # the optimizer's store overrides it (--dram)
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


def data(seed=0):
    x, y = load_digits(return_X_y=True)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)
    sc = StandardScaler().fit(xtr)
    f = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    return (f(sc.transform(xtr)), torch.tensor(ytr), f(sc.transform(xte)), torch.tensor(yte))


def mlp(hidden=512, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(64, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10))


def groups(model, weight_decay):
    """Weights with weight decay, biases without."""
    return [{"params": [p for n, p in model.named_parameters() if n.endswith("weight")],
             "weight_decay": weight_decay},
            {"params": [p for n, p in model.named_parameters() if n.endswith("bias")],
             "weight_decay": 0.0}]


def schedule(steps, warmup):
    """Linear warm-up from 0, then cosine to 0."""
    def f(s):
        if s < warmup:
            return s / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (s - warmup) / max(1, steps - warmup))))
    return f


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--data", help="directory of the NVMe file (default: a temporary one)")
    ap.add_argument("--dram", type=int, default=1 << 20, help="DRAM tier, bytes (1 MiB)")
    ap.add_argument("--hidden", type=int, default=512, help="hidden width (512)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--every", type=int, default=25, help="print every N steps")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of results")
    args = ap.parse_args(argv)

    torch.set_num_threads(1)
    xtr, ytr, xte, yte = data()
    model = mlp(args.hidden)
    ref = copy.deepcopy(model)
    nparams = sum(p.numel() for p in model.parameters())
    tmp = None
    d = args.data
    if d is None:
        d = tmp = tempfile.mkdtemp(prefix="train-digits-")
    os.makedirs(d, exist_ok=True)
    mpath = os.path.join(d, "manifest.yaml")
    with open(mpath, "w") as f:
        f.write(MANIFEST.format(path=os.path.abspath(os.path.join(d, "nvme"))))

    opt = TierAdamW(groups(model, args.weight_decay), lr=args.lr, manifest=mpath,
                    dram_capacity=args.dram, scratch=True)
    ropt = torch.optim.AdamW(groups(ref, args.weight_decay), lr=args.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule(args.steps, args.warmup))
    rsched = torch.optim.lr_scheduler.LambdaLR(ropt, schedule(args.steps, args.warmup))
    info = opt.info()
    print(f"digits: {len(xtr)} train / {len(xte)} test; MLP of {nparams} parameters; "
          f"optimizer state {info['state_bytes']} B over a DRAM tier of {args.dram} B "
          f"({info['state_bytes'] / args.dram:.1f}x), NVMe under {d}")
    print(f"{'step':>5} {'lr':>9} {'loss tier':>10} {'loss torch':>10} "
          f"{'nvme read/step':>15} {'nvme write/step':>16}")
    gen = torch.Generator().manual_seed(1)
    lossf = torch.nn.CrossEntropyLoss()
    rd = wr = 0
    try:
        for step in range(1, args.steps + 1):
            idx = torch.randint(0, len(xtr), (args.batch,), generator=gen)
            xb, yb = xtr[idx], ytr[idx]
            losses = []
            for m, o, s in ((model, opt, sched), (ref, ropt, rsched)):
                o.zero_grad()
                loss = lossf(m(xb), yb)
                loss.backward()
                step_retrying(o, step)
                s.step()
                losses.append(loss.item())
            rd += opt.last_step["nvme_read_bytes"]
            wr += opt.last_step["nvme_write_bytes"]
            if step % args.every == 0 or step == 1 or step == args.steps:
                print(f"{step:5d} {sched.get_last_lr()[0]:9.2e} {losses[0]:10.5f} "
                      f"{losses[1]:10.5f} {opt.last_step['nvme_read_bytes']:15d} "
                      f"{opt.last_step['nvme_write_bytes']:16d}")
        with torch.no_grad():
            res = {}
            for name, m in (("tier", model), ("torch", ref)):
                res[f"{name}_train_loss"] = lossf(m(xtr), ytr).item()
                res[f"{name}_test_acc"] = (m(xte).argmax(1) == yte).float().mean().item() * 100
        res["steps"] = args.steps
        res["nvme_read_bytes_per_step"] = rd / args.steps
        res["nvme_write_bytes_per_step"] = wr / args.steps
        res["state_bytes"] = info["state_bytes"]
        res["dram_bytes"] = args.dram
        rel = abs(res["tier_train_loss"] - res["torch_train_loss"]) / res["torch_train_loss"]
        res["train_loss_rel_diff"] = rel
        print(f"final training loss: TierAdamW {res['tier_train_loss']:.6f}, "
              f"torch.optim.AdamW {res['torch_train_loss']:.6f} (relative difference {rel:.2e})")
        print(f"test accuracy: TierAdamW {res['tier_test_acc']:.2f}%, "
              f"torch.optim.AdamW {res['torch_test_acc']:.2f}% "
              f"(difference {res['tier_test_acc'] - res['torch_test_acc']:+.2f} points)")
        print(f"NVMe per step: {res['nvme_read_bytes_per_step']:.0f} B read, "
              f"{res['nvme_write_bytes_per_step']:.0f} B written "
              f"(state {info['state_bytes']} B, DRAM {args.dram} B)")
        if args.json:
            print(json.dumps(res))
    finally:
        opt.close()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
