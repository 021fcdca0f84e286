"""A run's checkpoint: everything a killed run needs to finish as if it had never stopped (the
model, the optimizer, the schedule, the gradient scaler, the random state and the loop's state),
written atomically every `checkpoint_every` steps. A file that cannot be resumed is set aside,
never trusted and never lost."""

from __future__ import annotations

import copy
from dataclasses import asdict, fields
from pathlib import Path

import torch

from arithrepro.io import save_torch

# What a checkpoint must hold to be resumed, besides the loop's state (scaler and cuda_rng may
# be absent).
KEYS = ("model", "optimizer", "scheduler", "rng")


class Checkpoint:
    def __init__(self, path: Path, fingerprint: str, rank: int = 0):
        self.path, self.fingerprint, self.rank = Path(path), fingerprint, rank

    def resume(self, parts, states: list) -> bool:
        """Restore an unfinished run with this fingerprint into `parts` (model, opt, sched,
        scaler) and `states` (the loop's state: one, or one per copy of an ensemble). One that
        cannot be read or does not fit is set aside and the run starts from step 0: a damaged
        file must neither block the run nor be lost."""
        if not self.path.is_file():
            return False
        try:
            ck = torch.load(self.path, map_location="cpu", weights_only=False)
        except Exception as err:  # a cut-short zip, random bytes, a pickle of something else
            return self._set_aside(f"unreadable ({err})")
        if not isinstance(ck, dict):
            return self._set_aside(f"not a checkpoint (a {type(ck).__name__})")
        if ck.get("fingerprint") != self.fingerprint or ck.get("finished"):
            return False  # another configuration, or a finished run: start afresh
        names = [f.name for f in fields(states[0])]
        if len(states) > 1:  # an ensemble's: one state per copy
            rows = ck.get("copies")
            if (not isinstance(rows, list) or len(rows) != len(states)
                    or not all(isinstance(r, dict) for r in rows)):
                return self._set_aside(f"not the checkpoint of {len(states)} copies")
        else:
            rows = [ck]
        # `failed` (an ensemble's stopped copy) is newer than some checkpoints: absent is none
        missing = [k for k in KEYS if k not in ck] + [
            k for k in names if k != "failed" and any(k not in row for row in rows)]
        if missing:
            return self._set_aside(f"no {', '.join(missing)}")
        before = _snapshot(parts)
        try:
            _restore(ck, parts)
        except Exception as err:
            # a load that failed part way (load_state_dict copies the weights that fit before
            # it raises) must not leave the fresh run half-restored
            _restore(before, parts)
            return self._set_aside(f"does not fit this run ({err})")
        for state, row in zip(states, rows):
            for name in names:
                if name in row:
                    setattr(state, name, row[name])
        return True

    def save(self, parts, states: list, cfg, finished: bool) -> None:
        if self.rank:
            return  # only rank 0 writes
        rows = [{f.name: getattr(st, f.name) for f in fields(st)} for st in states]
        save_torch(self.path, {
            "fingerprint": self.fingerprint, "finished": finished, "config": asdict(cfg),
            "model": parts.model.state_dict(), "optimizer": parts.opt.state_dict(),
            "scheduler": parts.sched.state_dict(), "scaler": parts.scaler.state_dict(),
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            **(rows[0] if len(rows) == 1 else {"copies": rows})})

    def _set_aside(self, problem: str) -> bool:
        """Rename a checkpoint that cannot be resumed, with one warning; returns False."""
        if self.rank == 0:  # every rank reads the same file; one moves it
            import warnings

            from arithrepro.io import one_line, set_aside

            moved = set_aside(self.path, "unreadable")
            warnings.warn(f"{self.path}: {one_line(problem)}; moved to {moved}, training from "
                          "step 0", stacklevel=4)
        return False


def _snapshot(parts) -> dict:
    """The objects' state laid out as a checkpoint, to undo a resume that failed."""
    return {"model": {k: v.detach().clone() for k, v in parts.model.state_dict().items()},
            "optimizer": copy.deepcopy(parts.opt.state_dict()),
            "scheduler": copy.deepcopy(parts.sched.state_dict()),
            "scaler": copy.deepcopy(parts.scaler.state_dict()), "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _restore(ck: dict, parts) -> None:
    parts.model.load_state_dict(ck["model"])
    parts.opt.load_state_dict(ck["optimizer"])
    parts.sched.load_state_dict(ck["scheduler"])
    if ck.get("scaler"):
        parts.scaler.load_state_dict(ck["scaler"])
    torch.set_rng_state(ck["rng"])
    if ck.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(ck["cuda_rng"])
