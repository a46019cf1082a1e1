"""Checks of ch09.predict_step_seconds: the shortest time one decode step can take on a machine
with a given memory bandwidth and compute peak, from the bytes it reads and the FLOPs it does.

A decode step of B requests, each with kv_len tokens in the cache (its new one included), reads
every weight of the linear layers and the LM head once, in its storage format, and each
request's K and V in every layer; it does 2 FLOPs per weight per request and attention's
4·Hq·D per cached token per layer per request. Its time is at least
max(bytes / bandwidth, FLOPs / peak_flops).

Formats (what the engine's weights hold through torchao, chapter 09, section 7): float32 and
bfloat16 weights take 4 and 2 bytes; int8 takes 1 byte per weight and a float32 scale per output
row; int4 half a byte per weight and a bfloat16 scale and zero point per group of 128 inputs of
a row. Activations and the KV cache are float32 for float32 weights and bfloat16 otherwise.

The expected values come from the package's step_cost (FLOPs, and the bytes of a bfloat16 or
float32 step) with the quantized weights' bytes put in place of the bfloat16 ones.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from minimodel.checkpoints import SHAPES
from minimodel.config import Qwen3Config
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import Text, tr
from minimodel.kernels.roofline import step_cost

FORMATS = ("float32", "bfloat16", "int8", "int4")
GROUP = 128  # int4: inputs per group that share a scale and a zero point
_REL = 1e-9  # counts of bytes and FLOPs are exact; only the division rounds


def _matrices(cfg: Qwen3Config) -> list[tuple[int, int]]:
    """(out, in) of every weight matrix a decode step reads: q, k, v, o, gate, up, down in each
    of the L layers, and the LM head [V, C]."""
    C, I = cfg.hidden_size, cfg.intermediate_size
    layer = [(cfg.q_size, C), (cfg.kv_size, C), (cfg.kv_size, C), (C, cfg.q_size),
             (I, C), (I, C), (C, I)]
    return layer * cfg.num_hidden_layers + [(cfg.vocab_size, C)]


def _matrix_bytes(out: int, inp: int, weights: str) -> float:
    """Bytes of one [out, inp] weight matrix stored as `weights`."""
    if weights == "int8":
        return out * inp + 4 * out  # the integers, a float32 scale per output row
    if weights == "int4":
        return out * inp / 2 + 2 * 2 * out * inp / GROUP  # two per byte; scale + zero (bf16)
    return out * inp * (4 if weights == "float32" else 2)


def _act_dtype(weights: str) -> torch.dtype:
    return torch.float32 if weights == "float32" else torch.bfloat16


@dataclass(frozen=True)
class _Count:
    """What a prediction is made of, right or with one classic mistake."""

    flops: float
    weight_bytes: float
    kv_bytes: float
    combine: str = "max"  # or "sum", or "memory" (the memory roof alone)
    unit: float = 1.0  # 1e3: milliseconds

    def seconds(self, bandwidth: float, peak: float) -> float:
        memory = (self.weight_bytes + self.kv_bytes) / bandwidth
        compute = self.flops / peak
        total = {"max": max(memory, compute), "sum": memory + compute, "memory": memory}
        return total[self.combine] * self.unit


def _count(cfg: Qwen3Config, batch: int, kv_len: int, weights: str) -> _Count:
    """The right count: step_cost's FLOPs and K/V bytes, the weights in their format."""
    dtype = _act_dtype(weights)
    flops, nbytes = step_cost(cfg, 1, kv_len, batch, dtype)
    plain = sum(out * inp for out, inp in _matrices(cfg)) * dtype.itemsize
    weight_bytes = sum(_matrix_bytes(out, inp, weights) for out, inp in _matrices(cfg))
    return _Count(flops, weight_bytes, nbytes - plain)


def _mistakes(cfg: Qwen3Config, batch: int, kv_len: int, weights: str) -> list[tuple[_Count, Text]]:
    """Predictions with one classic mistake each, and the hint that names it (a hint starts with
    a space)."""
    right = _count(cfg, batch, kv_len, weights)
    mats = _matrices(cfg)
    C, L = cfg.hidden_size, cfg.num_hidden_layers
    attn_flops = 4 * batch * L * cfg.num_attention_heads * cfg.head_dim * kv_len
    kv_item = _act_dtype(weights).itemsize
    found = [
        (replace(right, weight_bytes=right.weight_bytes * batch),
         tr(" It reads the weights once per request; a step reads each weight once and "
            "multiplies it by all B rows, which is what batching buys.")),
        (replace(right, kv_bytes=0), tr(" It leaves out the K/V cache: each request reads the K "
                                        "and V of its kv_len tokens in every layer.")),
        (replace(right, kv_bytes=right.kv_bytes / L), tr(" Its K/V bytes are one layer's: every "
                                                         "one of the L layers reads its own K "
                                                         "and V.")),
        (replace(right, kv_bytes=right.kv_bytes / 2),
         tr(" Its K/V bytes count K or V, not both.")),
        (replace(right, combine="sum"), tr(" It adds the memory time and the compute time; on "
                                           "the roofline a step takes the larger of the two (the "
                                           "reads and the arithmetic overlap).")),
        (replace(right, combine="memory"), tr(" It is the memory time alone; where FLOPs / peak "
                                              "is larger, the compute roof is the bound.")),
        (replace(right, flops=right.flops - attn_flops), tr(" It leaves out attention's FLOPs, "
                                                            "4·Hq·D per cached token per layer "
                                                            "per request.")),
        (replace(right, flops=right.flops - batch * sum(o * i for o, i in mats)),
         tr(" It counts 1 FLOP per weight and request: a multiply and an add are 2.")),
        (replace(right, weight_bytes=right.weight_bytes - _matrix_bytes(*mats[-1], weights)),
         tr(" It leaves out the LM head, [V, C], the largest single matrix of a small model.")),
        (replace(right, weight_bytes=right.weight_bytes
                 - L * (_matrix_bytes(C, cfg.q_size, weights) - _matrix_bytes(C, C, weights))
                 - L * (_matrix_bytes(cfg.q_size, C, weights) - _matrix_bytes(C, C, weights))),
         tr(" It takes q and o as [C, C]; they are [Hq·D, C] and [C, Hq·D], and Hq·D need not "
            "equal C.")),
        (replace(right, unit=1e3), tr(" It is in milliseconds; return seconds.")),
    ]
    if weights in ("int8", "int4"):
        found += [
            (replace(right, kv_bytes=right.kv_bytes / kv_item * (1 if weights == "int8" else 0.5)),
             tr(" Its K/V are in the weights' format; quantization here is weight-only, and the "
                "K/V cache stays bfloat16.")),
            (replace(right, weight_bytes=right.weight_bytes - _matrix_bytes(*mats[-1], weights)
                     + 2 * mats[-1][0] * mats[-1][1]),
             tr(" Its LM head is bfloat16; the engine quantizes the LM head like every linear "
                "layer.")),
        ]
    if weights == "int8":
        found.append((replace(right, weight_bytes=sum(o * i for o, i in mats)),
                      tr(" It leaves out the scales: a float32 scale (4 bytes) per output row.")))
    if weights == "int4":
        halves = sum(o * i for o, i in mats) / 2
        found += [
            (replace(right, weight_bytes=halves), tr(" It leaves out the scales and zero points: "
                                                     "a bfloat16 scale and zero point (4 bytes) "
                                                     "per group of 128 inputs of a row.")),
            (replace(right, weight_bytes=halves + 4 * sum(o for o, _ in mats)),
             tr(" It keeps one scale and zero point per row; int4 keeps one per group of 128 "
                "inputs of a row.")),
            (replace(right, weight_bytes=halves + 2 * sum(o * i for o, i in mats) / GROUP),
             tr(" It counts only the scale of each group; each group also has a zero point.")),
            (replace(right, weight_bytes=right.weight_bytes + halves),
             tr(" It takes a byte per int4 weight; two of them share a byte.")),
        ]
    return found


def _hint(got: float, cfg: Qwen3Config, batch: int, kv_len: int, weights: str, bandwidth: float,
          peak: float) -> Text | str:
    """The hint of the one classic mistake that gives `got`; '' when none or several fit."""
    right = _count(cfg, batch, kv_len, weights).seconds(bandwidth, peak)
    hints = [hint for count, hint in _mistakes(cfg, batch, kv_len, weights)
             if not math.isclose(count.seconds(bandwidth, peak), right, rel_tol=_REL)
             and math.isclose(got, count.seconds(bandwidth, peak), rel_tol=_REL)]
    return hints[0] if len(hints) == 1 else ""


def _describe(cfg: Qwen3Config) -> str:
    return (f"C={cfg.hidden_size} I={cfg.intermediate_size} L={cfg.num_hidden_layers} "
            f"Hq={cfg.num_attention_heads} Hkv={cfg.num_key_value_heads} D={cfg.head_dim} "
            f"V={cfg.vocab_size}")


def _problem(fn: Callable, cfg: Qwen3Config, batch: int, kv_len: int, weights: str,
             bandwidth: float, peak: float) -> tuple[Text, Text | str] | None:
    """(what is wrong with fn's answer, its hint included; the hint naming the mistake, or '');
    None if it is right."""
    what = (f"predict_step_seconds({_describe(cfg)}; batch={batch}, kv_len={kv_len}, "
            f"{weights!r}, bandwidth={bandwidth:.3g}, peak_flops={peak:.3g})")
    got = fn(cfg, batch, kv_len, weights, bandwidth, peak)
    if not isinstance(got, numbers.Real) or isinstance(got, bool):
        return tr("{what} returned a {got}; return a number of seconds (float)", what=what,
                  got=type(got).__name__), ""
    right = _count(cfg, batch, kv_len, weights)
    want = right.seconds(bandwidth, peak)
    if math.isclose(float(got), want, rel_tol=_REL):
        return None
    memory = (right.weight_bytes + right.kv_bytes) / bandwidth
    bound = tr("memory-bound") if memory >= right.flops / peak else tr("compute-bound")
    hint = _hint(float(got), cfg, batch, kv_len, weights, bandwidth, peak)
    return tr("{what} returned {got:.6g} s, expected {want:.6g} s ({bound}: {nbytes:.6g} bytes, "
              "{flops:.6g} FLOPs).{hint}", what=what, got=float(got), want=want, bound=bound,
              nbytes=right.weight_bytes + right.kv_bytes, flops=right.flops, hint=hint), hint


def _cases(fn: Callable, cases: list[tuple[Qwen3Config, int, int, str, float, float]]) -> None:
    """Fail on the first wrong case, preferring one whose mistake can be named."""
    problems = [p for case in cases if (p := _problem(fn, *case))]
    if problems:
        message, _ = max(problems, key=lambda p: bool(p[1]))  # the first with a hint
        raise CheckFailed(message)


def _random_config() -> Qwen3Config:
    """A Qwen3 shape with every layer's inputs a multiple of 128, Hq·D often not equal to C."""
    D = (64, 128)[int(torch.randint(0, 2, ()))]
    Hkv = (1, 2, 4, 8)[int(torch.randint(0, 4, ()))]
    Hq = Hkv * (1, 2, 4)[int(torch.randint(0, 3, ()))]
    if Hq * D % 128:
        Hq *= 2  # Hq·D (the inputs of o) a multiple of 128
    return Qwen3Config(
        vocab_size=int(torch.randint(1000, 160000, ())),
        hidden_size=128 * int(torch.randint(2, 33, ())),
        intermediate_size=128 * int(torch.randint(4, 97, ())),
        num_hidden_layers=int(torch.randint(1, 41, ())),
        num_attention_heads=Hq, num_key_value_heads=Hkv, head_dim=D,
    )


def _roof() -> tuple[float, float]:
    """A CPU-like roof: 10-100 GB/s and 0.05-2 TFLOP/s."""
    return float(torch.empty(()).uniform_(10e9, 100e9)), float(torch.empty(()).uniform_(5e10, 2e12))


def _random_steps(fn: Callable, formats: tuple[str, str]) -> Text:
    """12 decode steps of random configs, batches and contexts on random roofs, the two
    formats taking turns."""
    cases = []
    for i in range(12):
        cfg = _random_config()
        batch, kv_len = int(torch.randint(1, 9, ())), int(torch.randint(1, 4097, ()))
        cases.append((cfg, batch, kv_len, formats[i % 2], *_roof()))
    _cases(fn, cases)
    return tr("12 random configs")


@exercise("ch09.predict_step_seconds", "float32 and bfloat16 decode steps of random configs: "
          "the weights once, each request's K/V, the slower roof")
def _plain(fn: Callable) -> str:
    return _random_steps(fn, ("float32", "bfloat16"))


@exercise("ch09.predict_step_seconds", "int8 and int4 weights: their integers with their "
          "scales (and int4's zero points), the K/V cache in bfloat16")
def _quantized(fn: Callable) -> str:
    return _random_steps(fn, ("int8", "int4"))


@exercise("ch09.predict_step_seconds", "a batch shares the weights' read: 1 to 256 requests, "
          "short and long contexts, in every format")
def _batches(fn: Callable) -> None:
    cfg = _random_config()
    cases = [(cfg, batch, kv_len, weights, 50e9, 1e15)  # a roof far above: memory alone
             for batch in (1, 4, 256) for kv_len in (16, 8192) for weights in FORMATS]
    _cases(fn, cases)


@exercise("ch09.predict_step_seconds", "where FLOPs / peak is the larger, the compute roof is "
          "the bound (the larger time, not the sum)")
def _compute_bound(fn: Callable) -> None:
    cases = []
    for weights in FORMATS:
        cfg = _random_config()
        cases += [(cfg, 64, 2048, weights, 100e9, 2e10), (cfg, 1, 64, weights, 100e9, 1e9)]
    _cases(fn, cases)
    for weights in FORMATS:  # the peak must matter: halve it, a compute-bound step doubles
        cfg, args = _random_config(), (256, 512, weights, 100e9)
        slow, fast = fn(cfg, *args, 1e10), fn(cfg, *args, 2e10)
        expect(math.isclose(float(slow), 2 * float(fast), rel_tol=1e-6),
               tr("a compute-bound step ({weights}, batch 256) should take twice as long on half "
                  "the peak FLOP/s; got {slow:.6g} s and {fast:.6g} s", weights=weights,
                  slow=float(slow), fast=float(fast)))


@exercise("ch09.predict_step_seconds", "the published Qwen3 shapes, 0.6B to 8B, at batch 1 and "
          "64 on a 50 GB/s, 1 TFLOP/s machine")
def _published(fn: Callable) -> str:
    cases = [(cfg, batch, 1024, weights, 50e9, 1e12) for cfg in SHAPES.values()
             for batch in (1, 64) for weights in FORMATS]
    _cases(fn, cases)
    cfg = SHAPES["qwen3-8b"]
    times = {w: _count(cfg, 1, 1024, w).seconds(50e9, 1e12) for w in ("bfloat16", "int4")}
    return tr("Qwen3-8B at batch 1: {bf16:.0f} ms a step in bfloat16, {int4:.0f} ms in int4",
              bf16=times["bfloat16"] * 1e3, int4=times["int4"] * 1e3)
