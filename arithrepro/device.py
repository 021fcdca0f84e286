"""Where and in what precision the training loop runs: params `device` and `precision`.

device: auto (CUDA when torch sees a GPU, else the CPU) | cpu | cuda.
precision: auto (each task as its source trained: fp32, except a task whose source trained in
mixed precision (abacus), which gets bf16 autocast on GPUs that have it and fp16 autocast with
a gradient scaler on the others; fp32 on the CPU) | fp32 | bf16 | fp16 (every task).
Weights and optimizer state stay fp32 in every case: autocast runs the matmuls in the lower
precision only.
"""

from __future__ import annotations

import contextlib
import os
import sys

from arithrepro.schema import ParamsError

DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")


# What a GPU driver torch could use leaves on Linux: NVIDIA's, ROCm's (/dev/kfd), WSL's (/dev/dxg).
# Where none is, torch.cuda.is_available() is False, and asking it costs `import torch` (over a
# second in every command that only schedules or reports).
GPU_DRIVER_PATHS = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/kfd", "/dev/dxg")


def no_gpu_driver() -> bool:
    """True where no GPU can be visible to torch, decided without importing it (Linux only;
    elsewhere, and wherever a driver is present, torch is asked)."""
    return sys.platform.startswith("linux") and not any(map(os.path.exists, GPU_DRIVER_PATHS))


def resolve_device(device: str) -> str:
    if device == "cpu" or (device == "auto" and no_gpu_driver()):
        return "cpu"
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ParamsError("device = 'cuda': torch sees no CUDA device (torch.cuda.is_available() "
                          "is False); use auto or cpu")
    return device


def resolve_precision(precision: str, device: str, source: str = "fp32") -> str:
    """`source`: the task's own precision (Task.precision), fp32 or mixed."""
    import torch

    if precision == "auto":
        if device != "cuda" or source == "fp32":
            return "fp32"
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if precision == "fp16" and device == "cpu":
        raise ParamsError("precision = 'fp16': half-precision autocast with a gradient scaler is "
                          "for CUDA; on the CPU use fp32 or bf16")
    return precision


def autocast(device_type: str, precision: str):
    """The forward pass's precision context: nothing for fp32."""
    import torch

    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type, dtype=dtype)


def to_device(device, *tensors):
    """Batches drawn on the host, moved to `device`: on CUDA through pinned memory and without
    blocking, so the copy overlaps the GPU's work on the step before."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return tuple(t.to(device) for t in tensors)
    return tuple(t.pin_memory().to(device, non_blocking=True) for t in tensors)


def visible_gpus() -> list[str]:
    """The GPUs the stages may use, by CUDA id: ARITHREPRO_GPUS where set (a comma-separated
    list: some of the machine's, for this run only), else CUDA_VISIBLE_DEVICES's list, else
    every device torch counts."""
    for name in ("ARITHREPRO_GPUS", "CUDA_VISIBLE_DEVICES"):
        if os.environ.get(name, "").strip():
            return [g.strip() for g in os.environ[name].split(",") if g.strip()]
    if no_gpu_driver():
        return []
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]
