"""charlm: character-level language modelling on one corpus (docs/charlm.md; the corpus and
its vocabulary: charlm_corpus.py).

The text is cut into non-overlapping chunks of seq_length + 1 characters (input: the first
seq_length, target: shifted by one) and the chunks are split into train and validation by a
permutation seeded by corpus.seed, the same for every run, so runs of different seeds differ in
their initialization and batches only.

A configuration is one architecture of charlm.models at one schedule of charlm.schedules (a
seq_length and a number of steps); a run is one at a seed, `<model>-<schedule>-<seed>`, a cell of
dvc.yaml's train-charlm.
"""

from __future__ import annotations

from dataclasses import dataclass

from arithrepro.models.registry import MODELS
from arithrepro.runs import Built, Config, Data, Run, data_dir
from arithrepro.schema import ParamsError, choice, integer, list_of, number
from arithrepro.tasks.base import Task
from arithrepro.tasks.charlm_corpus import SOURCES, TIMING_VOCAB, read_corpus
from arithrepro.tasks.charlm_params import (OWN_MODELS, _Architectures, _chars, _path, _prompt,
                                            _rules, _schedules, _text)
from arithrepro.tasks.charlm_stages import stages
from arithrepro.tasks.declared import Report, Stages, Takes


def chunk(ids, seq_length: int):
    """(N, seq_length + 1) non-overlapping chunks; the remainder is dropped."""
    n = len(ids) // (seq_length + 1)
    return ids[:n * (seq_length + 1)].view(n, seq_length + 1)


def split(n: int, val_frac: float, seed: int):
    """Seeded (train, validation) chunk indices; at least one of each."""
    import torch

    if n < 2:
        raise ValueError(f"charlm: the corpus makes {n} chunk(s); raise charlm.corpus.chars "
                         "or lower seq_length")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_val = min(n - 1, max(1, round(val_frac * n)))
    return order[n_val:].sort().values, order[:n_val].sort().values


@dataclass(frozen=True)
class Chunks:
    train: object  # (N, seq_length + 1) LongTensors
    val: object

    @classmethod
    def of(cls, ids, seq_length: int, val_frac: float, seed: int, device) -> "Chunks":
        chunks = chunk(ids, seq_length)
        tr, va = split(len(chunks), val_frac, seed)
        return cls(chunks[tr].to(device), chunks[va].to(device))

    @staticmethod
    def batch(chunks, idx):
        c = chunks[idx]
        x, y = c[:, :-1], c[:, 1:]
        import torch

        return x, y, torch.ones_like(y, dtype=torch.bool)


class CharLMTask(Task):
    name = "charlm"

    @classmethod
    def params_schema(cls) -> dict:
        return {
            "corpus": {"source": choice(*SOURCES), "chars": integer(100), "path": _path,
                       "seed": integer(0), "val_frac": number(0, 1, lo_open=True, hi_open=True)},
            "models": list_of(_text),
            "schedules": list_of(_text),
            "seeds": list_of(integer(0, 2**31 - 1)),
            "architectures": _Architectures(),
            "schedule": _schedules,
            "train": {"lr": number(0, lo_open=True), "batch_size": integer(1),
                      "dropout": number(0, 1, hi_open=True),
                      "eval_every": integer(1), "checkpoint_every": integer(1)},
            "sample": {"prompt": _prompt, "chars": _chars,
                       "temperature": number(0, lo_open=True), "seed": integer(0),
                       "rule": _rules},
            "attention": {"prompt": _text},
            "compute": {"repeats": integer(1), "rounds": integer(1), "warmup": integer(1),
                        "timed": integer(1)},
        }

    @classmethod
    def check_params(cls, params: dict) -> None:
        m = params["charlm"]
        c = m["corpus"]
        if c["source"] == "file" and c["path"] is None:
            raise ParamsError("charlm.corpus.path: missing; the file source reads it")
        for key, within in (("models", "architectures"), ("schedules", "schedule")):
            names, known = m[key], m[within]
            for name in names:
                if name not in known:
                    raise ParamsError(f"charlm.{key}: {name!r} is not one of charlm.{within} "
                                      f"({', '.join(known)})")
        for name in m["sample"]["rule"]:
            if name not in m["architectures"]:
                raise ParamsError(f"charlm.sample.rule.{name}: not one of charlm.architectures "
                                  f"({', '.join(m['architectures'])})")
        prompt = m["attention"]["prompt"]
        for c in TASK.configs(params):
            block = c.settings["schedule"]["seq_length"]
            if MODELS[c.architecture["model"]].context == "max_len" and len(prompt) > block:
                raise ParamsError(f"charlm.attention.prompt: {len(prompt)} characters, longer "
                                  f"than {c.name}'s block of {block}")

    def dims(self, values: dict) -> dict:
        """values: {seq_length: the run's, and vocab_size: the corpus's where it is known (a
        configuration's comes with its data: `data`)}."""
        return {"max_len": values["seq_length"], "pad_id": -1,   # no padding
                **({"vocab_size": values["vocab_size"]} if "vocab_size" in values else {})}

    def listed(self, params: dict) -> list[tuple[tuple, tuple]]:
        """models x schedules, in dvc.yaml's order (train-charlm); a configuration's label is
        its schedule's name."""
        m = params["charlm"]
        return [((name, schedule), tuple(m["seeds"]))
                for name in m["models"] for schedule in m["schedules"]]

    def config(self, params: dict, name: str, schedule: str, seeds=()) -> Config:
        """Architecture `name` (charlm.architectures) on `schedule`: the source's Adam at a
        constant rate, the last state kept; the corpus decides the vocabulary (`data`)."""
        m = params["charlm"]
        arch = dict(m["architectures"][name])
        model = arch.pop("model")
        sched, t = m["schedule"][schedule], m["train"]
        dims = self.dims(sched)
        loop = dict(lr=float(t["lr"]), optimizer="adam", schedule="constant", warmup_frac=0.0,
                    val_every=t["eval_every"], checkpoint_every=t["checkpoint_every"],
                    validate_epochs=False, restore_best=False, eval_batch_size=256)
        return Config("charlm", name, schedule, seeds,
                      {"model": model, "size": arch, "dropout": float(t["dropout"]), "dims": dims},
                      loop, {"model": model, "size": arch, "schedule": sched, "train": t,
                             "corpus": m["corpus"]}, key=(name, schedule),
                      stage="train-charlm", item=(name, schedule))

    def data(self, run: Run, params: dict, device, trial: bool = False) -> Data:
        """The corpus in chunks of the schedule's length, and its vocabulary; trial: random
        characters of a 96-character vocabulary instead (the real corpus may be out of reach,
        and the vocabulary only sizes the embedding and the output layer)."""
        import torch

        from arithrepro.batches import EpochBatches

        s = run.config.settings
        corpus, sched = s["corpus"], s["schedule"]
        if trial:
            ids = torch.randint(len(TIMING_VOCAB.chars), (corpus["chars"],),
                                generator=torch.Generator().manual_seed(0))
            vocab, files = TIMING_VOCAB, []
        else:
            text, vocab, _ = read_corpus(data_dir("charlm"))
            ids, files = vocab.encode(text), [data_dir("charlm") / "corpus.txt"]
        chunks = Chunks.of(ids, sched["seq_length"], corpus["val_frac"], corpus["seed"], device)
        batches = EpochBatches(lambda idx: Chunks.batch(chunks.train, idx), len(chunks.train),
                               s["train"]["batch_size"], 1, run.seed, device,
                               steps=sched["steps"])
        return Data(batches, (lambda idx: Chunks.batch(chunks.val, idx), len(chunks.val)),
                    architecture={"dims": {"vocab_size": len(vocab)}, "vocab": vocab.chars},
                    files=files,
                    notes={"train_chunks": len(chunks.train), "val_chunks": len(chunks.val)})

    def scores(self, run: Run, built: Built, result: dict, summary: dict, params: dict):
        """Final and best validation loss, bits per character, parameters, train_seconds,
        tokens/s (metrics/charlm/runs/<run>.json); no curve beside dvclive's."""
        import math

        final = float(result["val_curve"][-1]["val_loss"])
        return {"params": summary["params"], "seq_length": built.read["settings"]["schedule"]["seq_length"],
                "steps": result["steps"], "final_val_loss": final,
                "best_val_loss": result["best_val_loss"], "best_step": result["best_step"],
                "final_bpc": final / math.log(2), "best_bpc": result["best_val_loss"] / math.log(2),
                "train_seconds": result["train_seconds"], "tokens_per_s": result["tokens_per_s"],
                "vocab_size": built.arch["dims"]["vocab_size"], **built.data.notes}, None


TASK = CharLMTask()

STAGES = Stages("RNN, GRU and transformer character LMs, and what they cost",
                run_keys=("models", "schedules", "seeds"), images=("plots/charlm/attention",),
                make=stages)
REPORT = Report(("final_bpc",))
TAKES = Takes(own=OWN_MODELS, decodes=True, priced=True)   # the compute table prices every model
