"""train: one grid cell (task, model, size, seed) from scratch or from its checkpoint."""

from __future__ import annotations

import hashlib
import json

import click

from arithrepro.stages.common import (cell_options, data_params, done, friendly_errors,
                                     params_option, paths)


@click.command("train")
@params_option
@cell_options
@friendly_errors
def train(params_path: str, task: str, model: str, size: str, seed: int) -> None:
    """Train one model of the grid; resume from its checkpoint if a run was cut short.

    Reads params: device, precision, compile, <task>.{train,model}, models.<model>.{lr,dropout,micro_batches},
    models.<model>.sizes.<size>, and the task's data keys (dvc.yaml lists them exactly);
    and data/<task>/ (expr: {train,valid}.parquet; abacus, looped: valid.parquet; meta.json).
    Writes runs/<task>/<model>-<size>-<seed>/{model.pt,train.json} and, while the run goes on,
    its live/ folder (dvclive: train/loss and train/lr per step, val/* at every validation, the
    cell's params; arithrepro/live.py). checkpoint.pt, in the same folder, lives only while the
    run does: it is not a DVC output, so the stage's outputs go to DVC's run cache (a queued
    cell trained in another workspace is restored, not retrained).
    """
    import torch

    from arithrepro import config
    from arithrepro.io import save_torch, write_json
    from arithrepro.live import Series
    from arithrepro.models.registry import build_model
    from arithrepro.models.lm import count_params
    from arithrepro.provenance import provenance
    from arithrepro.tasks.registry import TASKS
    from arithrepro.train import fit

    params = config.load(params_path)
    c = config.cell(params, task, model, size, seed)
    device, precision = config.placement(params, task)
    rank, world, device = _join_world(device)
    t = TASKS[task]
    data_dir = paths.data(task)
    arch, cfg = TASKS[task].cell(params, model, size, seed, precision)
    batches = t.train_batches(params, data_dir, seed, device)
    valid = t.valid_set(params, data_dir, device)
    torch.manual_seed(seed)
    net = build_model(model, arch["size"], dropout=arch["dropout"], **arch["dims"]).to(device)
    run_dir = paths.run(task, c.name)
    fingerprint = _fingerprint(arch, cfg, batches.steps, data_dir)
    cell_params = _cell_params(params, task, arch, cfg)
    origin = provenance(cell_params, device=device, precision=precision, compiled=params["compile"])
    result = fit(net, batches, valid, cfg, run_dir / "checkpoint.pt", fingerprint,
                 series=Series(paths.live(task, c.name), cell_params))
    if world > 1:
        torch.distributed.destroy_process_group()
    if rank:  # only rank 0 writes
        return
    state = {k: v.cpu() for k, v in net.state_dict().items()}
    save_torch(run_dir / "model.pt", {**arch, "state_dict": state})
    summary = {k: v for k, v in result.items() if not k.endswith("_curve")}
    write_json(run_dir / "train.json", {"task": task, "model": model, "size": size, "seed": seed,
                                        "params": count_params(net), **summary,
                                        "provenance": {"train": origin}})
    (run_dir / "checkpoint.pt").unlink(missing_ok=True)  # finished: nothing left to resume
    where = (f"{world} processes ({device.split(':')[0]})" if world > 1 else device) + f", {precision}"
    if device == "cpu":  # torch sizes its pool to the cores this process may use (taskset)
        where += f", {torch.get_num_threads()} threads"
    done(f"train {task} {c.name} on {where}: {result['steps']} steps in {result['train_seconds']:.1f} s, "
         f"best val loss {result['best_val_loss']:.4f} at step {result['best_step']}, "
         f"{count_params(net):,} params -> {run_dir}")


def _join_world(device: str) -> tuple[int, int, str]:
    """Under torchrun (WORLD_SIZE > 1): join the process group (NCCL on GPUs, gloo on the CPU)
    and take this rank's GPU. Returns (rank, world size, device)."""
    import os

    import torch

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1, device
    if device == "cuda":
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    torch.distributed.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return torch.distributed.get_rank(), world, device


def _cell_params(params: dict, task: str, arch: dict, cfg) -> dict:
    """The params a cell's result depends on: the model, the loop, its budget (batch size,
    epochs or steps) and the data."""
    from dataclasses import asdict

    return {"arch": arch, "loop": asdict(cfg), "budget": params[task]["train"],
            "data": data_params(params, task)}


def _fingerprint(arch: dict, cfg, steps: int, data_dir) -> str:
    """What a checkpoint must match to be resumed: the model, the loop's config and the data."""
    from dataclasses import asdict

    h = hashlib.sha256(json.dumps([arch, asdict(cfg), steps], sort_keys=True).encode())
    for path in sorted(p for p in data_dir.rglob("*") if p.is_file()):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()
