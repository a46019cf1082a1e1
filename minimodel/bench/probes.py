"""The memory roof, probed three ways: a batch-1 decode step streams every weight from memory
once, so the fastest it can run is bytes / (the rate at which this machine streams bytes).

No single probe finds that rate on every machine: a sum keeps one core's adder busy, a copy
also writes, a matrix-vector product reads the way a decode step does but through a library's
kernel. Each probe reads a buffer far larger than the caches and keeps the best of a few runs
(a shared machine only ever makes a run slower); the roof is the fastest probe.

- `sum`:  x.sum() over a float32 buffer: its bytes, read once (chapter 09's probe).
- `copy`: y.copy_(x) into a buffer made beforehand: its bytes read plus its bytes written.
- `gemv`: one row times a [rows, cols] float32 weight through the fastest formulation that
  `minimodel.kernels.matmul.candidates` offers for it: the weight's bytes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minimodel.kernels.matmul import candidates, time_formulations
from minimodel.kernels.roofline import best_time

PROBES = ("sum", "copy", "gemv")
GEMV_COLS = 1024  # the inputs of the probe's weight: a 0.6B model's hidden size


def probe_sum(nbytes: int, device: str = "cpu", repeats: int = 10) -> float:
    """Bytes/s of x.sum() over a float32 buffer of `nbytes` (each byte read once)."""
    x = torch.ones(nbytes // 4, device=device)
    return x.nbytes / best_time(lambda: x.sum(), device, repeats)


def probe_copy(nbytes: int, device: str = "cpu", repeats: int = 10) -> float:
    """Bytes/s of y.copy_(x), x and y float32 of `nbytes` each: 2 * nbytes moved per copy."""
    x = torch.ones(nbytes // 4, device=device)
    y = torch.empty_like(x)
    return 2 * x.nbytes / best_time(lambda: y.copy_(x), device, repeats)


def probe_gemv(nbytes: int, device: str = "cpu", repeats: int = 10,
               cols: int = GEMV_COLS) -> tuple[float, str]:
    """(bytes/s, formulation) of one row times a float32 weight [nbytes / (4 cols), cols]: the
    fastest of the formulations this machine offers for it (on CUDA: F.linear)."""
    weight = torch.randn(max(1, nbytes // (4 * cols)), cols, device=device)  # [rows, cols]
    if device != "cpu":
        x = torch.randn(1, cols, device=device)
        return weight.nbytes / best_time(lambda: F.linear(x, weight), device, repeats), "linear"
    seconds = time_formulations(weight, 1, candidates(weight), repeats)
    best = min(seconds, key=seconds.__getitem__)
    return weight.nbytes / seconds[best], best


def measure_probes(nbytes: int, device: str = "cpu", repeats: int = 10
                   ) -> tuple[dict[str, float], str]:
    """({probe: bytes/s}, the formulation the gemv probe ran), each probe over buffers of
    `nbytes` (make it larger than the caches)."""
    gemv, formulation = probe_gemv(nbytes, device, repeats)
    rates = {"sum": probe_sum(nbytes, device, repeats),
             "copy": probe_copy(nbytes, device, repeats), "gemv": gemv}
    return rates, formulation


def roof(probes: dict[str, float]) -> float:
    """The memory roof, bytes/s: the fastest of the probes."""
    return max(probes[name] for name in PROBES)
