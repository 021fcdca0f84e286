"""A run's training settings and its learning-rate schedule."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from arithrepro.runs import PER_COPY


@dataclass(frozen=True)
class TrainConfig:
    lr: float
    seed: int
    optimizer: str = "lamb"     # lamb | adam | adamw
    schedule: str = "linear"    # after the warm-up: linear (decay to 0 at the end) | constant
    warmup_frac: float = 0.1
    weight_decay: float = 0.0
    beta2: float = 0.999        # Adam's second-moment decay (adam, adamw)
    eps: float = 1e-8           # added to Adam's update denominator (adam, adamw; torch's default)
    progressive: bool = False   # ½·(loss at R recurrences + loss at a random n in 1..R)
    val_every: int = 0          # also validate every this many steps (0: at epoch ends only)
    checkpoint_every: int = 100
    eval_batch_size: int = 1024
    validate_epochs: bool = True  # validate at every epoch end (else every val_every and at the end)
    restore_best: bool = True   # end with the best-validation state (else the last one)
    outputs_from: int = 0       # the loss scores positions from here on only (model skips the rest)
    precision: str = "fp32"     # fp32 | bf16 (autocast) | fp16 (autocast and a gradient scaler)
    compile: bool | str = False  # run the forward and backward through torch.compile (a string:
                                 # its mode, e.g. "reduce-overhead" for CUDA graphs)
    sync_every: int = 50        # read the losses back to the host this often (and at every
                                # validation and checkpoint), not every step
    micro_batches: int = 1      # split each batch into this many length-sorted pieces, each cut
                                # to its longest row; gradients add up to the whole batch's
                                # (causal models and the plain loss only; see micro_batches())
    grad_clip: float = 0.0      # scale the gradients to this L2 norm at most before each step
                                # (torch's clip_grad_norm_; an ensemble's copies each their own);
                                # 0: no clipping
    graphs: bool = False        # every step at a static shape, reading nothing from the device
                                # (Step); on a GPU each shape's whole step is captured once as a
                                # CUDA graph and replayed




def shared(cfgs: list[TrainConfig]) -> TrainConfig:
    """The settings copies trained as one ensemble share (the first's, with its own per-copy
    values); ValueError where they differ in anything but PER_COPY."""
    first = asdict(cfgs[0])
    for i, cfg in enumerate(cfgs[1:], 1):
        differ = [k for k, v in asdict(cfg).items() if k not in PER_COPY and v != first[k]]
        if differ:
            raise ValueError(f"copy {i}: its training settings differ from copy 0's in "
                             f"{', '.join(differ)}; copies may differ in {', '.join(PER_COPY)} only")
    return cfgs[0]


def lr_factor(step: int, total: int, warmup: int, schedule: str = "linear") -> float:
    """Linear warm-up from 0 over `warmup` steps, then linear decay to 0 at `total` or constant.
    As in the expr source's scheduler: the factor at step s < warmup is s / warmup, so the first
    step runs at rate 0 (the optimizer's moments still take its gradient)."""
    if step < warmup:
        return step / warmup
    if schedule == "constant":
        return 1.0
    return max(0.0, (total - step) / max(1, total - warmup))
