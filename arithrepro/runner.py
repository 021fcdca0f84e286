"""The one place a run of any task is made and trained, and its records written: the run (found
by lookup.py) built from its configuration and the data its task gives it (`build`), trained,
then model.pt, train.json and live/ (dvclive's series) in its folder and, for a task scored as
it trains, its record and curve (arithrepro/runs.py's Files says where each lives; records.py
writes every record). It sits above the tasks: it asks them, they never call it; runs.py's
values sit below both."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from arithrepro.records import write_record
from arithrepro.runs import Built, Data, Placement, Run, thaw


def configure(run: Run, where: Placement, data: Data | None = None):
    """(architecture, TrainConfig) of `run` on `where`: its configuration's, with what its data
    decides (`data`; a grid task's decides nothing); the one place a run's loop settings are
    made, for every task."""
    from arithrepro.train.config import TrainConfig

    c = run.config
    extra = data.architecture if data is not None else {}
    arch = thaw(c.architecture)
    arch.update({k: v for k, v in extra.items() if k != "dims"})
    arch["dims"] = {**arch.get("dims", {}), **extra.get("dims", {})}
    loop = {**thaw(c.loop), **(data.loop if data is not None else {})}
    cfg = TrainConfig(**loop, seed=run.seed, precision=where.precision, compile=where.compile,
                      graphs=where.graphs)
    return arch, cfg


def reads(run: Run, arch: dict) -> dict:
    """The params `run`'s result depends on (provenance, dvclive's params, the resume
    fingerprint): its configuration's settings, architecture and loop, and its seed."""
    c = run.config
    return {"config": c.name, "architecture": arch, "loop": thaw(c.loop),
            "settings": thaw(c.settings), "seed": run.seed}


def build(task, run: Run, params: dict, where: Placement, trial: bool = False) -> Built:
    """`run` of `task` ready to train on `where`, the same way for every task. trial: on data
    made in memory, without the files earlier stages write (`arithrepro estimate` times runs
    before they exist)."""
    import torch

    from arithrepro.models.registry import build_model

    data = task.data(run, params, where.device, trial)
    arch, cfg = configure(run, where, data)
    torch.manual_seed(run.seed)   # the model's initialization, after the data's draws
    net = build_model(arch["model"], arch["size"], dropout=arch["dropout"], form=arch.get("form"),
                      **arch["dims"])
    return Built(net.to(where.device), arch, data, cfg, reads(run, arch))


def fingerprint(built: Built) -> str:
    """What a checkpoint must match to be resumed."""
    from dataclasses import asdict

    h = hashlib.sha256(json.dumps([built.arch, asdict(built.cfg), built.data.batches.steps,
                                   built.read], sort_keys=True, default=str).encode())
    for path in built.data.files:
        h.update(Path(path).name.encode())
        h.update(Path(path).read_bytes())
    return h.hexdigest()


def train(task, runs: list[Run], params: dict, where: Placement, rank: int = 0) -> list[dict]:
    """Fit `runs` and write each one's model.pt, train.json and, for a task scored as it
    trains, its record; returns their summaries, in their order ([] on a DDP rank other than 0:
    only rank 0 writes). One run trains as itself; several train in the groups
    stacking.ensembles makes of them (runs of one configuration at several seeds, or of
    configurations that differ only in rate, decay or data of the same shapes), each group one
    Ensemble (arithrepro/stacking.py) and each copy built, fed and validated as its own run.
    A group's first run's checkpoint holds the group while it trains and is resumed from.
    A copy whose loss became non-finite writes nothing: once the others are written,
    NonFiniteLoss names it."""
    from arithrepro.observers import NonFiniteLoss
    from arithrepro.stacking import ensembles

    builts = [build(task, r, params, where) for r in runs]
    written, failed = {}, []
    for group in ensembles(builts):
        done, lost = _train_ensemble(task, [runs[i] for i in group], [builts[i] for i in group],
                                     params, where, rank)
        written.update(done)
        failed += lost
    if failed:
        raise NonFiniteLoss("; ".join(failed))
    return [written[r.name] for r in runs if r.name in written]


def _train_ensemble(task, runs: list[Run], builts: list[Built], params: dict, where: Placement,
                    rank: int) -> tuple[dict, list[str]]:
    """Train `runs` as one ensemble: ({run name: summary} of those written, [why each other
    one failed])."""
    from arithrepro.live import Series
    from arithrepro.models.registry import spec_of
    from arithrepro.stacking import stacked
    from arithrepro.train.loop import fit_copies

    first = builts[0]
    net, batches = stacked(builts)
    checkpoint = runs[0].files.checkpoint
    h = hashlib.sha256("".join(fingerprint(b) for b in builts).encode()).hexdigest()
    copies = fit_copies(net, batches, [b.data.valid for b in builts],
                        [b.cfg for b in builts] if len(builts) > 1 else first.cfg,
                        checkpoint, h, spec=spec_of(first.arch),
                        series=[Series(r.files.live, b.read) for r, b in zip(runs, builts)])
    if rank:
        return {}, []
    summaries, failed = {}, []
    for run, built, (result, trained) in zip(runs, builts, copies):
        if trained is None:
            failed.append(f"{run.name}: {result['failed']}")
            continue
        built.net = trained.eval()
        summaries[run.name] = _write(task, run, built, result, params, where, copies=len(runs))
    checkpoint.unlink(missing_ok=True)  # finished: nothing left to resume
    return summaries, failed


def _write(task, run: Run, built: Built, result: dict, params: dict, where: Placement,
           copies: int = 1) -> dict:
    """model.pt, train.json and, for a task scored as it trains, its record and curve; returns
    the summary (train.json's fields). copies: how many runs trained as one ensemble (train_seconds
    is all of theirs)."""
    from arithrepro.io import save_torch, write_frame
    from arithrepro.models.lm import count_params
    from arithrepro.provenance import provenance

    origin = {"train": provenance(built.read, device=where.device, precision=where.precision,
                                  compiled=where.compile, graphs=where.graphs)}
    state = {k: v.cpu() for k, v in built.net.state_dict().items()}
    save_torch(run.files.model, {**built.arch, "state_dict": state})
    summary = write_record(run.files.summary, run, {
        "params": count_params(built.net),
        **{k: v for k, v in result.items() if not k.endswith("_curve")},
        **({"trained_with": copies} if copies > 1 else {})}, origin)
    scored = task.scores(run, built, result, summary, params)
    if scored is not None:
        record, curve = scored
        if curve is not None:
            write_frame(run.files.curve, curve)
        write_record(run.files.record, run, record, origin)
    return summary

