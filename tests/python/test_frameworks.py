"""TierAdamW under the frameworks trainers use, and its lifetime rules.

What a framework does to an optimizer, reproduced: PyTorch Lightning's
LightningOptimizer (a dynamic subclass of the optimizer's class whose
__dict__ is a copy of the optimizer's, dropped and remade by the
framework), a proxy whose attributes forward to the real optimizer,
copy.copy, pickling, garbage collection at random moments.  Then the real
frameworks where they are installed (PyTorch Lightning, Hugging Face
Transformers' Trainer, Accelerate): each trains with TierAdamW and resumes
from its own checkpoint bit for bit.  And what torch accepts that
TierAdamW must too: empty parameters, channels_last and transposed
parameters, non-contiguous gradients.  And the default store (no
manifest): sized from the model, in a directory of its own that close()
removes, several at once.
"""
import copy
import gc
import importlib
import os
import pickle
import random
import warnings

import pytest

torch = pytest.importorskip("torch")

from tierstore.torch import TierAdamW  # noqa: E402


def model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def batch(i):
    g = torch.Generator().manual_seed(1000 + i)
    return torch.randn(8, 12, generator=g), torch.randint(0, 3, (8,), generator=g)


def train(m, opt, steps, start=0, between=None):
    for i in range(start, start + steps):
        x, y = batch(i)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
        if between is not None:
            between(i)


class LightningStyle:
    """PyTorch Lightning's LightningOptimizer, as core/optimizer.py builds
    it: the instance's __dict__ is a copy of the optimizer's (less step and
    __del__), its class a new subclass of (LightningStyle, the optimizer's
    class); step goes to the real optimizer."""

    def __init__(self, optimizer):
        self.__dict__ = {k: v for k, v in optimizer.__dict__.items()
                         if k not in ("step", "__del__")}
        self.__class__ = type("Lightning" + optimizer.__class__.__name__,
                              (self.__class__, optimizer.__class__), {})
        self._optimizer = optimizer

    def step(self, closure=None):
        return self._optimizer.step(closure)


class Forwarding(TierAdamW):
    """A proxy made without __init__ whose attributes forward to the real
    optimizer (what a user's wrapper subclass may do)."""

    def __new__(cls, real):
        obj = object.__new__(cls)
        object.__setattr__(obj, "_real", real)
        return obj

    def __init__(self, real):
        pass

    def __getattr__(self, name):
        return getattr(object.__getattribute__(self, "_real"), name)


@pytest.fixture
def cache(scratch, monkeypatch):
    """Default stores (no manifest) make their directories under here."""
    monkeypatch.delenv("TIER_MANIFEST", raising=False)
    monkeypatch.delenv("TIER_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", os.path.join(scratch, "cache"))
    cwd = os.path.join(scratch, "cwd")
    os.makedirs(cwd)
    monkeypatch.chdir(cwd)
    return os.path.join(scratch, "cache", "tierstore")


def reference(steps, seed=0):
    m = model(seed)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    train(m, opt, steps)
    return m


@pytest.mark.parametrize("wrap", ["lightning", "forwarding", "copy"])
def test_wrappers_never_free(manifest, wrap):
    """A wrapper made and dropped at every step (with garbage collections
    at random moments in between) frees nothing: the optimizer trains on,
    as torch.optim.AdamW does."""
    rng = random.Random(7)
    m = model()
    opt = TierAdamW(m.parameters(), lr=1e-2, manifest=manifest)
    make = {"lightning": LightningStyle, "forwarding": Forwarding, "copy": copy.copy}[wrap]
    old = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    try:
        def between(i):
            w = make(opt)
            assert isinstance(w, TierAdamW)
            # The wrapper sees the same optimizer: its groups, its state.
            assert w.param_groups is opt.param_groups
            assert w.param_step(next(m.parameters())) == i + 1
            if rng.random() < 0.5:
                w.zero_grad()
            del w
            if rng.random() < 0.5:
                gc.collect()
        train(m, opt, 12, between=between)
        gc.collect()
        train(m, opt, 3, start=12)
    finally:
        gc.set_threshold(*old)
    ref = reference(15)
    for a, b in zip(m.parameters(), ref.parameters()):
        assert (a - b).abs().max().item() <= 1e-6 * b.abs().max().item()
    opt.close()


def test_wrapper_step_and_state(manifest):
    """Stepping through the wrapper and reading the state through either
    object agree: they share one core."""
    m = model()
    opt = TierAdamW(m.parameters(), lr=1e-2, manifest=manifest)
    w = LightningStyle(opt)
    train(m, w, 4)
    assert opt.param_step(next(m.parameters())) == 4
    sd_w, sd_o = w.state_dict(), opt.state_dict()
    for k in sd_o["state"]:
        assert torch.equal(sd_w["state"][k]["exp_avg"], sd_o["state"][k]["exp_avg"])
    del w
    gc.collect()
    train(m, opt, 2, start=4)
    assert opt.param_step(next(m.parameters())) == 6
    opt.close()


def test_closed_raises_everywhere(manifest):
    """close() through a wrapper closes the optimizer; every method of a
    closed one raises ValueError naming it; closing twice does nothing."""
    m = model()
    opt = TierAdamW(m.parameters(), lr=1e-2, manifest=manifest)
    train(m, opt, 1)
    w = LightningStyle(opt)
    w.close()
    assert opt.closed and w.closed
    p = next(m.parameters())
    calls = {
        "step": lambda o: o.step(),
        "zero_grad": lambda o: o.zero_grad(),
        "state_dict": lambda o: o.state_dict(),
        "load_state_dict": lambda o: o.load_state_dict({"state": {}, "param_groups": []}),
        "add_param_group": lambda o: o.add_param_group({"params": [torch.zeros(2)]}),
        "freeze": lambda o: o.freeze(p),
        "param_step": lambda o: o.param_step(p),
        "info": lambda o: o.info(),
        "checkpoint": lambda o: o.checkpoint(),
        "export": lambda o: o.export("x.safetensors"),
        "consolidate_state_dict": lambda o: o.consolidate_state_dict(),
        "no_overlap": lambda o: o.no_overlap().__enter__(),
        "handle": lambda o: o.handle,
    }
    for name, call in calls.items():
        for o in (opt, w):
            with pytest.raises(ValueError, match=r"the optimizer is closed"):
                call(o)
    opt.close()
    w.close()


def test_no_pickle_no_deepcopy(manifest):
    m = model()
    with TierAdamW(m.parameters(), lr=1e-2, manifest=manifest) as opt:
        for f in (pickle.dumps, copy.deepcopy):
            with pytest.raises(TypeError, match=r"cannot be pickled or deep-copied.*"
                                                r"state_dict\(\)"):
                f(opt)
        train(m, opt, 1)    # still open and whole


def test_gc_of_the_last_reference_frees_once(manifest):
    """The optimizer's store goes when the last object sharing its core
    goes (not before): the backing file is free to reopen at once."""
    m = model()
    opt = TierAdamW(m.parameters(), lr=1e-2, manifest=manifest)
    w = LightningStyle(opt)
    del opt
    gc.collect()
    train(m, w, 2)          # the wrapper still holds the core: it works
    del w
    gc.collect()
    with TierAdamW(m.parameters(), lr=1e-2, manifest=manifest) as again:
        train(m, again, 1)


# ------------------------------------------------ what torch accepts


def test_empty_channels_last_noncontiguous(manifest):
    """Against torch.optim.AdamW: an empty parameter (numel 0), a
    channels_last Conv2d weight, a transposed (non-contiguous) parameter,
    and non-contiguous gradients; then state_dict both ways."""
    def build():
        torch.manual_seed(3)
        conv = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
        t = torch.nn.Parameter(torch.randn(5, 7).t())       # stride (1, 7)
        empty = torch.nn.Parameter(torch.zeros(0, 4))
        return [conv.weight, conv.bias, t, empty], conv
    ours, conv_o = build()
    ref, conv_r = build()
    assert not ours[0].is_contiguous() and ours[0].is_contiguous(
        memory_format=torch.channels_last)
    assert not ours[2].is_contiguous()
    opt = TierAdamW(ours, lr=1e-2, manifest=manifest)
    ropt = torch.optim.AdamW(ref, lr=1e-2)
    for i in range(6):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(2, 3, 6, 6, generator=g).to(memory_format=torch.channels_last)
        for ps, conv, o in ((ours, conv_o, opt), (ref, conv_r, ropt)):
            o.zero_grad()
            loss = conv(x).square().mean() + (ps[2] @ torch.ones(5)).square().sum() + \
                ps[3].sum()
            loss.backward()
            # A gradient made non-contiguous by the user (a transposed copy).
            ps[2].grad = ps[2].grad.t().contiguous().t()
            assert not ps[2].grad.is_contiguous()
            o.step()
    for a, b in zip(ours, ref):
        assert a.shape == b.shape and a.stride() == b.stride()
        if a.numel():
            assert (a - b).abs().max().item() <= 1e-6 * b.abs().max().item()
    assert opt.param_step(ours[3]) == 6
    sd = opt.state_dict()
    rsd = ropt.state_dict()
    assert set(sd["state"]) == set(rsd["state"]) == {0, 1, 2, 3}
    for k in rsd["state"]:
        assert float(sd["state"][k]["step"]) == float(rsd["state"][k]["step"])
        assert sd["state"][k]["exp_avg"].shape == rsd["state"][k]["exp_avg"].shape
        if rsd["state"][k]["exp_avg"].numel():
            d = (sd["state"][k]["exp_avg_sq"] - rsd["state"][k]["exp_avg_sq"]).abs().max()
            assert d.item() <= 1e-6 * rsd["state"][k]["exp_avg_sq"].abs().max().item()
    # torch's state dict loads into TierAdamW, TierAdamW's into torch.
    ropt.load_state_dict(sd)
    opt.load_state_dict(rsd)
    assert opt.param_step(ours[3]) == 6
    opt.close()


# ------------------------------------------------ the default store


def locked_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmLck:"):
                return int(line.split()[1])
    return 0


def test_default_sized_from_the_model(cache):
    """No manifest: the DRAM tier holds the model's state (1M parameters:
    12 MB of fp32 state) and not a share of the machine; the NVMe file is
    in a directory of its own under the cache, none in the working
    directory, removed by close()."""
    torch.manual_seed(0)
    m = torch.nn.Linear(1000, 1000)       # 1,001,000 parameters
    before = locked_kib()
    opt = TierAdamW(m.parameters(), lr=1e-3)
    d = opt.data_dir
    assert d is not None and d.startswith(cache) and os.listdir(d)
    state = 1001000 * 12
    locked = (locked_kib() - before) * 1024
    # What the state needs (power-of-two blocks, an eighth for the window),
    # not 25% of MemAvailable.
    assert locked <= 4 * state + (16 << 20), locked
    x = torch.randn(4, 1000)
    m(x).square().mean().backward()
    opt.step()
    assert os.listdir(".") == []
    opt.close()
    assert not os.path.exists(d)
    assert os.listdir(".") == []


def test_forked_child_frees_nothing(cache):
    """A forked child (a DataLoader worker) that closes or collects its copy
    of the optimizer frees nothing of the parent's: the parent trains on
    and its default store's directory stays."""
    m = model()
    opt = TierAdamW(m.parameters(), lr=1e-2)
    train(m, opt, 2)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            opt.close()
            gc.collect()
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert os.path.exists(opt.data_dir) and not opt.closed
    train(m, opt, 2, start=2)
    ref = reference(4)
    for a, b in zip(m.parameters(), ref.parameters()):
        assert (a - b).abs().max().item() <= 1e-6 * b.abs().max().item()
    d = opt.data_dir
    opt.close()
    assert not os.path.exists(d)


def test_default_two_at_once(cache):
    """Two default optimizers in one process (a GAN's two): each has its
    own directory; nothing is busy."""
    g, dsc = model(1), model(2)
    og = TierAdamW(g.parameters(), lr=1e-3)
    od = TierAdamW(dsc.parameters(), lr=1e-3)
    assert og.data_dir != od.data_dir
    train(g, og, 2)
    train(dsc, od, 2)
    # A third while both are open, then the first closed by the collector.
    o3 = TierAdamW(model(3).parameters(), lr=1e-3)
    gone = og.data_dir
    del og
    gc.collect()
    assert not os.path.exists(gone)
    od.close()
    o3.close()
    assert os.listdir(cache) == []


def test_default_checkpoint_keeps_the_directory(cache):
    """checkpoint() into a default store keeps its directory (with a
    warning naming it and the manifest that resumes it); resume from that
    manifest continues bit for bit."""
    m = model()
    opt = TierAdamW(m.parameters(), lr=1e-2)
    train(m, opt, 3)
    with pytest.warns(UserWarning, match=r"kept after close\(\).*resume"):
        opt.checkpoint()
    d = opt.data_dir
    saved = [p.detach().clone() for p in m.parameters()]
    train(m, opt, 2, start=3)
    want = [p.detach().clone() for p in m.parameters()]
    opt.close()
    assert os.path.exists(os.path.join(d, "KEEP"))
    m2 = model(5)
    with TierAdamW.resume(m2.parameters(), manifest=os.path.join(d, "manifest.yaml")) as r:
        for a, b in zip(m2.parameters(), saved):
            assert torch.equal(a, b)
        train(m2, r, 2, start=3)
    for a, b in zip(m2.parameters(), want):
        assert torch.equal(a, b)


def test_default_resume_needs_the_manifest(cache):
    """resume() without a manifest has nothing to reopen (a default store's
    directory is its own): refused, naming what to pass, and nothing made."""
    with pytest.raises(ValueError, match=r"TierAdamW.resume: no manifest.*manifest.yaml"):
        TierAdamW.resume(model().parameters())
    assert not os.path.exists(cache) or os.listdir(cache) == []


def test_default_sweeps_dead_directories(cache):
    """A directory left by a process that is gone (SIGKILL: no close) is
    removed by the next default store; one holding a checkpoint is not."""
    os.makedirs(cache, exist_ok=True)
    dead = os.path.join(cache, "run-999999999-abcdefgh")
    kept = os.path.join(cache, "run-999999998-abcdefgh")
    for d in (dead, kept):
        os.makedirs(d)
        open(os.path.join(d, "tierstore-tierstore.dat"), "w").close()
    open(os.path.join(kept, "KEEP"), "w").close()
    with TierAdamW(model().parameters(), lr=1e-3):
        pass
    assert not os.path.exists(dead) and os.path.exists(kept)


# ------------------------------------------------ the real frameworks


def _lightning_run(root, epochs, ckpt=None, save=None):
    pl = pytest.importorskip("pytorch_lightning")
    # Debian's torch 1.13 under Python 3.11 cannot import
    # torch.distributed._shard (a dataclass with a mutable default), which
    # Lightning's module imports only to register ShardedTensor state-dict
    # hooks: no ShardedTensor here, so the hooks are not needed.
    try:
        importlib.import_module("torch.distributed._shard")
    except ValueError:
        pl.LightningModule._register_sharded_tensor_state_dict_hooks_if_available = \
            lambda self: None

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = model()

        def training_step(self, b, i):
            x, y = b
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return TierAdamW(self.parameters(), lr=1e-2)

    xs, ys = zip(*(batch(i) for i in range(5)))
    data = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.cat(xs), torch.cat(ys)), batch_size=8)
    mod = Module()
    callbacks = []
    if save:
        # Lightning's own checkpoints, one at the end of each epoch.
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=save, save_top_k=-1,
                                                      every_n_epochs=1))
    trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=bool(save), callbacks=callbacks,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=root)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(mod, train_dataloaders=data, ckpt_path=ckpt)
    return [p.detach().clone() for p in mod.parameters()]


def test_lightning_fit_and_resume(cache, scratch):
    """PyTorch Lightning: configure_optimizers returns TierAdamW (which
    Lightning wraps in its LightningOptimizer); fit 4 epochs with a
    checkpoint at each epoch's end; a new fit from the second epoch's
    checkpoint ends where the straight one did, bit for bit (the state,
    fp32 master weights included, goes through Lightning's checkpoint)."""
    d = os.path.join(scratch, "ckpts")
    straight = _lightning_run(scratch, 4, save=d)
    gc.collect()
    ck = [f for f in os.listdir(d) if f.startswith("epoch=1-")]
    assert len(ck) == 1, os.listdir(d)
    resumed = _lightning_run(scratch, 4, ckpt=os.path.join(d, ck[0]))
    for a, b in zip(resumed, straight):
        assert torch.equal(a, b)


def test_hf_trainer_fit_and_resume(cache, scratch):
    """Hugging Face Trainer with optimizers=(TierAdamW, scheduler): train
    8 steps saving at 4; resume_from_checkpoint at 4 == straight."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = model()

        def forward(self, x, labels):
            return {"loss": torch.nn.functional.cross_entropy(self.net(x), labels)}

    data = [{"x": x[j], "labels": y[j]} for i in range(4) for x, y in [batch(i)]
            for j in range(8)]

    def run(out, resume=None):
        torch.manual_seed(0)
        net = Net()
        opt = TierAdamW(net.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
        args = transformers.TrainingArguments(
            output_dir=out, max_steps=8, per_device_train_batch_size=4, save_steps=4,
            save_strategy="steps", report_to=[], logging_strategy="no", use_cpu=True,
            disable_tqdm=True, seed=0, dataloader_num_workers=0)
        tr = transformers.Trainer(model=net, args=args, train_dataset=data,
                                  optimizers=(opt, sched))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tr.train(resume_from_checkpoint=resume)
        return [p.detach().clone() for p in net.parameters()]
    a = os.path.join(scratch, "hf-a")
    straight = run(a)
    gc.collect()
    resumed = run(os.path.join(scratch, "hf-b"), resume=os.path.join(a, "checkpoint-4"))
    for x, y in zip(resumed, straight):
        assert torch.equal(x, y)


def test_accelerate_prepare_save_load(cache, scratch):
    """Accelerate: prepare(model, TierAdamW) wraps the optimizer in its
    AcceleratedOptimizer; train, save_state, train on; a fresh run that
    load_state()s continues bit for bit."""
    accelerate = pytest.importorskip("accelerate")

    def run(steps, save=None, load=None):
        acc = accelerate.Accelerator(cpu=True)
        m = model()
        opt = TierAdamW(m.parameters(), lr=1e-2)
        m, opt = acc.prepare(m, opt)
        if load:
            acc.load_state(load)
        start = 3 if load else 0
        for i in range(start, steps):
            x, y = batch(i)
            opt.zero_grad()
            acc.backward(torch.nn.functional.cross_entropy(m(x), y))
            opt.step()
            if save and i == 2:
                acc.save_state(save)
        out = [p.detach().clone() for p in m.parameters()]
        del acc, opt
        gc.collect()
        return out
    d = os.path.join(scratch, "acc")
    straight = run(6, save=d)
    resumed = run(6, load=d)
    for x, y in zip(resumed, straight):
        assert torch.equal(x, y)
