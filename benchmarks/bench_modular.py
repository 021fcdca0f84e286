"""The modular studies' training step at the source's defaults (d 128, 2 layers, batch 512 of the
480 training samples at r_train 0.5) against the source's reported 0.25 s (LSTM) and 0.40 s
(GPT) per step on a 2-vCPU notebook, with model FLOPs (counted by torch's FlopCounterMode) as a
fraction of this machine's matmul peak, and references measured in the same run: the same step
without the pruned last layer (logits for every position), and for the LSTM a torch.nn.LSTM
module (its fused kernel) of the same size."""

from __future__ import annotations

import torch
import torch.nn.functional as F

SOURCE = {"lstm-std": 0.25, "gpt-sin": 0.40}


def _step(net, x, y, mask, outputs_from):
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=1.0)
    yy, mm = y[:, outputs_from:], mask[:, outputs_from:]

    def step():
        logits = net(x, outputs_from=outputs_from) if outputs_from else net(x)
        loss = F.cross_entropy(logits[mm], yy[mm])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def _torch_lstm_step(d, layers, vocab, x, y, mask):
    emb, lstm, head = torch.nn.Embedding(vocab, d), torch.nn.LSTM(d, d, layers, batch_first=True), \
        torch.nn.Linear(d, vocab)
    params = [*emb.parameters(), *lstm.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1.0)

    def step():
        h, _ = lstm(emb(x))
        loss = F.cross_entropy(head(h)[mask], y[mask])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def _flops(step) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()


def bench_modular(params: dict, repeats: int, peak: float, best_of) -> dict:
    from arithrepro.models.registry import build_model
    from arithrepro.tasks.modular import TASK
    from arithrepro.tasks.modular_data import Splits

    base = params["modular"]["base"]
    data = Splits(base, 0, "cpu")
    s = data.splits["train"]
    n = min(base["batch_size"], len(s.x))
    x, y, mask = s.x[:n], s.y[:n], s.mask[:n]
    size = {k: base[k] for k in ("d_model", "layers", "heads")}
    k = data.outputs_from
    per = 10  # steps per timing, so that one timing is not one noisy step
    print(f"\n== modular train step, source defaults: d {size['d_model']}, {size['layers']} layers, "
          f"batch {n} x {x.size(1)} tokens, AdamW; peak {peak / 1e9:.1f} GFLOP/s")
    print(f"{'model':<10}{'variant':<26}{'s/step':>8}{'GFLOP':>7}{'GFLOP/s':>9}{'of peak':>9}"
          f"{'source':>8}{'speed-up':>10}")
    results = {}
    for model in ("lstm-std", "gpt-sin"):
        torch.manual_seed(0)
        net = build_model(model, size, dropout=0.0, **TASK.dims(base))
        variants = {"pipeline (scored tail)": (_step(net, x, y, mask, k), k),
                    "all positions": (_step(net, x, y, mask, 0), 0)}
        if model == "lstm-std":
            variants["torch.nn.LSTM module"] = (_torch_lstm_step(
                size["d_model"], size["layers"], TASK.dims(base)["vocab_size"], x, y, mask), 0)
        for name, (step, scored_from) in variants.items():
            # FlopCounterMode does not see inside torch's fused LSTM kernel: count the same
            # maths on the hand-written cells
            flops = _flops(_step(net, x, y, mask, scored_from))
            sec = best_of(lambda: [step() for _ in range(per)], repeats) / per
            ratio = SOURCE[model] / sec
            results[(model, name)] = sec
            print(f"{model:<10}{name:<26}{sec:>8.3f}{flops / 1e9:>7.2f}{flops / sec / 1e9:>9.1f}"
                  f"{flops / sec / peak:>9.1%}{SOURCE[model]:>8.2f}{ratio:>9.1f}x")
    print("speed-up: the source's reported s/step / this machine's (goal >= 5x for the pipeline)")
    return results
