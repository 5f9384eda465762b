#!/usr/bin/python3
"""What TierAdamW's defaults and its staging cost, measured side by side.

    TIERSTORE_LIBRARY=build/libtierstore.so PYTHONPATH=python \\
        /usr/bin/python3 scripts/bench_torch.py [--rounds 7]

1. The default store (no manifest): time to construct TierAdamW for a
   110-parameter and a 1M-parameter model, memory locked (VmLck) after
   construction, files left in the working directory and under the cache
   after close().
2. Non-contiguous parameters (channels_last convolutions), which each step
   stages through a row-major copy: the step's time over the same model
   with contiguous parameters, in alternating rounds; the median of the
   per-round ratios.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

from tierstore.torch import TierAdamW


def vmlck_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmLck:"):
                return int(line.split()[1])
    return 0


def defaults(rounds):
    cwd = tempfile.mkdtemp(prefix="bench-cwd-")
    cache = tempfile.mkdtemp(prefix="bench-cache-")
    os.environ["XDG_CACHE_HOME"] = cache
    os.environ.pop("TIER_MANIFEST", None)
    os.environ.pop("TIER_DATA", None)
    old = os.getcwd()
    os.chdir(cwd)
    try:
        for name, m in (("110 parameters", torch.nn.Linear(10, 10)),
                        ("1M parameters", torch.nn.Linear(1000, 1000))):
            times, locked = [], []
            for _ in range(rounds):
                before = vmlck_kib()
                t = time.perf_counter()
                opt = TierAdamW(m.parameters(), lr=1e-3)
                times.append(time.perf_counter() - t)
                locked.append(vmlck_kib() - before)
                opt.close()
            left = len(os.listdir(cwd)) + sum(len(fs) for _, _, fs in os.walk(cache))
            print(f"default store, {name}: construct median {statistics.median(times):.3f} s "
                  f"(min {min(times):.3f}, max {max(times):.3f}), locked "
                  f"{statistics.median(locked) / 1024:.1f} MiB, files left after close: {left}")
    finally:
        os.chdir(old)


def conv_model(channels_last):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(16, 64, 3), torch.nn.ReLU(),
                            torch.nn.Conv2d(64, 64, 3), torch.nn.ReLU(),
                            torch.nn.Conv2d(64, 16, 3))
    if channels_last:
        m = m.to(memory_format=torch.channels_last)
    return m


def staging(rounds, steps=20):
    with tempfile.TemporaryDirectory() as d:
        os.environ["XDG_CACHE_HOME"] = d
        setups = {}
        for cl in (False, True):
            m = conv_model(cl)
            setups[cl] = (m, TierAdamW(m.parameters(), lr=1e-3))
            for p in m.parameters():
                p.grad = torch.randn_like(p)
            setups[cl][1].step()                  # warm
        ratios = []
        for _ in range(rounds):
            t = {}
            for cl in (False, True):
                m, opt = setups[cl]
                t0 = time.perf_counter()
                for _ in range(steps):
                    opt.step()
                t[cl] = (time.perf_counter() - t0) / steps
            ratios.append(t[True] / t[False])
        n = sum(p.numel() for p in setups[True][0].parameters())
        print(f"channels_last step / contiguous step ({n} parameters, {steps} steps a round, "
              f"{rounds} rounds): median ratio {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
        for m, opt in setups.values():
            opt.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    defaults(a.rounds)
    staging(a.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
