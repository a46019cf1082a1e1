"""Checks of ch02.apply_rope and ch02.rope_interleaved: the same contract and the same
properties for both conventions. What differs is which two dimensions form a pair, and so which
reference and which classic mistakes apply.

Shapes: T tokens, H heads, D head dim.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.ch02.common import (
    ATOL,
    HEAD_DIMS,
    LOW_PRECISION,
    THETAS,
    _cases,
    _expect_rope_close,
    _hint,
    _pos_text,
    _rope_half_reference,
    rope_interleaved_reference,
)
from minimodel.grading.ch02.mistakes import _interleaved_mistakes, _rope_mistakes
from minimodel.grading.core import CheckFailed, exercise, expect, expect_close, expect_shape
from minimodel.grading.i18n import Text, tr


def _rope_inputs(
    dtype: torch.dtype = torch.float32,
) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    """(x [T, H, D], positions [T], theta) over heads, head dims, thetas and positions."""
    cases = []
    for n, (positions, D, theta) in enumerate(_cases()):
        H = (1, 2, 4)[n % 3]
        x = (torch.randn(len(positions), H, D).clamp(-4, 4)).to(dtype)  # [T, H, D]
        cases.append((x, positions, theta))
    return cases


def _half_pairs(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The two members of every rotate-half pair (i, i + D/2), as two tensors."""
    h = t.shape[-1] // 2
    return t[..., :h], t[..., h:]


def _neighbour_pairs(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The two members of every neighbour pair (2i, 2i+1), as two tensors."""
    return t[..., 0::2], t[..., 1::2]


# One entry per exercise: its function's name, the reference, the mistakes to name, how to cut
# a vector into its pairs, and what the pairs are called (the checks' titles, which name the
# reference and the pairs too, are written out in _register_rope_checks).
CONVENTIONS = {
    "ch02.apply_rope": ("apply_rope", _rope_half_reference, _rope_mistakes, _half_pairs,
                        "(i, i + D/2)"),
    "ch02.rope_interleaved": ("apply_rope_interleaved", rope_interleaved_reference,
                              _interleaved_mistakes, _neighbour_pairs, "(2i, 2i+1)"),
}


def _pairing(name: str) -> Text:
    """Which dimensions exercise `name`'s convention pairs, said in a failure message."""
    if name == "ch02.apply_rope":
        return tr("Qwen3 pairs dimension i with i + D/2")
    return tr("this convention pairs neighbours (2i, 2i+1)")


def _call_rope(
    fn: Callable, x: torch.Tensor, positions: torch.Tensor, theta: float,
    label: str = "apply_rope",
) -> tuple[torch.Tensor, str]:
    """The learner's output and how the call is written; fails unless it is x's shape and dtype."""
    T, H, D = x.shape
    what = (f"{label}(x [{T}, {H}, {D}] {str(x.dtype).replace('torch.', '')}, "
            f"positions {_pos_text(positions)}, theta {theta:g})")
    out = fn(x.clone(), positions.clone(), theta)
    expect_shape(out, (T, H, D), what)
    expect(out.dtype == x.dtype, tr("{what} should return {want} like x, got {got}: the layers "
                                    "around RoPE work in x's dtype", what=what, want=x.dtype,
                                    got=out.dtype))
    return out, what


def _precision_hint(fn: Callable, reference: Callable, x: torch.Tensor, positions: torch.Tensor,
                    theta: float) -> Text | str:
    """Why a 16-bit result is off: wrong math, or precision lost on the way."""
    x32 = x.float()
    try:
        out32 = fn(x32.clone(), positions.clone(), theta)
    except Exception:
        return ""
    want32 = reference(x32, positions, theta)
    if isinstance(out32, torch.Tensor) and out32.shape == want32.shape:
        if torch.allclose(out32.float(), want32, atol=ATOL, rtol=ATOL):
            return tr("; the same x in float32 comes out right, so precision is lost on the "
                      "way: a 16-bit float cannot even hold position 1001, and angles, cos/sin "
                      "or products kept in 16 bits lose the digits the rotation needs")
    return tr("; it is off in float32 too (see the float32 check)")


def _register_rope_checks(name: str) -> None:
    """Register the checks of exercise `name` (one of CONVENTIONS), in the order shown."""
    label, reference, mistakes, pairs, pair_text = CONVENTIONS[name]
    half = name == "ch02.apply_rope"

    @exercise(name, "keeps x's shape [T, H, D] and dtype (float32, bfloat16, float16)")
    def _shape(fn: Callable) -> str:
        n = 0
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            for x, positions, theta in _rope_inputs(dtype)[::3]:
                _call_rope(fn, x, positions, theta, label)
                n += 1
        return tr("{n} cases", n=n)

    @(exercise(name, "matches minimodel.ops.apply_rope in float32") if half
      else exercise(name, "matches the reference in float32"))
    def _values(fn: Callable) -> str:
        cases = _rope_inputs()
        for x, positions, theta in cases:
            out, what = _call_rope(fn, x, positions, theta, label)
            want = reference(x, positions, theta)  # [T, H, D]
            _expect_rope_close(out, want, what,
                               lambda out=out, x=x, p=positions, th=theta:
                               _hint(out, mistakes(x, p, th), ATOL), ATOL)
        return tr("{n} cases", n=len(cases))

    @(exercise(name, "matches minimodel.ops.apply_rope in bfloat16 and float16, within their "
                     "precision") if half
      else exercise(name, "matches the reference in bfloat16 and float16, within their precision"))
    def _low_precision(fn: Callable) -> str:
        n = 0
        for dtype, tol in LOW_PRECISION.items():
            for x, positions, theta in _rope_inputs(dtype)[::2]:
                out, what = _call_rope(fn, x, positions, theta, label)
                want = reference(x, positions, theta)
                _expect_rope_close(out, want, what,
                                   lambda x=x, p=positions, th=theta:
                                   _precision_hint(fn, reference, x, p, th), tol)
                n += 1
        return tr("{n} cases", n=n)

    @(exercise(name, "keeps the length of every (i, i + D/2) pair: it only rotates") if half
      else exercise(name, "keeps the length of every (2i, 2i+1) pair: it only rotates"))
    def _norms(fn: Callable) -> None:
        for x, positions, theta in _rope_inputs():
            out, what = _call_rope(fn, x, positions, theta, label)
            (a, b), (a0, b0) = pairs(out.float()), pairs(x.float())
            diff = float(((a**2 + b**2).sqrt() - (a0**2 + b0**2).sqrt()).abs().max())
            if diff > 1e-3:
                total = float((out.float().norm(dim=-1) - x.float().norm(dim=-1)).abs().max())
                why = tr(" (the length of each whole vector is kept, so you rotate other pairs; "
                         "{pairing})", pairing=_pairing(name)) if total < 1e-3 else ""
                raise CheckFailed(tr("{what}: the length of a pair {pair} changed by up to "
                                     "{diff:.3g}{why}", what=what, pair=pair_text, diff=diff,
                                     why=why))

    @exercise(name, "position 0 leaves x unchanged")
    def _zero(fn: Callable) -> None:
        for D in HEAD_DIMS:
            x = torch.randn(3, 2, D)
            out, what = _call_rope(fn, x, torch.zeros(3, dtype=torch.long), 1e6, label)
            expect_close(out, x, tr("{what}: at position 0 the output", what=what), atol=1e-6,
                         rtol=1e-6)

    @exercise(name, "the score q·k depends only on the distance m - n")
    def _relative(fn: Callable) -> str:
        n = 0
        for D in HEAD_DIMS[1:]:
            for theta in THETAS:
                q, k = torch.randn(1, 1, D), torch.randn(1, 1, D)
                m, dist = int(torch.randint(0, 500, ())), int(torch.randint(0, 50, ()))
                scores = []
                for shift in (0, 1, 100, 1000):
                    qm = fn(q.clone(), torch.tensor([m + dist + shift]), theta)
                    kn = fn(k.clone(), torch.tensor([m + shift]), theta)
                    expect_shape(qm, (1, 1, D), tr("{label} of one token [1, 1, {D}]",
                                                   label=label, D=D))
                    scores.append(float((qm.float() * kn.float()).sum()))
                spread = max(scores) - min(scores)
                expect(spread < 1e-3 * max(1.0, abs(scores[0])),
                       tr("head_dim {D}, theta {theta:g}: q at position n + {dist} and k at n "
                          "should give the same score for every n, got {scores} for n = {n0}, "
                          "{n1}, {n2}, {n3}", D=D, theta=theta, dist=dist,
                          scores=[round(s, 4) for s in scores], n0=m, n1=m + 1, n2=m + 100,
                          n3=m + 1000))
                n += 1
        return tr("{n} (q, k) pairs, 4 shifts each", n=n)

    @exercise(name, "leaves x and positions unchanged")
    def _pure(fn: Callable) -> None:
        x, positions = torch.randn(4, 2, 8), torch.arange(4) + 3
        x0, p0 = x.clone(), positions.clone()
        fn(x, positions, 1e4)
        expect(torch.equal(x, x0), tr("{label} changed the x it was given (in place)",
                                      label=label))
        expect(torch.equal(positions, p0), tr("{label} changed the positions it was given",
                                              label=label))


_register_rope_checks("ch02.apply_rope")
_register_rope_checks("ch02.rope_interleaved")
