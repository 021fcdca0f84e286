"""The loop's modes and which combinations of them it runs: one table, checked once when a step
is made, each refusal one line."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Modes:
    stacked: bool       # an Ensemble's copies, run as one vmapped program
    device: str         # "cpu", "cuda", ...
    world: int          # data-parallel processes
    precision: str      # fp32 | bf16 | fp16
    graphs: bool        # the static step (a CUDA graph per shape on a GPU)
    micro_batches: int  # pieces a batch is cut into (on a CPU; a GPU runs it whole)
    plain_loss: bool    # neither the progressive loss nor outputs_from
    causal: bool        # the model's registry entry

    @property
    def pieces(self) -> int:
        return self.micro_batches if self.device == "cpu" else 1


RULES = (
    (lambda m: m.micro_batches > 1 and not (m.plain_loss and m.causal),
     "micro_batches > 1 needs a causal model and the plain loss"),
    (lambda m: m.stacked and m.pieces > 1,
     "micro_batches > 1 cuts one model's batch into pieces; an ensemble's copies run whole "
     "batches (micro_batches: 1)"),
    (lambda m: m.stacked and m.precision == "fp16",
     "precision fp16: its gradient scaler would skip every copy's step when one copy overflows; "
     "an ensemble trains in fp32 or bf16"),
    (lambda m: m.graphs and m.world > 1,
     "graphs: one process (DistributedDataParallel's collectives are not captured here)"),
    (lambda m: m.graphs and m.precision == "fp16",
     "graphs: fp16's gradient scaler reads the device every step; train in bf16 or fp32"),
    (lambda m: m.graphs and m.pieces > 1,
     "graphs: micro_batches > 1 cut batches by their values (micro_batches: 1)"),
)


def check(modes: Modes) -> None:
    """ValueError with the first rule `modes` breaks."""
    for broken, why in RULES:
        if broken(modes):
            raise ValueError(why)
