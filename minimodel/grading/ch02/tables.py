"""Checks of ch02.rope_tables: cos and sin [T, D] for any positions, head dim and theta, with
the two halves equal (Qwen3's rotate-half layout), compared with minimodel.ops.rope_cos_sin.

Shapes: T positions, D head dim.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.ch02.common import (
    ATOL,
    HEAD_DIMS,
    LOW_PRECISION,
    _cases,
    _describe,
    _expect_rope_close,
    _it_does,
    _pairs_neighbours,
)
from minimodel.grading.ch02.mistakes import _table_mistakes
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import Text, tr
from minimodel.ops import rope_cos_sin


def _call_tables(
    fn: Callable, positions: torch.Tensor, D: int, theta: float
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """The learner's (cos, sin) and how the call is written; fails unless both are float [T, D]."""
    out = fn(positions.clone(), D, theta)
    what = f"rope_tables({_describe(positions, D, theta)})"
    expect(isinstance(out, (tuple, list)) and len(out) == 2,
           tr("{what} should return a tuple (cos, sin), got {got}", what=what,
              got=type(out).__name__))
    cos, sin = out
    T = len(positions)
    for name, t in (("cos", cos), ("sin", sin)):
        expect_shape(t, (T, D), tr("{what}: {name} [T, D] (each of the D/2 angles appears "
                                   "twice)", what=what, name=name))
        expect(t.dtype.is_floating_point, tr("{what}: {name} should be a float tensor, got "
                                             "{got}", what=what, name=name, got=t.dtype))
        expect(t.dtype not in LOW_PRECISION,
               tr("{what}: {name} is {dtype}, but a 16-bit float cannot hold angles like "
                  "1000 * 0.97 precisely enough; the tables are float32", what=what, name=name,
                  dtype=t.dtype))
    return cos, sin, what


@exercise("ch02.rope_tables", "returns (cos, sin), each float [T, D], for several T and D")
def _tables_shape(fn: Callable) -> str:
    cases = _cases()
    for positions, D, theta in cases:
        _call_tables(fn, positions, D, theta)
    return tr("{n} cases", n=len(cases))


@exercise("ch02.rope_tables", "position 0 gives cos = 1 and sin = 0 (no rotation)")
def _tables_zero(fn: Callable) -> None:
    for D in HEAD_DIMS:
        cos, sin, what = _call_tables(fn, torch.zeros(3, dtype=torch.long), D, 1e6)
        expect(torch.allclose(cos.float(), torch.ones(3, D)) and
               torch.allclose(sin.float(), torch.zeros(3, D), atol=1e-6),
               tr("{what}: at position 0 every cos should be 1 and every sin 0, got cos "
                  "{cos}... and sin {sin}...", what=what, cos=cos[0, :4].tolist(),
                  sin=sin[0, :4].tolist()))


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal up to float rounding (vectorised and scalar cos may differ in the last bit)."""
    return torch.allclose(a.float(), b.float(), atol=1e-6, rtol=0)


@exercise("ch02.rope_tables", "the two halves are equal: dimension i pairs with i + D/2")
def _tables_halves(fn: Callable) -> None:
    for positions, D, theta in _cases():
        cos, sin, what = _call_tables(fn, positions, D, theta)
        h = D // 2
        if not (_same(cos[:, :h], cos[:, h:]) and _same(sin[:, :h], sin[:, h:])):
            why: Text | str = ""
            if D > 2 and _same(cos[:, 0::2], cos[:, 1::2]):
                why = tr("; your table {mistake}", mistake=_pairs_neighbours())
            elif _same(cos[:, :h], cos[:, h:]) and _same(sin[:, :h], -sin[:, h:]):
                why = tr("; your sin halves differ in sign: the minus sign belongs to "
                         "rotate_half, the table repeats the same angles")
            raise CheckFailed(tr("{what}: columns i and i + D/2 should hold the same "
                                 "angle{why}", what=what, why=why))


def _tables_hint(cos: torch.Tensor, sin: torch.Tensor, mistakes: dict[Text, tuple]) -> Text | str:
    """"; it <what went wrong>" for the first wrong table pair that (cos, sin) matches, else ""."""
    for text, (c, s) in mistakes.items():
        if torch.allclose(cos.float(), c, atol=ATOL) and torch.allclose(sin.float(), s, atol=ATOL):
            return _it_does(text)
    return ""


@exercise("ch02.rope_tables",
          "matches minimodel.ops.rope_cos_sin for thetas 1e4 and 1e6 and any positions")
def _tables_values(fn: Callable) -> str:
    cases = _cases()
    for positions, D, theta in cases:
        cos, sin, what = _call_tables(fn, positions, D, theta)
        want_cos, want_sin = rope_cos_sin(positions, D, theta)  # [T, D] float32
        mistakes = _table_mistakes(positions, D, theta)

        def hint(cos=cos, sin=sin, mistakes=mistakes) -> Text | str:
            return _tables_hint(cos, sin, mistakes)

        _expect_rope_close(cos, want_cos, tr("{what}: {name}", what=what, name="cos"), hint, ATOL)
        _expect_rope_close(sin, want_sin, tr("{what}: {name}", what=what, name="sin"), hint, ATOL)
    return tr("{n} cases", n=len(cases))
