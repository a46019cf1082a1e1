"""A roofline measured on this machine: matmul FLOP/s, memory bandwidth, and what a step costs.

A step takes at least max(FLOPs / peak FLOP/s, bytes / bandwidth). Its arithmetic intensity,
FLOPs per byte, says which bound it meets: below the machine's ridge, peak / bandwidth, a step
waits on memory; above it, on arithmetic. Both peaks are measured here, not looked up.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from minimodel.config import Qwen3Config


def best_time(fn: Callable[[], object], device: str = "cpu", repeats: int = 5) -> float:
    """The fastest of `repeats` runs of fn(), in seconds, after one warm-up run (a shared
    machine only ever makes a run slower, so the minimum is the least noisy estimate)."""
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return min(times)


def measure_matmul_flops(
    n: int = 1024, dtype: torch.dtype = torch.float32, device: str = "cpu", repeats: int = 5
) -> float:
    """FLOP/s of an [n, n] x [n, n] product (2 n^3 FLOPs) through F.linear, the call the model's
    layers make: the compute roof."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    return 2 * n**3 / best_time(lambda: F.linear(a, b), device, repeats)


def measure_bandwidth(nbytes: int = 256 * 2**20, device: str = "cpu", repeats: int = 5) -> float:
    """Bytes/s read from memory: summing a float32 tensor of nbytes reads each byte once and
    does one add per 4 bytes, far below any compute roof. Make nbytes larger than the caches."""
    x = torch.ones(nbytes // 4, device=device)
    return x.nbytes / best_time(lambda: x.sum(), device, repeats)


def layer_cost(
    cfg: Qwen3Config, q_len: int, kv_len: int, batch: int = 1,
    dtype: torch.dtype = torch.bfloat16,
) -> tuple[int, int]:
    """(FLOPs, bytes) of one decoder layer in one step: `batch` requests, each with q_len new
    tokens, the last of which is token kv_len of its sequence.

    Every weight is read once per step and does 2 FLOPs per new token; attention does
    4 * Hq * D FLOPs per (query, key) pair under the causal mask; each request's K/V are read
    once. Norms, RoPE and activations are left out: they are small next to these.
    """
    C, I = cfg.hidden_size, cfg.intermediate_size
    params = 2 * C * cfg.q_size + 2 * C * cfg.kv_size + 3 * C * I  # q, o, k, v, gate, up, down
    pairs = q_len * kv_len - q_len * (q_len - 1) // 2
    flops = batch * (2 * q_len * params + 4 * cfg.num_attention_heads * cfg.head_dim * pairs)
    kv_bytes = 2 * cfg.num_key_value_heads * cfg.head_dim * dtype.itemsize
    return flops, params * dtype.itemsize + batch * kv_len * kv_bytes


def step_cost(
    cfg: Qwen3Config, q_len: int, kv_len: int, batch: int = 1,
    dtype: torch.dtype = torch.bfloat16,
) -> tuple[int, int]:
    """(FLOPs, bytes) of one model step: L layers and the LM head, which reads its [V, C]
    weights once and runs on one row per request (chapter 05)."""
    flops, nbytes = layer_cost(cfg, q_len, kv_len, batch, dtype)
    head = cfg.vocab_size * cfg.hidden_size
    L = cfg.num_hidden_layers
    return L * flops + 2 * batch * head, L * nbytes + head * dtype.itemsize
