#!/usr/bin/env python3
"""Trains the digits MLP of train_digits.py once per moment storage (fp32,
bf16 rounded stochastically, bf16 rounded to nearest, and q8 when the
library has it), each time from the same weights with the same batches and
schedule, the optimizer state streaming through an NVMe file over a 1 MiB
DRAM tier; prints each run's final training loss, test accuracy, NVMe bytes
per step and exp_avg_sq against the fp32 run's, and optionally writes the
results as JSON and the loss curves as a PNG (matplotlib).

    python examples/moments_accuracy.py [--steps 300] [--json FILE] [--plot FILE]

docs/kernels.md ("Moment storage") shows the figures and the plot this
made.
"""
import argparse
import copy
import json
import os
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_digits as td  # noqa: E402  (data, mlp, groups, schedule, MANIFEST, step_retrying)

from tierstore.torch import TierAdamW  # noqa: E402  (train_digits puts it on the path)

# (label, moment_dtype, rounding)
VARIANTS = [
    ("fp32", "fp32", "nearest"),
    ("bf16 stochastic", "bf16", "stochastic"),
    ("bf16 nearest", "bf16", "nearest"),
    ("q8 stochastic", "q8", "stochastic"),
    ("q8 nearest", "q8", "nearest"),
]


def train(label, moment, rounding, args, xtr, ytr, xte, yte, workdir):
    model = td.mlp(args.hidden)
    d = os.path.join(workdir, label.replace(" ", "-"))
    os.makedirs(d, exist_ok=True)
    mpath = os.path.join(d, "manifest.yaml")
    with open(mpath, "w") as f:
        f.write(td.MANIFEST.format(path=os.path.abspath(os.path.join(d, "nvme"))))
    try:
        opt = TierAdamW(td.groups(model, args.weight_decay), lr=args.lr, manifest=mpath,
                        dram_capacity=args.dram, scratch=True, moment_dtype=moment,
                        rounding=rounding, seed=args.seed)
    except ValueError as e:
        print(f"{label}: not in this library ({e})")
        return None
    sched = torch.optim.lr_scheduler.LambdaLR(opt, td.schedule(args.steps, args.warmup))
    gen = torch.Generator().manual_seed(1)
    lossf = torch.nn.CrossEntropyLoss()
    curve, rd, wr = [], 0, 0
    try:
        for step in range(1, args.steps + 1):
            idx = torch.randint(0, len(xtr), (args.batch,), generator=gen)
            opt.zero_grad()
            loss = lossf(model(xtr[idx]), ytr[idx])
            loss.backward()
            td.step_retrying(opt, step)
            sched.step()
            curve.append(loss.item())
            rd += opt.last_step["nvme_read_bytes"]
            wr += opt.last_step["nvme_write_bytes"]
        with torch.no_grad():
            res = {"label": label, "moment_dtype": moment, "rounding": rounding,
                   "train_loss": lossf(model(xtr), ytr).item(),
                   "test_acc": (model(xte).argmax(1) == yte).float().mean().item() * 100,
                   "nvme_read_bytes_per_step": rd / args.steps,
                   "nvme_write_bytes_per_step": wr / args.steps,
                   "state_bytes": opt.info()["state_bytes"], "curve": curve}
        sd = opt.state_dict()["state"]
        res["exp_avg_sq"] = torch.cat([sd[k]["exp_avg_sq"].float().flatten()
                                       for k in sorted(sd)])
    finally:
        opt.close()
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--dram", type=int, default=1 << 20, help="DRAM tier, bytes (1 MiB)")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0, help="stochastic rounding's seed")
    ap.add_argument("--only", help="comma-separated runs, by moment dtype ('bf16') or label "
                    "('bf16 stochastic') (default: all)")
    ap.add_argument("--json", help="write the results (without curves' tensors) here")
    ap.add_argument("--plot", help="write the loss curves here (PNG; needs matplotlib)")
    args = ap.parse_args(argv)

    torch.set_num_threads(1)
    xtr, ytr, xte, yte = td.data()
    work = tempfile.mkdtemp(prefix="moments-accuracy-")
    runs = []
    try:
        for label, moment, rounding in VARIANTS:
            if args.only and not {moment, label} & set(args.only.split(",")):
                continue
            r = train(label, moment, rounding, args, xtr, ytr, xte, yte, work)
            if r:
                runs.append(r)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = next((r for r in runs if r["moment_dtype"] == "fp32"), None)
    print(f"{'moments':<16} {'train loss':>11} {'vs fp32':>8} {'test acc':>9} {'vs fp32':>8} "
          f"{'NVMe rd/step':>13} {'wr/step':>10} {'state B':>9} {'v/v_fp32':>9}")
    for r in runs:
        if base:
            r["train_loss_rel"] = r["train_loss"] / base["train_loss"] - 1
            r["test_acc_diff"] = r["test_acc"] - base["test_acc"]
            a, b = r["exp_avg_sq"], base["exp_avg_sq"]
            nz = b > 0
            r["v_ratio_median"] = (a[nz] / b[nz]).median().item()
        print(f"{r['label']:<16} {r['train_loss']:11.6f} {100 * r.get('train_loss_rel', 0):+7.2f}% "
              f"{r['test_acc']:8.2f}% {r.get('test_acc_diff', 0):+8.2f} "
              f"{r['nvme_read_bytes_per_step']:13.0f} {r['nvme_write_bytes_per_step']:10.0f} "
              f"{r['state_bytes']:9d} {r.get('v_ratio_median', 1):9.4f}")
    for r in runs:
        del r["exp_avg_sq"]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"steps": args.steps, "dram": args.dram, "runs": runs}, f)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 7), sharex=True,
                                      gridspec_kw={"height_ratios": [2, 1]})
        k = 10  # moving average over k steps
        for r in runs:
            c = torch.tensor(r["curve"])
            sm = torch.nn.functional.avg_pool1d(c.view(1, 1, -1), k, 1).flatten()
            xs = range(k, len(c) + 1)
            ax.plot(xs, sm.tolist(), label=f"{r['label']} (final {r['train_loss']:.4f})")
            if base:
                b = torch.tensor(base["curve"])
                bs = torch.nn.functional.avg_pool1d(b.view(1, 1, -1), k, 1).flatten()
                ax2.plot(xs, (100 * (sm / bs - 1)).tolist(), label=r["label"])
        ax.set_yscale("log")
        ax.set_ylabel(f"batch loss ({k}-step mean)")
        ax.set_title(f"digits MLP, {args.steps} steps, state through NVMe "
                     f"({runs[0]['state_bytes'] if runs else 0} B over {args.dram} B DRAM)")
        ax.legend()
        ax2.set_ylabel("vs fp32 moments (%)")
        ax2.set_xlabel("step")
        ax2.axhline(0, color="gray", lw=0.5)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)
        print(f"plot: {args.plot}")
    return runs


if __name__ == "__main__":
    main()
