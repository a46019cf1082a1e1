"""The decode curve: what one decode step of the engine costs with B requests running.

A decode step reads every weight once, whatever B is, plus the KV cache of each request's
context; its arithmetic grows with B. While memory binds, a step of 8 requests should cost
little more than a step of 1, so tokens/s grow with B until the arithmetic catches up.

`decode_curve` prefills B_max requests of the same prompt length once, then times `llm.step()`
calls with B_max requests decoding, aborts requests down to the next smaller B and times
again, and so on down to B = 1: every timed step is a pure decode step of exactly B requests
(checked against the batch the scheduler ran), never a prefill.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from torch import nn

from minimodel.bench.runners import greedy
from minimodel.bench.workloads import make_requests
from minimodel.config import Qwen3Config
from minimodel.engine import LLM
from minimodel.engine.quantization import linear_layers
from minimodel.kernels.roofline import step_cost

CURVE_BATCHES = (1, 2, 4, 8, 16, 32)  # requests decoding together (the kernels' row buckets)


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a tensor stores; a torchao quantized weight counts its inner tensors (data,
    scales, zero points)."""
    if type(t) in (torch.Tensor, nn.Parameter):
        return t.numel() * t.element_size()
    names, _ = t.__tensor_flatten__()  # type: ignore[attr-defined]
    return sum(tensor_bytes(getattr(t, name)) for name in names)


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the weights a decode step reads: every linear layer and the LM head, each
    once (the embedding table is left out: a step reads one row of it per request)."""
    weights = {id(m.weight): m.weight for _, m in linear_layers(model)}
    return sum(tensor_bytes(w) for w in weights.values())


def decode_bytes(cfg: Qwen3Config, weights: int, context_tokens: int,
                 kv_dtype: torch.dtype) -> int:
    """Bytes one decode step reads: the weights once, plus the K and V of `context_tokens`
    cached tokens (summed over the step's requests) in every layer."""
    return weights + context_tokens * cfg.kv_bytes_per_token(kv_dtype)


def dense_weight_bytes(cfg: Qwen3Config, dtype: torch.dtype) -> int:
    """The weight bytes of an unquantized model, as chapter 09's step_cost counts them."""
    return step_cost(cfg, 1, 0, 1, dtype)[1]


def decode_curve(llm: LLM, batches: tuple[int, ...], prompt_len: int, steps: int,
                 vocab: int, weights: int, seed: int = 6) -> list[dict[str, Any]]:
    """One point per B in `batches`: the best and the median of `steps` timed decode steps
    with B requests (after one untimed step at that B), what a step reads at that B, and the
    best step over the smallest B's (`step_over_batch1`: B = 1 with the default batches).

    llm must be idle and able to hold max(batches) requests of prompt_len + the steps.
    """
    top = max(batches)
    per_request = len(batches) * (steps + 1) + 4  # new tokens: no request ends while timed
    requests = make_requests(top, (prompt_len, prompt_len), (1, 1), seed, vocab)
    ids = [llm.add_request(r.prompt, greedy(per_request)) for r in requests]
    try:
        while any(llm.get_request(i).num_output_tokens == 0 for i in ids):  # prefill
            llm.step()
        points = []
        for batch in sorted(batches, reverse=True):
            for rid in ids[batch:]:
                llm.abort(rid)
            ids = ids[:batch]
            llm.step()  # untimed: a new row count may make the libraries set up
            times, context = [], []
            for _ in range(steps):
                context.append(sum(llm.get_request(i).num_tokens for i in ids))
                start = time.perf_counter()
                llm.step()
                times.append(time.perf_counter() - start)
                ran = llm.last_batch
                assert ran is not None and not ran.is_prefill and len(ran.seqs) == batch, ran
            best, tokens = min(times), round(statistics.mean(context))
            nbytes = decode_bytes(llm.cfg, weights, tokens, llm.dtype)
            points.append({"batch": batch, "step_s": best,
                           "step_median_s": statistics.median(times),
                           "context_tokens": tokens,  # summed over the requests
                           "context_per_request": statistics.mean(context) / batch,
                           "bytes_per_step": nbytes,
                           "tok_per_s": batch / best, "bytes_per_s": nbytes / best})
    finally:
        for rid in ids:
            llm.abort(rid)
    points.reverse()  # B ascending
    one = points[0]["step_s"]
    for p in points:
        p["step_over_batch1"] = p["step_s"] / one
    return points


def add_floor(points: list[dict[str, Any]], floor: dict[int, float] | None) -> None:
    """Each point of the curve gets the products' floor at its B (bench/floor.py):
    `products_in_cache_s`, and `floor_over_batch1`, that over the first point's step: an
    estimate of the least `step_over_batch1` the kernels allow. Nothing added where there is
    no floor."""
    if not floor:
        return
    one = points[0]["step_s"]
    for p in points:
        p["products_in_cache_s"] = floor[p["batch"]]
        p["floor_over_batch1"] = floor[p["batch"]] / one
