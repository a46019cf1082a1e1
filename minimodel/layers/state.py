"""Which rank this process is and how many there are, read by the layers when they are built.

`tensor_parallel(rank, size)` sets it for the modules created inside the `with`; outside, every
layer is built for one rank (rank 0 of 1) and never communicates. The layers keep the values
they were built with, so a model built for rank 1 of 2 stays that even after the `with`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

_TP: tuple[int, int] = (0, 1)


class TPConfigError(ValueError):
    """A tensor-parallel size that this model or this machine cannot run."""


def get_tp() -> tuple[int, int]:
    """(rank, size) for layers built now."""
    return _TP


@contextlib.contextmanager
def tensor_parallel(rank: int, size: int) -> Iterator[None]:
    """Build layers for `rank` of `size` inside the block."""
    global _TP
    if not 0 <= rank < size:
        raise ValueError(f"rank must be in [0, {size}), got {rank}.")
    old, _TP = _TP, (rank, size)
    try:
        yield
    finally:
        _TP = old


def divide(n: int, d: int, what: str) -> int:
    if n % d:
        raise TPConfigError(f"{what} ({n}) is not divisible by tensor_parallel_size={d}.")
    return n // d


def local_heads(num_heads: int, num_kv_heads: int, size: int) -> tuple[int, int, int]:
    """(query heads, KV heads, KV replicas) of one rank out of `size`.

    Query heads divide by the rank count. KV heads too when there are at least as many as
    ranks; with fewer KV heads than ranks (as vLLM does) each rank holds ONE KV head, the one its
    query heads read, so each KV head is replicated on size / num_kv_heads ranks.
    """
    hq = divide(num_heads, size, "num_attention_heads")
    if num_kv_heads >= size:
        return hq, divide(num_kv_heads, size, "num_key_value_heads"), 1
    if size % num_kv_heads:
        raise TPConfigError(
            f"tensor_parallel_size={size} is more than num_key_value_heads={num_kv_heads} but "
            "not a multiple of it, so the KV heads cannot be replicated evenly."
        )
    return hq, 1, size // num_kv_heads


def check_tensor_parallel_size(size: object, cfg, device_type: str, available: int) -> int:
    """Raise TPConfigError unless `size` ranks can run `cfg` here; returns the size."""
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise TPConfigError(f"tensor_parallel_size must be an integer >= 1, got {size!r}.")
    if size == 1:
        return 1
    unit = "GPUs" if device_type == "cuda" else "CPU cores"
    if size > available:
        raise TPConfigError(
            f"tensor_parallel_size={size} needs {size} {unit}, but this machine has {available}."
        )
    local_heads(cfg.num_attention_heads, cfg.num_key_value_heads, size)
    divide(cfg.intermediate_size, size, "intermediate_size")
    return size
