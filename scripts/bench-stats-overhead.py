#!/usr/bin/env python3
"""What publishing the live counters costs the main job.

  scripts/bench-stats-overhead.py ROUNDS BUILD_A BUILD_B [TIER-BENCH STEP OPTIONS...]

BUILD_A has stats (the default build), BUILD_B is configured with
-Dstats=false.  Each round runs `tier-bench step --json` from both, in
alternating order (A B, then B A, ...).  While A runs, `tier-stat -w 1 PID`
reads its segment every second, as an operator would.  Prints each round's
median step time of A and B and the ratio A/B, then the median ratio.

e.g. scripts/bench-stats-overhead.py 7 build-rel build-nostats \\
         --manifest examples/bench-step.yaml --params 89478485 --offload-fraction 1
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run(build, opts, watch, sdir):
    env = dict(os.environ, TIER_STATS_DIR=sdir)
    bench = subprocess.Popen([os.path.join(build, "tools", "tier-bench"), "step", "--json",
                              "--no-progress"] + opts, stdout=subprocess.PIPE, env=env,
                             text=True)
    watcher = None
    lines = 0
    if watch:
        seg = f"tierstore-{bench.pid}-"
        while bench.poll() is None and not any(f.startswith(seg) for f in os.listdir(sdir)):
            time.sleep(0.05)
        if bench.poll() is None:
            watcher = subprocess.Popen([os.path.join(build, "tools", "tier-stat"), "--dir", sdir,
                                        "-w", "1", str(bench.pid)], stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True)
    out, _ = bench.communicate()
    if bench.returncode:
        sys.exit(f"tier-bench step from {build} failed ({bench.returncode})")
    if watcher:
        wout, _ = watcher.communicate(timeout=30)
        lines = wout.count("store '")
    return json.loads(out), lines


def main():
    rounds, a, b, opts = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
    ratios = []
    with tempfile.TemporaryDirectory() as sdir:
        print("round  order  A step_s  B step_s   A/B   (A: stats on, tier-stat -w 1 reports seen)")
        for r in range(1, rounds + 1):
            order = "AB" if r % 2 else "BA"
            res = {}
            for tag in order:
                res[tag] = run(a if tag == "A" else b, opts, tag == "A", sdir)
            ra, rb = res["A"][0]["step_s"], res["B"][0]["step_s"]
            ratios.append(ra / rb)
            print(f"{r:5d}  {order}    {ra:8.4f}  {rb:8.4f}  {ra / rb:6.3f}   ({res['A'][1]} reports)")
            sys.stdout.flush()
    print(f"median A/B {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}) over {rounds} rounds")


if __name__ == "__main__":
    main()
