"""Checks of ch07.kv_bytes_per_token: 2·L·Hkv·D·dtype_bytes, a Python int, compared with
Qwen3Config.kv_bytes_per_token on random configs and on the published Qwen3 shapes.

Names: L layers, Hkv KV heads, D head dim.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import torch

from minimodel.checkpoints import SHAPES
from minimodel.config import Qwen3Config
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import Text, tr


def _kv_bytes_expected(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Qwen3Config.kv_bytes_per_token for these sizes."""
    cfg = Qwen3Config(
        num_hidden_layers=num_layers, num_attention_heads=num_kv_heads,
        num_key_value_heads=num_kv_heads, head_dim=head_dim,
    )
    dtype = {1: torch.float8_e4m3fn, 2: torch.bfloat16, 4: torch.float32, 8: torch.float64}
    return cfg.kv_bytes_per_token(dtype[dtype_bytes])


def _kv_bytes_hint(got: float, args: tuple[int, int, int, int]) -> Text | str:
    """Name the classic mistake that gives `got`; '' when none or several fit."""
    L, H, D, b = args
    mistakes = (
        (L * H * D * b, tr(" That is half: both K and V are cached, so count 2 vectors per "
                           "layer and KV head.")),
        (2 * L * H * D * b * 8, tr(" That is 8 times too much: dtype_bytes is already in bytes, "
                                   "not bits.")),
        (4 * L * H * D * b, tr(" That is twice too much: the factor is 2 (one K and one V), "
                               "counted once.")),
        (2 * H * D * b, tr(" That is one layer's worth: every one of the L layers keeps its own "
                           "K and V.")),
        (2 * L * H * D, tr(" That counts numbers, not bytes: each number takes dtype_bytes "
                           "bytes.")),
        (2 * L * H * D * D * b, tr(" head_dim counts once: a K vector of one head has D "
                                   "numbers.")),
    )
    hints = [hint for value, hint in mistakes if math.isclose(got, value)]
    return hints[0] if len(hints) == 1 else ""


def _kv_bytes_problem(
    fn: Callable, args: tuple[int, int, int, int], what: Text | str
) -> tuple[Text, Text | str] | None:
    """(what is wrong with fn(*args), the hint naming the mistake that it ends with, or ''); None
    if it is right."""
    got = fn(*args)
    want = _kv_bytes_expected(*args)
    if not isinstance(got, numbers.Real) or isinstance(got, bool):
        return tr("{what} returned a {type}; return a number of bytes (int)", what=what,
                  type=type(got).__name__), ""
    if got != want:
        hint = _kv_bytes_hint(float(got), args)
        return tr("{what} returned {got}, expected 2·L·Hkv·D·dtype_bytes = {want}.{hint}",
                  what=what, got=got, want=want, hint=hint), hint
    return None


def _kv_bytes_cases(
    fn: Callable, cases: list[tuple[tuple[int, int, int, int], Text | str]]
) -> None:
    """Fail on the first wrong case, preferring one whose mistake can be named."""
    problems = [p for args, what in cases if (p := _kv_bytes_problem(fn, args, what))]
    if problems:
        message, _ = max(problems, key=lambda p: bool(p[1]))  # the first with a hint
        raise CheckFailed(message)


@exercise("ch07.kv_bytes_per_token", "equals 2·L·Hkv·D·dtype_bytes on 12 random configs")
def _kv_random(fn: Callable) -> None:
    cases = []
    for _ in range(12):
        args = (
            int(torch.randint(2, 81, ())), int(torch.randint(1, 17, ())),
            [64, 80, 96, 128, 256][int(torch.randint(0, 5, ()))],
            [1, 2, 4][int(torch.randint(0, 3, ()))],
        )
        cases.append((args, f"kv_bytes_per_token{args}"))
    _kv_bytes_cases(fn, cases)


@exercise("ch07.kv_bytes_per_token", "matches Qwen3Config.kv_bytes_per_token for Qwen3 0.6B-8B")
def _kv_published(fn: Callable) -> str:
    cases = []
    for name, cfg in SHAPES.items():
        for dtype in (torch.bfloat16, torch.float32):
            args = (cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim, dtype.itemsize)
            cases.append((args, tr("{name} in {dtype}: kv_bytes_per_token{args}", name=name,
                                   dtype=dtype, args=args)))
    _kv_bytes_cases(fn, cases)
    cfg = SHAPES["qwen3-8b"]
    return tr("Qwen3-8B in bfloat16: {kib} KiB per token",
              kib=cfg.kv_bytes_per_token(torch.bfloat16) // 1024)


@exercise("ch07.kv_bytes_per_token", "returns a Python int (bytes are whole numbers)")
def _kv_int(fn: Callable) -> None:
    for args in ((28, 8, 128, 2), (4, 2, 32, 4), (1, 1, 2, 1)):
        got = fn(*args)
        expect(
            isinstance(got, numbers.Integral) and not isinstance(got, bool),
            tr("kv_bytes_per_token{args} returned {got!r} of type {type}; a count of bytes is a "
               "Python int (a division or a float factor makes a float, and a tensor is not an "
               "int)", args=args, got=got, type=type(got).__name__),
        )
