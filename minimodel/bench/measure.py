"""How a run is measured: wall time with CUDA synchronized, peak memory, and memory given back
between systems."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch


@contextmanager
def peak_memory(device: str) -> Iterator[dict[str, float]]:
    """Peak memory while the block runs, in GiB: GPU allocated on CUDA, else process RSS
    (sampled every 20 ms)."""
    result: dict[str, float] = {}
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        yield result
        torch.cuda.synchronize()
        result["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        return
    import psutil

    proc, peak, stop = psutil.Process(), [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            stop.wait(0.02)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield result
    finally:
        stop.set()
        thread.join()
        result["peak_gib"] = max(peak[0], proc.memory_info().rss) / 2**30


def timed(fn: Callable[[], Any], device: str) -> tuple[Any, float]:
    """(fn(), seconds), synchronizing CUDA around it."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def free_memory() -> None:
    """Collect garbage and empty CUDA's cache, so the next system starts with the memory free."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
