"""TierAdamW(process_group=...) on two ranks, launched by torchrun (gloo).

dist_worker.py is each rank: the backend "user" callbacks over
torch.distributed, then the digits MLP trained on half a batch per rank
against DistributedDataParallel + torch.optim.AdamW (parameters and final
loss within 1e-6 relative), the state partitioned and streamed through NVMe.
torchrun is run as `python -m torch.distributed.run` of this interpreter
(the `torchrun` on PATH may be another Python's).  meson runs this file
alone as the test `python-dist`; the `python` test leaves it out.
"""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
pytest.importorskip("sklearn")

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "dist_worker.py")
STEPS = 100
WORLD = 2


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                    reason="torch.distributed without gloo")
def test_two_ranks_match_ddp(scratch):
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    # --redirects 1 --tee 2: the workers' stdout to torchrun's log files, their
    # stderr also here.  (torch 1.13's torchrun cannot parse the default "0"
    # under Python 3.11's enum.)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node", str(WORLD), "--redirects", "1", "--tee", "2",
           "--log_dir", os.path.join(scratch, "logs"), WORKER, scratch, str(STEPS)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=110)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun did not finish in 110 s: {e.stderr!r}")
    results = {}
    for r in range(WORLD):
        f = os.path.join(scratch, f"rank{r}.json")
        assert os.path.exists(f), \
            f"rank {r} wrote no result (torchrun exit {proc.returncode}):\n{proc.stderr[-6000:]}"
        with open(f) as fh:
            results[r] = json.load(fh)
    for r, res in results.items():
        assert res["ok"], f"rank {r}:\n" + "\n".join(res["failures"])
    assert proc.returncode == 0, proc.stderr[-6000:]
    fig = results[0]["figures"]
    print(json.dumps({r: res["figures"] for r, res in results.items()}, indent=1))
    # What the workers measured, seen from here too.
    assert fig["param_rel_err"] <= 1e-6
    assert abs(fig["loss"] - fig["ref_loss"]) <= 1e-6 * abs(fig["ref_loss"])
    assert results[0]["figures"]["info"]["total_elems"] == \
        sum(res["figures"]["info"]["part_elems"] for res in results.values())
