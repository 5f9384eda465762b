#!/usr/bin/env python3
"""step-figures.py - issue 21's table from `tier-bench step --json` runs
(tests/gpu/figures.sh writes them, one JSON object per line).

    step-figures.py RUNS.jsonl

A row per run, in the order run: the regime (hbm: no NVMe; nvme), where the
gradients were, the offload fraction asked for, the median step time, the
bound and efficiency = bound / step time, what bound it, the link or
NVMe rates measured in the run.  For `auto` the step time is the median of
the steps after its choosing (steps 5 onwards: step 1 measures at 0.5 and
steps 2-4 try the candidates), and the split it kept is shown.  Then, per
round (a round is one run of each configuration, in order), auto's step
time over the better of all-CPU and all-GPU, and the medians.
Python 3 standard library only."""
import json
import statistics
import sys


def key(j):
    return (j.get("regime") or "nvme", j["grads"], j["offload_fraction"])


def step_time(j):
    s = j["steps"]["step_s"]
    if j["offload_fraction"] == "auto" and len(s) > 4:
        return statistics.median(s[4:])
    return j["step_s"]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: step-figures.py RUNS.jsonl")
    rows = []
    with open(sys.argv[1]) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as e:
                    sys.exit("%s:%d: not JSON: %s" % (sys.argv[1], n, e))
    if not rows:
        sys.exit("step-figures.py: %s: no runs" % sys.argv[1])
    print("regime grads   F     step_s   bound_s  eff    by      rate_in  rate_out  cpu_frac  hbm")
    by_key = {}
    for j in rows:
        t = step_time(j)
        eff = j["bound_s"] / t if t > 0 else 0.0
        if j.get("regime") == "hbm":  # both directions at once where measured
            l = j["link"]
            rin, rout = l.get("h2d_both_GBps", l["h2d_GBps"]), l.get("d2h_both_GBps", l["d2h_GBps"])
        else:
            rin, rout = j["read_GBps"], j["write_GBps"]
        print("%-6s %-7s %-5s %8.4f %8.4f  %.3f  %-6s  %7.2f  %8.2f  %8.3f  %s" % (
            j.get("regime") or "nvme", j["grads"], j["offload_fraction"], t,
            j["bound_s"], eff, j["bound_by"], rin, rout, j.get("offload_fraction", j.get("cpu_fraction")),
            j["hbm_backend"]))
        by_key.setdefault(key(j), []).append((t, eff))
    print()
    print("median over rounds:")
    for k, v in by_key.items():
        print("  %-4s grads %-7s F %-5s  step %.4f s  efficiency %.3f  (%d runs, efficiency %.3f-%.3f)" % (
            k[0], k[1], k[2], statistics.median(t for t, _ in v),
            statistics.median(e for _, e in v), len(v),
            min(e for _, e in v), max(e for _, e in v)))
    cpu = [t for t, _ in by_key.get(("nvme", "device", "1"), by_key.get(("nvme", "host", "1"), []))]
    gpu = [t for t, _ in by_key.get(("nvme", "device", "0"), by_key.get(("nvme", "host", "0"), []))]
    aut = [t for t, _ in by_key.get(("nvme", "device", "auto"), by_key.get(("nvme", "host", "auto"), []))]
    n = min(len(cpu), len(gpu), len(aut))
    if n:
        ratios = [aut[i] / min(cpu[i], gpu[i]) for i in range(n)]
        print("auto / better of all-CPU and all-GPU, per round: %s; median %.3f" % (
            " ".join("%.3f" % r for r in ratios), statistics.median(ratios)))


if __name__ == "__main__":
    main()
