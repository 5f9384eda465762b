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
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun did not finish in 150 s: {e.stderr!r}")
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


def test_process_group_needs_init(manifest):
    """process_group without torch.distributed initialised: a ValueError
    before anything is opened."""
    if dist.is_initialized():
        pytest.skip("torch.distributed is initialised in this process")
    from tierstore.torch import TierAdamW
    p = torch.nn.Parameter(torch.zeros(8))
    with pytest.raises(ValueError, match="torch.distributed is not initialized"):
        TierAdamW([p], manifest=manifest, process_group=True)


def test_group_of_one_is_not_partitioned(manifest, scratch):
    """A group of one rank: TierAdamW as on one rank (no comm), and a step
    matches torch.optim.AdamW."""
    from tierstore.torch import TierAdamW
    if dist.is_initialized():
        pytest.skip("torch.distributed is initialised in this process")
    dist.init_process_group("gloo", init_method="file://" + os.path.join(scratch, "pg"),
                            rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        p = torch.nn.Parameter(torch.randn(300))
        q = torch.nn.Parameter(p.detach().clone())
        with TierAdamW([p], lr=1e-2, manifest=manifest, process_group=True) as opt:
            assert (opt.rank, opt.world, opt._comm) == (0, 1, None)
            assert opt.info()["world"] == 1
            ref = torch.optim.AdamW([q], lr=1e-2)
            for _ in range(3):
                g = torch.randn(300)
                p.grad, q.grad = g.clone(), g.clone()
                opt.step()
                ref.step()
            assert opt.last_step["world"] == 1 and opt.last_step["collectives"] == 0
            assert (p - q).abs().max().item() <= 1e-6 * q.abs().max().item()
            sd = opt.state_dict()
            assert "part_off" not in sd["state"][0] and "world" not in sd["tierstore"]
            assert opt.consolidate_state_dict()["state"][0]["master"].shape == p.shape
    finally:
        dist.destroy_process_group()
