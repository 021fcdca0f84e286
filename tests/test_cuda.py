"""On a CUDA device (skipped without one): every expr model trains a step in each precision,
ForeachLamb matches torch-optimizer's Lamb, greedy decoding matches the CPU's, and
`torchrun --nproc-per-node 1 ... train` runs under NCCL."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch_optimizer
import yaml

from arithrepro import config
from arithrepro.device import autocast
from arithrepro.decoding import greedy_decode
from arithrepro.models.registry import build_model
from arithrepro.optim import ForeachLamb
from arithrepro.train.losses import training_loss

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
ROOT = Path(__file__).resolve().parents[1]
PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())


def model(name, size="small", dropout=0.1):
    torch.manual_seed(0)
    return build_model(name, PARAMS["models"][name]["sizes"][size], vocab_size=19,
                       dropout=dropout, max_len=48, pad_id=3)


def tokens(B=64, T=37):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(4, 19, (B, T), generator=g)
    lengths = torch.randint(10, T, (B,), generator=g)
    x[torch.arange(T) >= lengths[:, None]] = 3
    return x


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("name", ["gpt", "lstm", "retran"])
def test_a_training_step_on_cuda(name, precision):
    net = model(name).cuda().train()
    x = tokens().cuda()
    y = x.roll(-1, 1)
    mask = (x != 3) & (y != 3)
    opt = ForeachLamb(net.parameters(), lr=0.01)
    with autocast("cuda", precision):
        loss = training_loss(net, x, y, mask)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
               for p in net.parameters() if p.requires_grad)
    opt.step()


def test_foreach_lamb_on_cuda_equals_torch_optimizers():
    a, b = model("gpt").cuda(), model("gpt").cuda()
    ref, new = torch_optimizer.Lamb(a.parameters(), lr=0.01), ForeachLamb(b.parameters(), lr=0.01)
    g = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(3):
        for pa, pb in zip(a.parameters(), b.parameters()):
            pa.grad = torch.randn(pa.shape, device="cuda", generator=g)
            pb.grad = pa.grad.clone()
        ref.step()
        new.step()
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pb, pa, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["gpt", "lstm", "retran"])
def test_greedy_decoding_on_cuda_equals_the_cpu(name):
    net = model(name, "medium").eval()
    torch.backends.cuda.matmul.allow_tf32 = False
    x = tokens(32, 40)
    plen = torch.full((32,), 20)
    cpu = greedy_decode(net, x, plen, 6, stop_id=2)
    gpu = greedy_decode(net.cuda(), x.cuda(), plen.cuda(), 6, stop_id=2).cpu()
    assert (cpu == gpu).float().mean() > 0.95  # float order may flip a near tie


def test_torchrun_one_process_nccl(tmp_path):
    params = {**config.compose(["profile=smoke"], ROOT / "conf"), "device": "cuda"}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    run = lambda *a: subprocess.run(list(a), cwd=tmp_path, capture_output=True, text=True,
                                    env={**os.environ})
    out = run(sys.executable, "-m", "arithrepro.cli", "generate-datasets", "--task", "expr")
    assert out.returncode == 0, out.stderr[-2000:]
    out = run(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
              "1", "-m", "arithrepro.cli", "train", "--task", "expr", "gpt-small-0")
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "runs/expr/gpt-small-0/model.pt").is_file()
    assert "cuda" in out.stderr


def test_ddp_under_nccl_one_process_gives_the_plain_gradients():
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        plain, wrapped = model("gpt", dropout=0.0).cuda(), model("gpt", dropout=0.0).cuda()
        ddp = DistributedDataParallel(wrapped, device_ids=[0])
        x = tokens().cuda()
        y, mask = x.roll(-1, 1), x != 3
        training_loss(plain, x, y, mask).backward()
        training_loss(ddp, x, y, mask).backward()
        for a, b in zip(plain.parameters(), wrapped.parameters()):
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("name", ["lstm", "retran"])
def test_fused_recurrence_on_cuda_equals_the_per_op_path(name):
    net = model(name, dropout=0.0).double().cuda().train()
    x = tokens().cuda()
    y, mask = x.roll(-1, 1), x != 3
    grads = {}
    for fused in (True, False):
        net.core.fused = fused
        net.zero_grad()
        training_loss(net, x, y, mask).backward()
        grads[fused] = [p.grad.clone() for p in net.parameters()]
    for a, b in zip(grads[True], grads[False]):
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-10)


def _cuda_fit(name, graphs, tmp_path, optimizer="lamb", copies=0, own=False, seed=0):
    """fit on the tiny expr splits moved to the GPU, dropout off; an ensemble of `copies`
    (own: each copy at its own rate and weight decay, as `_rates` gives them); one model at
    `seed`'s."""
    from dataclasses import replace

    from arithrepro.stacking import CopiesBatches, Ensemble
    from arithrepro.models.registry import MODELS
    from arithrepro.train.config import TrainConfig
    from arithrepro.train.loop import fit
    from tests import helpers

    cfg = TrainConfig(lr=3e-3, seed=0, optimizer=optimizer, val_every=3, checkpoint_every=100,
                      validate_epochs=False, graphs=graphs)
    cfgs = [replace(cfg, seed=s, **(_rates(s) if own else {})) for s in range(max(copies, 1))]

    def on_gpu(source):
        batches, valid = source
        make_valid, n = valid
        inner = batches.make_batch
        batches.make_batch = lambda idx: tuple(t.cuda() for t in inner(idx))
        return batches, ((lambda idx: tuple(t.cuda() for t in make_valid(idx))), n)

    if copies:
        sources = [on_gpu(helpers.sources(c, 20, 2)) for c in cfgs]
        net = Ensemble([helpers.build(name, seed=s).cuda() for s in range(copies)])
        batches = CopiesBatches([b for b, _ in sources], {"x": helpers.PAD})
        valid = sources[0][1]
    else:
        cfg = replace(cfg, seed=seed, **(_rates(seed) if own else {}))
        net = helpers.build(name, seed=seed).cuda()
        batches, valid = on_gpu(helpers.sources(cfg, 20, 2))
    fit(net, batches, valid, cfgs if copies else cfg,
        tmp_path / f"{name}-{graphs}-{copies}-{seed}.pt", "fp", spec=MODELS[name], progress=False)
    return net


def _rates(seed: int) -> dict:
    """Copy `seed`'s own rate and weight decay (configurations fused into one ensemble)."""
    return {"lr": 3e-3 / (1 + seed), "weight_decay": 0.05 * seed}


@pytest.mark.parametrize("optimizer", ["lamb", "adamw"])
@pytest.mark.parametrize("name", ["gpt", "lstm", "retran"])
def test_the_captured_step_trains_as_the_eager_one(tmp_path, name, optimizer):
    """Every step a replay of a CUDA graph (one per batch shape): the eager step's weights."""
    eager = _cuda_fit(name, False, tmp_path, optimizer)
    graphed = _cuda_fit(name, True, tmp_path, optimizer)
    for (n, p), (_, q) in zip(eager.named_parameters(), graphed.named_parameters()):
        torch.testing.assert_close(q, p, rtol=1e-3, atol=1e-4, msg=lambda m: f"{n}: {m}")


def test_a_captured_ensemble_trains_as_the_eager_one(tmp_path):
    eager = _cuda_fit("gpt", False, tmp_path, copies=3)
    graphed = _cuda_fit("gpt", True, tmp_path, copies=3)
    for p, q in zip(eager.stacked, graphed.stacked):
        torch.testing.assert_close(q, p, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("optimizer", ["lamb", "adamw"])
def test_a_captured_fused_ensemble_trains_each_copy_as_its_run(tmp_path, optimizer):
    """Copies at their own rates and decays, every step a replay: each copy within the stated
    GPU tolerance (rtol 1e-3, atol 1e-4) of its standalone eager run."""
    graphed = _cuda_fit("gpt", True, tmp_path, optimizer, copies=3, own=True)
    for s in range(3):
        alone = _cuda_fit("gpt", False, tmp_path, optimizer, own=True, seed=s)
        for n, p in alone.named_parameters():
            torch.testing.assert_close(graphed.state_of(s)[n], p.detach(), rtol=1e-3, atol=1e-4,
                                       msg=lambda m: f"copy {s} {n}: {m}")
