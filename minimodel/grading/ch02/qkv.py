"""Checks of ch02.rope_qkv: q and k rotated at their positions as minimodel.ops does it, v
returned untouched, shapes and dtypes kept (Hq != Hkv).

Shapes: T tokens, Hq query heads, Hkv key/value heads, D head dim.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.ch02.common import ATOL, _expect_rope_close, _hint, _pos_text
from minimodel.grading.ch02.mistakes import _rope_mistakes
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import Text, tr
from minimodel.ops import apply_rope, rope_cos_sin

QKV_SHAPES = [(5, 4, 2, 32), (1, 8, 2, 64), (6, 2, 2, 8), (3, 16, 8, 128)]  # (T, Hq, Hkv, D)


def _qkv_inputs(dtype: torch.dtype = torch.float32) -> list[tuple]:
    """(q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, D], positions [T], theta) for each shape."""
    cases = []
    for (T, Hq, Hkv, D), theta in zip(QKV_SHAPES, (1e6, 1e4, 1e6, 1e4), strict=True):
        positions = torch.arange(T) + int(torch.randint(0, 300, ()))  # not starting at 0
        q = torch.randn(T, Hq, D).to(dtype)
        k, v = torch.randn(T, Hkv, D).to(dtype), torch.randn(T, Hkv, D).to(dtype)
        cases.append((q, k, v, positions, theta))
    return cases


def _call_qkv(
    fn: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    positions: torch.Tensor, theta: float,
) -> tuple[tuple, Text]:
    """The learner's (q, k, v) and how the call is written; fails unless each keeps its input's
    shape and dtype."""
    T, Hq, D = q.shape
    Hkv = k.shape[1]
    what = tr("rope_qkv(q [{T}, {Hq}, {D}], k and v [{T}, {Hkv}, {D}], positions {positions}, "
              "theta {theta:g})", T=T, Hq=Hq, Hkv=Hkv, D=D, positions=_pos_text(positions),
              theta=theta)
    out = fn(q.clone(), k.clone(), v.clone(), positions.clone(), theta)
    expect(isinstance(out, (tuple, list)) and len(out) == 3,
           tr("{what} should return a tuple (q, k, v), got {got}", what=what,
              got=type(out).__name__))
    for name, got, given in zip("qkv", out, (q, k, v), strict=True):
        expect_shape(got, tuple(given.shape), tr("{what}: {name}", what=what, name=name))
        expect(got.dtype == given.dtype, tr("{what}: {name} should stay {want}, got {got}",
                                            what=what, name=name, want=given.dtype,
                                            got=got.dtype))
    return out, what


@exercise("ch02.rope_qkv", "returns (q, k, v) with their shapes and dtypes (Hq != Hkv)")
def _qkv_shape(fn: Callable) -> None:
    for dtype in (torch.float32, torch.bfloat16):
        for case in _qkv_inputs(dtype):
            _call_qkv(fn, *case)


@exercise("ch02.rope_qkv", "q and k are rotated at their positions, like minimodel.ops")
def _qkv_rotated(fn: Callable) -> None:
    for q, k, v, positions, theta in _qkv_inputs():
        (q2, k2, _), what = _call_qkv(fn, q, k, v, positions, theta)
        cos, sin = rope_cos_sin(positions, q.shape[-1], theta)
        for name, got, given in (("q", q2, q), ("k", k2, k)):
            if torch.allclose(got.float(), given.float()):
                raise CheckFailed(tr("{what}: {name} came back unrotated; RoPE turns both q and "
                                     "k", what=what, name=name))
            _expect_rope_close(got, apply_rope(given, cos, sin),
                               tr("{what}: {name}", what=what, name=name),
                               lambda got=got, given=given, p=positions, th=theta:
                               _hint(got, _rope_mistakes(given, p, th), ATOL), ATOL)


@exercise("ch02.rope_qkv", "v comes back unchanged: values carry content, not position")
def _qkv_v(fn: Callable) -> None:
    for q, k, v, positions, theta in _qkv_inputs():
        (_, _, v2), what = _call_qkv(fn, q, k, v, positions, theta)
        expect(torch.equal(v2, v), tr("{what}: v should come back exactly as it was given; "
                                      "RoPE rotates q and k only, so that scores depend on "
                                      "distance while the values that get mixed stay the same "
                                      "at every position", what=what))
