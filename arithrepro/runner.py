"""The one place a run of any task is trained and its files written: runs/<task>/[<group>/]<name>/
model.pt, train.json and live/ (dvclive's series), then what the task's reports read (its
`publish`: the modular studies' curves and records, charlm's records)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from arithrepro.runs import Built, Placement, RunSpec


def fingerprint(built: Built) -> str:
    """What a checkpoint must match to be resumed."""
    from dataclasses import asdict

    h = hashlib.sha256(json.dumps([built.arch, asdict(built.cfg), built.batches.steps, built.read],
                                  sort_keys=True, default=str).encode())
    for path in built.data_files:
        h.update(Path(path).name.encode())
        h.update(Path(path).read_bytes())
    return h.hexdigest()


def train(task, specs: list[RunSpec], params: dict, where: Placement, rank: int = 0,
          checkpoint: Path | None = None) -> list[dict]:
    """Fit the runs `specs` and write each one's model.pt, train.json and, through the task,
    whatever its reports read; returns their records ([] on a DDP rank other than 0: only rank
    0 writes). One run trains as itself; several, one configuration at several seeds, train as
    one Ensemble (arithrepro/ensemble.py), each copy built, fed and validated as its own run.
    `checkpoint` holds them while they train (default: checkpoint.pt in the first run's folder)
    and is resumed from. A copy whose loss became non-finite writes nothing: once the others are
    written, NonFiniteLoss names it."""
    from dataclasses import replace

    from arithrepro.ensemble import ensemble, padding, stacked_batches
    from arithrepro.live import Series
    from arithrepro.models.registry import spec_of
    from arithrepro.observers import NonFiniteLoss
    from arithrepro.train.ensembles import ensemble_of
    from arithrepro.train.loop import fit

    builts = [task.build(s, params, where) for s in specs]
    first = builts[0]
    for spec, built in zip(specs[1:], builts[1:]):
        if built.arch != first.arch or replace(built.cfg, seed=0) != replace(first.cfg, seed=0):
            raise ValueError(f"runs {specs[0].name} and {spec.name}: not one configuration; "
                             "only runs that differ in their seed alone train together")
    model = spec_of(first.arch)
    net = ensemble([b.net for b in builts])
    checkpoint = checkpoint or specs[0].dir / "checkpoint.pt"
    h = hashlib.sha256("".join(fingerprint(b) for b in builts).encode()).hexdigest()
    batches = stacked_batches([b.batches for b in builts], padding(model, first.arch["dims"]))
    ens = ensemble_of(net)
    results = ens.per_copy(fit(net, batches, [b.valid for b in builts], first.cfg, checkpoint, h,
                               spec=model, series=[Series(s.dir / "live", b.read)
                                                   for s, b in zip(specs, builts)]), "results")
    if rank:
        return []
    records, failed = [], []
    for i, (spec, built, result) in enumerate(zip(specs, builts, results)):
        if "failed" in result:
            failed.append(f"{spec.name}: {result['failed']}")
            continue
        built.net = ens.copy_of(i).eval()
        records.append(_write(task, spec, built, result, params, where, copies=len(specs)))
    checkpoint.unlink(missing_ok=True)  # finished: nothing left to resume
    if failed:
        raise NonFiniteLoss("; ".join(failed))
    return records


def _write(task, spec: RunSpec, built: Built, result: dict, params: dict, where: Placement,
           copies: int = 1) -> dict:
    """model.pt, train.json and the task's own files of a trained run; returns the record.
    copies: how many runs trained together (train_seconds is all of theirs)."""
    from arithrepro.io import save_torch, write_json
    from arithrepro.models.lm import count_params
    from arithrepro.provenance import provenance

    origin = provenance(built.read, device=where.device, precision=where.precision,
                        compiled=where.compile, graphs=where.graphs)
    state = {k: v.cpu() for k, v in built.net.state_dict().items()}
    save_torch(spec.dir / "model.pt", {**built.arch, "state_dict": state})
    summary = {k: v for k, v in result.items() if not k.endswith("_curve")}
    record = {"task": spec.task, "model": spec.model, "size": spec.label, "seed": spec.seed,
              "params": count_params(built.net), **summary,
              **({"trained_with": copies} if copies > 1 else {}),
              "provenance": {"train": origin}}
    write_json(spec.dir / "train.json", record)
    task.publish(spec, built, result, record, params)
    return record
