"""TierAdamW (python/tierstore/torch.py) against torch.optim.AdamW.

The tolerance of every comparison is 1e-6 of the largest absolute value of
the tensor compared (rel_err below); bf16 runs have their own, wider one.
Each optimizer's state streams through an NVMe file in a scratch directory.
"""
import copy
import json
import math
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numpy")

import tierstore  # noqa: E402
from conftest import ROOT, manifest_text  # noqa: E402
from tierstore.torch import TierAdamW  # noqa: E402

TOL = 1e-6
EXAMPLE = os.path.join(ROOT, "examples", "train_digits.py")


def rel_err(a, b):
    """max |a - b| over max |b| (0 when both are zero)."""
    a, b = a.detach().float().reshape(-1), b.detach().float().reshape(-1)
    scale = b.abs().max().item()
    d = (a - b).abs().max().item()
    return d / scale if scale > 0 else d


def cosine_warmup(steps, warmup):
    def f(s):
        if s < warmup:
            return s / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (s - warmup) / max(1, steps - warmup))))
    return f


def digits(hidden=256, seed=0):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    try:
        import train_digits
    finally:
        sys.path.pop(0)
    return train_digits.data(), train_digits.mlp(hidden, seed)


def groups(model, wd_weight, wd_bias):
    return [{"params": [p for n, p in model.named_parameters() if n.endswith("weight")],
             "weight_decay": wd_weight},
            {"params": [p for n, p in model.named_parameters() if n.endswith("bias")],
             "weight_decay": wd_bias}]


def small_model(seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    return m.to(dtype)


def torch_state(opt, p):
    return opt.state[p]


def compare_state(tier, ref, where, tol=TOL):
    """Parameters, exp_avg, exp_avg_sq and step of each pair of parameters
    (in state_dict order: the groups' order); returns the largest relative
    errors seen."""
    sd = tier.state_dict()
    tparams = [p for g in tier.param_groups for p in g["params"]]
    rparams = [p for g in ref.param_groups for p in g["params"]]
    assert len(tparams) == len(rparams)
    worst = {"param": 0.0, "exp_avg": 0.0, "exp_avg_sq": 0.0}
    for i, (tp, rp) in enumerate(zip(tparams, rparams)):
        e = rel_err(tp, rp)
        worst["param"] = max(worst["param"], e)
        assert e <= tol, f"{where}: parameter {i}: relative error {e:.3g}"
        rs = torch_state(ref, rp)
        ts = sd["state"].get(i)
        if not rs:
            assert ts is None, f"{where}: parameter {i} has state, torch's has none"
            continue
        assert int(ts["step"].item()) == int(rs["step"].item()), \
            f"{where}: parameter {i}: step {ts['step'].item()} vs torch {rs['step'].item()}"
        for k in ("exp_avg", "exp_avg_sq"):
            e = rel_err(ts[k], rs[k])
            worst[k] = max(worst[k], e)
            assert e <= tol, f"{where}: parameter {i}: {k}: relative error {e:.3g}"
    return worst


def test_open_loop_parity(manifest):
    """300 steps of the digits MLP, the same gradients fed to both, state 3.9x
    DRAM through NVMe, two groups, cosine schedule warmed up from lr 0."""
    (xtr, ytr, _, _), ref = digits(256)
    model = copy.deepcopy(ref)
    steps = 300
    ropt = torch.optim.AdamW(groups(ref, 0.1, 0.01), lr=2e-3)
    opt = TierAdamW(groups(model, 0.1, 0.01), lr=2e-3, manifest=manifest,
                    dram_capacity=256 << 10)
    info = opt.info()
    assert info["state_bytes"] >= 3.5 * (256 << 10)
    rs = torch.optim.lr_scheduler.LambdaLR(ropt, cosine_warmup(steps, 30))
    ts = torch.optim.lr_scheduler.LambdaLR(opt, cosine_warmup(steps, 30))
    gen = torch.Generator().manual_seed(3)
    lossf = torch.nn.CrossEntropyLoss()
    rparams, tparams = list(ref.parameters()), list(model.parameters())
    nvme = 0
    with opt:
        for step in range(steps):
            idx = torch.randint(0, len(xtr), (64,), generator=gen)
            ropt.zero_grad()
            lossf(ref(xtr[idx]), ytr[idx]).backward()
            for tp, rp in zip(tparams, rparams):
                tp.grad = rp.grad.clone()
            ropt.step()
            opt.step()
            rs.step()
            ts.step()
            assert opt.last_step["applied"]
            nvme += opt.last_step["nvme_read_bytes"]
            if step == 0:
                # lr 0: the parameters stay, the moments advance (torch's too)
                for tp, rp in zip(tparams, rparams):
                    assert torch.equal(tp, rp)
        worst = compare_state(opt, ropt, "after 300 steps")
    print(f"open-loop parity after {steps} steps, largest relative errors: {worst}; "
          f"NVMe read {nvme / steps:.0f} B/step, state {info['state_bytes']} B")
    assert nvme / steps >= info["state_bytes"] - 2 * (256 << 10), "the state did not stream"


def test_closed_loop_example(scratch):
    """examples/train_digits.py, 300 steps (hidden 256 and a DRAM tier of
    256 KiB, 3.9x smaller than the state, to keep the test short): TierAdamW's
    final training loss within 1% of torch's, its test accuracy within 0.5
    points."""
    env = dict(os.environ)
    r = subprocess.run([sys.executable, EXAMPLE, "--steps", "300", "--hidden", "256",
                        "--dram", str(256 << 10), "--data", scratch, "--json"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    print(r.stdout)
    assert res["state_bytes"] >= 3.5 * res["dram_bytes"]
    assert res["nvme_read_bytes_per_step"] > 0
    assert abs(res["tier_train_loss"] - res["torch_train_loss"]) <= 0.01 * res["torch_train_loss"]
    assert abs(res["tier_test_acc"] - res["torch_test_acc"]) <= 0.5


def test_grad_none_steps(manifest):
    """A parameter without a gradient is not updated and its step count
    stays, per parameter, as torch's."""
    ref = small_model()
    model = copy.deepcopy(ref)
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    opt = TierAdamW(model.parameters(), lr=1e-2, weight_decay=0.1, manifest=manifest)
    rparams, tparams = list(ref.parameters()), list(model.parameters())
    torch.manual_seed(5)
    with opt:
        for step in range(30):
            for i, (tp, rp) in enumerate(zip(tparams, rparams)):
                # parameter 1 (the first bias) has no gradient on 2 steps in 3,
                # parameter 3 none before step 10
                if (i == 1 and step % 3 != 0) or (i == 3 and step < 10):
                    tp.grad = rp.grad = None
                else:
                    g = torch.randn_like(rp)
                    rp.grad, tp.grad = g, g.clone()
            ropt.step()
            opt.step()
        compare_state(opt, ropt, "grad None")
        steps = [opt.param_step(p) for p in tparams]
        assert steps == [30, 10, 30, 20]
        assert steps == [int(ropt.state[p]["step"].item()) for p in rparams]
        # the last step (29) had no gradient for parameter 1
        assert (opt.last_step["params_updated"], opt.last_step["params_skipped"]) == (3, 1)


def test_add_param_group_mid_training(manifest):
    ref = small_model()
    model = copy.deepcopy(ref)
    extra_r = torch.nn.Parameter(torch.randn(40))
    extra_t = torch.nn.Parameter(extra_r.detach().clone())
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = TierAdamW(model.parameters(), lr=1e-2, manifest=manifest)
    rparams, tparams = list(ref.parameters()), list(model.parameters())
    torch.manual_seed(6)
    with opt:
        for step in range(12):
            if step == 5:
                ropt.add_param_group({"params": [extra_r], "lr": 3e-2, "weight_decay": 0.0})
                opt.add_param_group({"params": [extra_t], "lr": 3e-2, "weight_decay": 0.0})
                rparams.append(extra_r)
                tparams.append(extra_t)
            for tp, rp in zip(tparams, rparams):
                g = torch.randn_like(rp)
                rp.grad, tp.grad = g, g.clone()
            ropt.step()
            opt.step()
        compare_state(opt, ropt, "add_param_group")
        assert opt.param_step(extra_t) == 7 and opt.param_step(tparams[0]) == 12
        assert len(opt.param_groups) == 2 and opt.param_groups[1]["lr"] == 3e-2


def test_misuse_messages(manifest):
    m = small_model()
    p64 = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"param group 0 parameter 0 has dtype torch.float64"):
        TierAdamW([p64], manifest=manifest)
    # Not contiguous is taken (test_frameworks.py); sparse is not.
    sp = torch.nn.Parameter(torch.zeros(6, 4).to_sparse())
    with pytest.raises(ValueError, match=r"parameter 1 \(shape \(6, 4\)\) is sparse"):
        TierAdamW([torch.nn.Parameter(torch.zeros(2)), sp], manifest=manifest)
    meta = torch.nn.Parameter(torch.zeros(2, device="meta"))
    with pytest.raises(ValueError, match=r"is on meta; tierstore takes CPU or CUDA"):
        TierAdamW([meta], manifest=manifest)
    # The library's own refusals carry its detail: a shard size it refuses.
    with pytest.raises(tierstore.TierError, match=r"shard") as e:
        TierAdamW(m.parameters(), manifest=manifest, shard_size=1000)
    assert e.value.errno == 22

    with TierAdamW(m.parameters(), manifest=manifest) as opt:
        ps = list(m.parameters())
        for p in ps:
            p.grad = torch.zeros_like(p)
        # a gradient of another dtype (int), of another size, sparse
        ps[0].grad.data = torch.zeros(ps[0].numel(), dtype=torch.int32)
        with pytest.raises(TypeError, match=r"gradient of parameter 0 \(param.0, shape "
                                            r"\(32, 16\)\) has dtype torch.int32"):
            opt.step()
        ps[0].grad.data = torch.zeros(7)
        with pytest.raises(ValueError, match=r"gradient of parameter 0 .* has 7 elements, "
                                             r"the parameter 512"):
            opt.step()
        ps[0].grad = torch.zeros(32, 16).to_sparse()
        with pytest.raises(ValueError, match=r"gradient of parameter 0 .* is sparse"):
            opt.step()
        ps[0].grad = torch.zeros_like(ps[0])
        # The library checks the size too (tier_tensor.numel): past the
        # binding's check, its refusal names the parameter.
        ps[0].grad.data = torch.zeros(7)
        opt._check_grad = lambda p: None
        with pytest.raises(tierstore.TierError, match=r"param\.0") as e:
            opt.step()
        assert e.value.errno == 22
        del opt._check_grad
        # A CUDA tensor with a manifest without a GPU.
        if torch.cuda.is_available():
            with pytest.raises(ValueError, match=r"has no GPU"):
                opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2, device="cuda"))]})
        else:
            class Fake:
                device = torch.device("cuda", 0)
            with pytest.raises(ValueError, match=r"is on cuda:0, but the manifest .* has no GPU"):
                opt._check_device(Fake(), "parameter 9")
        ps[0].grad = torch.zeros_like(ps[0])
        opt.step()   # the pending step completes with good gradients
        assert opt.last_step["applied"] and opt.last_step["params_updated"] == 4


def test_state_dict_round_trip(manifest, scratch):
    """TierAdamW's state dict into a new TierAdamW and into torch.optim.AdamW,
    torch's into TierAdamW; every run continues as the reference does."""
    ref = small_model()
    runs = {"tier": copy.deepcopy(ref)}
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.05)
    opt = TierAdamW(runs["tier"].parameters(), lr=1e-2, weight_decay=0.05, manifest=manifest)
    rparams = list(ref.parameters())
    torch.manual_seed(7)
    grads = [[torch.randn_like(p) for p in rparams] for _ in range(20)]

    def feed(o, params, gs):
        for p, g in zip(params, gs):
            p.grad = g.clone()
        o.step()

    for s in range(10):
        feed(ropt, rparams, grads[s])
        feed(opt, list(runs["tier"].parameters()), grads[s])
    sd = opt.state_dict()
    assert sd["state"][0]["master"].dtype == torch.float32
    torch_sd = copy.deepcopy(ropt.state_dict())

    m2 = manifest_text(os.path.join(scratch, "nvme2"))
    opts = {"tier": opt}
    runs["tier2"] = copy.deepcopy(runs["tier"])
    opts["tier2"] = TierAdamW(runs["tier2"].parameters(), lr=0.5, manifest=tierstore.Manifest.from_text(m2))
    opts["tier2"].load_state_dict(sd)
    runs["torch2"] = copy.deepcopy(runs["tier"])
    opts["torch2"] = torch.optim.AdamW(runs["torch2"].parameters(), lr=0.5)
    opts["torch2"].load_state_dict(sd)
    m3 = manifest_text(os.path.join(scratch, "nvme3"))
    runs["tier3"] = copy.deepcopy(ref)
    opts["tier3"] = TierAdamW(runs["tier3"].parameters(), lr=0.5, manifest=tierstore.Manifest.from_text(m3))
    opts["tier3"].load_state_dict(torch_sd)
    assert opts["tier2"].param_groups[0]["lr"] == 1e-2
    for s in range(10, 20):
        feed(ropt, rparams, grads[s])
        for k in opts:
            feed(opts[k], list(runs[k].parameters()), grads[s])
    for k in opts:
        for i, (p, rp) in enumerate(zip(runs[k].parameters(), rparams)):
            assert rel_err(p, rp) <= TOL, f"{k}: parameter {i}"
    for k in ("tier", "tier2", "tier3"):
        compare_state(opts[k], ropt, k)
        opts[k].close()


def _train(opt, model, batches, micro=1):
    lossf = torch.nn.MSELoss()
    for x, y in batches:
        opt.zero_grad()
        for j in range(micro):
            ctx = opt.no_overlap() if (j < micro - 1 and hasattr(opt, "no_overlap")) \
                else _null()
            with ctx:
                lossf(model(x[j::micro]), y[j::micro]).backward()
        opt.step()


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_overlap_backward(manifest, scratch):
    """The streaming form gives the bits of the plain step, with gradient
    accumulation through no_overlap() too."""
    torch.manual_seed(8)
    batches = [(torch.randn(32, 16), torch.randn(32, 4)) for _ in range(15)]
    base = small_model()
    res = {}
    for i, (overlap, micro) in enumerate([(False, 1), (True, 1), (False, 2), (True, 2)]):
        m = copy.deepcopy(base)
        man = tierstore.Manifest.from_text(manifest_text(os.path.join(scratch, f"n{i}")))
        with TierAdamW(m.parameters(), lr=1e-2, manifest=man,
                       overlap_backward=overlap) as opt:
            _train(opt, m, batches, micro)
            assert opt.last_step["params_updated"] == 4
            res[(overlap, micro)] = [p.detach().clone() for p in m.parameters()]
            if overlap and micro == 1:
                # a second backward before step() outside no_overlap()
                x, y = batches[0]
                torch.nn.functional.mse_loss(m(x), y).backward()
                with pytest.raises(RuntimeError, match="no_overlap"):
                    torch.nn.functional.mse_loss(m(x), y).backward()
                opt.step()
    for micro in (1, 2):
        for a, b in zip(res[(False, micro)], res[(True, micro)]):
            assert torch.equal(a, b)


def test_bf16_params_fp16_grads(manifest):
    """bf16 parameters (written in bf16 by the library from its fp32 master)
    with fp16 gradients, against torch.optim.AdamW on fp32 copies."""
    ref = small_model()
    model = copy.deepcopy(ref).to(torch.bfloat16)
    with torch.no_grad():   # torch starts from the same (bf16) values
        for rp, tp in zip(ref.parameters(), model.parameters()):
            rp.copy_(tp.float())
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = TierAdamW(model.parameters(), lr=1e-2, manifest=manifest, moment_dtype="fp32")
    rparams, tparams = list(ref.parameters()), list(model.parameters())
    torch.manual_seed(9)
    with opt:
        for step in range(20):
            for tp, rp in zip(tparams, rparams):
                g = torch.randn_like(rp).half()
                rp.grad = g.float()
                tp.grad = torch.zeros_like(tp)
                tp.grad.data = g.clone()
            ropt.step()
            opt.step()
        sd = opt.state_dict()
        for i, (tp, rp) in enumerate(zip(tparams, rparams)):
            assert tp.dtype == torch.bfloat16
            # the fp32 master weights follow torch's fp32 run (the fp16
            # gradients are exact in fp32); the bf16 parameter is the master
            # rounded to bf16 (2**-8 relative)
            assert rel_err(sd["state"][i]["master"], rp) <= TOL, f"master {i}"
            assert (tp.float() - sd["state"][i]["master"].reshape(tp.shape)).abs().max() \
                <= rp.abs().max() * 2 ** -8, f"bf16 parameter {i}"


def test_checkpoint_resume_export_import(manifest, scratch):
    """checkpoint() and resume(), export() and import_(): the next steps are
    the uninterrupted run's."""
    torch.manual_seed(10)
    grads = [[torch.randn_like(p) for p in small_model().parameters()] for _ in range(8)]
    base = small_model()

    def feed(o, m, gs):
        for p, g in zip(m.parameters(), gs):
            p.grad = g.clone()
        o.step()

    m = copy.deepcopy(base)
    exported = os.path.join(scratch, "state.safetensors")
    opt = TierAdamW(groups(m, 0.1, 0.0), lr=1e-2, manifest=manifest)
    for s in range(5):
        feed(opt, m, grads[s])
    gen = opt.checkpoint()
    assert gen >= 1
    opt.export(exported)
    for s in range(5, 8):
        feed(opt, m, grads[s])
    want = [p.detach().clone() for p in m.parameters()]
    opt.close()

    for how in ("resume", "import"):
        m2 = copy.deepcopy(base)   # the initial weights: resume copies the master in
        if how == "resume":
            o2 = TierAdamW.resume(groups(m2, 0.1, 0.0), manifest=manifest)
        else:
            man = tierstore.Manifest.from_text(manifest_text(os.path.join(scratch, "imp"),
                                                             shard="128KiB"))
            o2 = TierAdamW.import_(exported, groups(m2, 0.1, 0.0), manifest=man)
        with o2:
            assert o2.param_groups[0]["weight_decay"] == 0.1
            assert o2.param_groups[1]["weight_decay"] == 0.0
            assert all(o2.param_step(p) == 5 for p in m2.parameters())
            for s in range(5, 8):
                feed(o2, m2, grads[s])
            for i, (a, b) in enumerate(zip(m2.parameters(), want)):
                assert torch.equal(a, b), f"{how}: parameter {i}"


def test_max_grad_norm_and_loss_scale(manifest):
    """Clipping by the total norm over every group, as clip_grad_norm_; a
    static loss scale divides the gradients."""
    ref = small_model()
    model = copy.deepcopy(ref)
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = TierAdamW(groups(model, 0.01, 0.01), lr=1e-2, manifest=manifest, max_grad_norm=0.5,
                    loss_scale=128.0)
    torch.manual_seed(11)
    rparams = list(ref.parameters())
    tparams = [p for g in opt.param_groups for p in g["params"]]
    rparams = [rp for tp in tparams for rp, mp in zip(rparams, model.parameters()) if mp is tp]
    with opt:
        for step in range(10):
            for tp, rp in zip(tparams, rparams):
                g = torch.randn_like(rp)
                rp.grad, tp.grad = g.clone(), g * 128.0
            norm = torch.nn.utils.clip_grad_norm_(rparams, 0.5)
            ropt.step()
            opt.step()
            assert abs(opt.last_step["grad_norm"] - norm.item()) <= 1e-5 * norm.item()
            assert opt.last_step["clip_coef"] < 1
        for i, (tp, rp) in enumerate(zip(tparams, rparams)):
            assert rel_err(tp, rp) <= TOL, f"parameter {i}"


def test_python_m_tierstore(scratch):
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-m", "tierstore"], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert "features: cuda=" in r.stdout and "gpus: " in r.stdout
    assert "version: 1" in r.stdout and "dram:" in r.stdout
    bad = os.path.join(scratch, "bad.yaml")
    with open(bad, "w") as f:
        f.write("version: 1\ndram:\n  capacty: 1GiB\n")
    r = subprocess.run([sys.executable, "-m", "tierstore", "--manifest", bad],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 2
    assert f"{bad}:3:3: unknown key 'capacty'" in r.stderr


def test_dynamic_loss_scale(manifest, scratch):
    """loss_scale='dynamic': a step with an inf gradient is skipped (the
    parameters and step counts stay); the scaler's state goes through
    state_dict into another TierAdamW."""
    m = small_model()
    opt = TierAdamW(m.parameters(), lr=1e-2, manifest=manifest, loss_scale="dynamic")
    ps = list(m.parameters())
    with opt:
        for p in ps:
            p.grad = torch.randn_like(p) * 2.0 ** 16
        opt.step()
        assert opt.last_step["applied"] and opt.last_step["loss_scale"] == 2.0 ** 16
        before = [p.detach().clone() for p in ps]
        ps[2].grad[0] = float("inf")
        opt.step()
        assert not opt.last_step["applied"]
        assert all(torch.equal(a, b) for a, b in zip(before, ps))
        assert [opt.param_step(p) for p in ps] == [1, 1, 1, 1]
        sd = opt.state_dict()
        sc = sd["tierstore"]["scaler"]
        assert sc["hysteresis_tracker"] == 1 and sc["scale"] == 2.0 ** 16
        m2 = copy.deepcopy(m)
        man = tierstore.Manifest.from_text(manifest_text(os.path.join(scratch, "b")))
        with TierAdamW(m2.parameters(), manifest=man, loss_scale="dynamic") as o2:
            o2.load_state_dict(sd)
            assert o2.state_dict()["tierstore"]["scaler"] == sc


def test_freeze(manifest):
    """A frozen parameter keeps its state and step count and is not
    streamed; a gradient for it is refused until it is thawed."""
    m = small_model()
    ps = list(m.parameters())
    with TierAdamW(m.parameters(), lr=1e-2, manifest=manifest) as opt:
        for p in ps:
            p.grad = torch.randn_like(p)
        opt.step()
        opt.freeze(ps[0])
        with pytest.raises(ValueError, match=r"parameter 0 \(param.0, shape \(32, 16\)\) is "
                                             r"frozen"):
            opt.step()
        frozen = ps[0].detach().clone()
        ps[0].grad = None
        opt.step()
        opt.step()
        assert torch.equal(frozen, ps[0])
        assert [opt.param_step(p) for p in ps] == [1, 3, 3, 3]
        assert opt.last_step["params_skipped"] == 1
        opt.freeze(ps[0], False)
        ps[0].grad = torch.randn_like(ps[0])
        opt.step()
        assert opt.param_step(ps[0]) == 2


# torch 1.13's SequentialLR passes an epoch to its schedulers and warns
@pytest.mark.filterwarnings("ignore:The epoch parameter")
def test_sequential_lr_scheduler(manifest):
    """torch's schedulers drive the groups' lr unchanged: SequentialLR of
    LinearLR then CosineAnnealingLR, betas changed mid-run too."""
    ref = small_model()
    model = copy.deepcopy(ref)
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = TierAdamW(model.parameters(), lr=1e-2, manifest=manifest)

    def sched(o):
        return torch.optim.lr_scheduler.SequentialLR(o, [
            torch.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=5),
            torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=15)], milestones=[5])

    rs, ts = sched(ropt), sched(opt)
    torch.manual_seed(12)
    with opt:
        for step in range(20):
            if step == 10:
                for o in (ropt, opt):
                    o.param_groups[0]["betas"] = (0.8, 0.99)
                    o.param_groups[0]["eps"] = 1e-6
            for tp, rp in zip(model.parameters(), ref.parameters()):
                g = torch.randn_like(rp)
                rp.grad, tp.grad = g, g.clone()
            ropt.step()
            opt.step()
            rs.step()
            ts.step()
        assert opt.param_groups[0]["lr"] == ropt.param_groups[0]["lr"]
        compare_state(opt, ropt, "SequentialLR")
