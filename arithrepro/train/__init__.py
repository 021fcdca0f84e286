"""The one training loop, in layers (docs/design.md, "The training loop", draws them):

- loop.py: `fit`, the loop itself, top to bottom (`fit_copies`: each copy's result and model);
- track.py: each copy's state, the losses still on the device, observers, validation, results;
- step.py: `Step` checks the modes once (modes.py, one table) and makes the eager step, or the
  static one (graphs.py: a CUDA graph per shape on a GPU);
- ensembles.py: what the loop trains is an ensemble: one model is an ensemble of one, an
  Ensemble's copies are stacked; the two differ only in the methods it names;
- parts.py: the optimizer, its schedule, the gradient scaler, the runner (DDP, torch.compile);
- losses.py: the losses and the validation loss;
- micro.py: the length-sorted pieces a batch is cut into for one model on a CPU;
- config.py: TrainConfig and the learning-rate schedule.

On any device, in fp32 or under bf16/fp16 autocast, optionally through torch.compile, and
data-parallel under torchrun; a checkpoint lets a killed run finish bit-identical (on CPU) to
an uninterrupted one. Everything random is derived from the seed: the model's initialization
(the caller seeds torch before building it), the batches (a pure function of the step: arithrepro/batches.py), and
dropout, random offsets and random depths (the global generator, whose state is in the
checkpoint).
"""
