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


def train(task, spec: RunSpec, params: dict, where: Placement, rank: int = 0) -> dict:
    """Fit the run (resuming from its checkpoint) and write model.pt, train.json and, through
    the task, whatever its reports read. Returns train.json's record ({} on a DDP rank
    other than 0: only rank 0 writes)."""
    from arithrepro.io import save_torch, write_json
    from arithrepro.live import Series
    from arithrepro.models.lm import count_params
    from arithrepro.models.registry import MODELS
    from arithrepro.provenance import provenance
    from arithrepro.train import fit

    built = task.build(spec, params, where)
    origin = provenance(built.read, device=where.device, precision=where.precision,
                        compiled=where.compile)
    result = fit(built.net, built.batches, built.valid, built.cfg, spec.dir / "checkpoint.pt",
                 fingerprint(built), spec=MODELS[built.arch["model"]],
                 series=Series(spec.dir / "live", built.read))
    if rank:
        return {}
    state = {k: v.cpu() for k, v in built.net.state_dict().items()}
    save_torch(spec.dir / "model.pt", {**built.arch, "state_dict": state})
    summary = {k: v for k, v in result.items() if not k.endswith("_curve")}
    record = {"task": spec.task, "model": spec.model, "size": spec.label, "seed": spec.seed,
              "params": count_params(built.net), **summary, "provenance": {"train": origin}}
    write_json(spec.dir / "train.json", record)
    task.publish(spec, built, result, record, params)
    (spec.dir / "checkpoint.pt").unlink(missing_ok=True)  # finished: nothing left to resume
    return record
