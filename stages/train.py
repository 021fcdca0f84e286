"""train: one run of any task, from scratch or from its checkpoint."""

from __future__ import annotations

import click

from arithrepro.stages.common import TaskName, done, friendly_errors, params_option


@click.command("train")
@params_option
@click.option("--task", required=True, type=TaskName(), help="The task.")
@click.option("--bench", is_flag=True, help="RUN is a benchmark cell (arithrepro/bench.py).")
@click.argument("names", metavar="RUN...", nargs=-1, required=True)
@friendly_errors
def train(params_path: str, task: str, bench: bool, names: tuple[str, ...]) -> None:
    """Train RUN, one run of the task (<model>-<label>-<seed>: gpt-small-0,
    lstm-std-data.r0.3-0, rnn-s20-0; each is a cell of a train stage in dvc.yaml), resuming from
    its checkpoint if it was cut short. Several RUNs train as one ensemble
    (arithrepro/stacking.py) where they can: one configuration's seeds, and configurations that
    differ only in learning rate, weight decay or data that keeps the shapes (modular's r_train);
    each is written as if it had trained alone, and each ensemble's checkpoint is its first
    run's checkpoint.pt. RUNs that cannot share a step train one ensemble after another.

    Reads params: device, precision, compile, graphs, cpu and what the task reads of the run (dvc.yaml's
    train-<task> stages list the keys exactly), and data/<task>/.
    Writes runs/[bench/]<task>/[<study>/]<run>/{model.pt,train.json} and, while the run goes on, its
    live/ folder (dvclive: train/loss and train/lr per step, val/* at every validation, the
    run's params; arithrepro/live.py); modular and charlm runs also write their records under
    metrics/<task>/runs/ (and modular its curve under plots/modular/curves/). checkpoint.pt, in
    the run's folder, lives only while the run does: it is not a DVC output, so the stage's
    outputs go to DVC's run cache (a queued run trained in another workspace is restored, not
    retrained).
    """
    import torch

    from arithrepro import bench as benchmark
    from arithrepro import config, cpu, lookup, runner, runs
    from arithrepro.params_reads import unrecorded
    from arithrepro.tasks.registry import TASKS

    params = config.load(params_path)
    cpu.apply(params["cpu"])
    config.known_task(task)
    t = TASKS[task]
    among = benchmark.configs(t, unrecorded(params)) if bench else None
    todo = [lookup.find(t, params, name, among) for name in names]
    if len(set(names)) < len(names):
        raise ValueError(f"runs {' '.join(names)}: a run named twice")
    device, precision = config.placement(params, task)
    rank, world, device = _join_world(device)
    where = runs.Placement(device, precision, params["compile"],
                           config.resolve_graphs(params["graphs"], device, precision, world))
    summaries = runner.train(t, todo, params, where, rank)
    if world > 1:
        torch.distributed.destroy_process_group()
    if rank:  # only rank 0 writes
        return
    place = (f"{world} processes ({device.split(':')[0]})" if world > 1 else device) + f", {precision}"
    if device == "cpu":  # torch sizes its pool to the cores this process may use (taskset)
        place += f", {torch.get_num_threads()} threads"
    for run, record in zip(todo, summaries):
        members = record.get("trained_with", 1)
        where_ = place + (f", one of {members} runs in an ensemble" if members > 1 else "")
        done(f"train {task} {run.name} on {where_}: {record['steps']} steps in "
             f"{record['train_seconds']:.1f} s, best val loss {record['best_val_loss']:.4f} at "
             f"step {record['best_step']}, {record['params']:,} params -> {run.files.dir}")


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
