"""Checks of ch04.swiglu: down(silu(gate(x)) * up(x)), compared in float64 with
minimodel.ops.silu_and_mul; a wrong output is matched against the classic mistakes (relu or
gelu for silu, the activation on the wrong projection, ...).

Shapes: C hidden, I intermediate; weights gate and up [I, C], down [C, I].
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from minimodel.grading.ch04.common import _HALF, _name
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import Text, tr
from minimodel.ops import silu_and_mul


def _mlp_weights(
    C: int, I: int, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random (w_gate [I, C], w_up [I, C], w_down [C, I])."""
    return (
        (torch.randn(I, C) / C**0.5).to(dtype),
        (torch.randn(I, C) / C**0.5).to(dtype),
        (torch.randn(C, I) / I**0.5).to(dtype),
    )


def _expected_swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                     w_down: torch.Tensor) -> torch.Tensor:
    """SwiGLU in float64, through minimodel.ops.silu_and_mul: [..., C]."""
    gate_up = torch.cat([x.double() @ w_gate.double().T, x.double() @ w_up.double().T], -1)
    return silu_and_mul(gate_up) @ w_down.double().T


def _diagnose_swiglu(out: torch.Tensor, x: torch.Tensor, w_gate: torch.Tensor,
                     w_up: torch.Tensor, w_down: torch.Tensor) -> Text | str:
    """A hint naming the classic SwiGLU mistake that `out` reproduces, or "" if none does."""
    x, wg, wu, wd = (t.double() for t in (x, w_gate, w_up, w_down))
    g, u = x @ wg.T, x @ wu.T
    variants = (
        (tr(" It matches relu(gate) * up: Qwen3 uses silu(z) = z * sigmoid(z)."), F.relu(g) * u),
        (tr(" It matches gelu(gate) * up: Qwen3 uses silu(z) = z * sigmoid(z)."), F.gelu(g) * u),
        (tr(" It matches sigmoid(gate) * up: silu is z * sigmoid(z), not sigmoid(z)."),
         torch.sigmoid(g) * u),
        (tr(" It matches gate * silu(up): the activation goes on the gate projection."),
         g * F.silu(u)),
        (tr(" It matches silu(gate * up): apply silu to the gate alone, then multiply."),
         F.silu(g * u)),
        (tr(" It matches silu(gate) without the up projection: multiply by up(x)."), F.silu(g)),
        (tr(" It matches gate * up with no activation: apply silu to the gate."), g * u),
    )
    got = out.double()
    for hint, h in variants:
        wrong = h @ wd.T
        if wrong.shape == got.shape and torch.allclose(got, wrong, atol=1e-4, rtol=1e-4):
            return hint
    return ""


def _compare_swiglu(fn: Callable, lead: tuple[int, ...], C: int, I: int,
                    dtype: torch.dtype = torch.float32) -> None:
    """The learner's swiglu on random x [*lead, C] and weights must match, within dtype's
    precision."""
    x = torch.randn(*lead, C).to(dtype)
    w_gate, w_up, w_down = _mlp_weights(C, I, dtype)
    out = fn(x, w_gate, w_up, w_down)
    what = f"swiglu(x {tuple(x.shape)} {_name(dtype)}, I={I})"
    expect_shape(out, tuple(x.shape), what)
    expect(out.dtype == dtype,
           tr("{what} returned {got}; keep x's dtype.", what=what, got=_name(out.dtype)))
    expected = _expected_swiglu(x, w_gate, w_up, w_down)
    tol = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 5e-3}[dtype]
    if not torch.allclose(out.double(), expected, atol=tol, rtol=tol):
        worst = float((out.double() - expected).abs().max())
        raise CheckFailed(tr(
            "{what} is off from down(silu(gate(x)) * up(x)): max abs diff {worst:.3g}.{hint}",
            what=what, worst=worst, hint=_diagnose_swiglu(out, x, w_gate, w_up, w_down)))


@exercise("ch04.swiglu", "returns [..., C] for 1-D to 3-D inputs (weights [I, C], [I, C], [C, I])")
def _swiglu_shape(fn: Callable) -> None:
    for lead, C, I in (((), 8, 24), ((5,), 16, 40), ((2, 3), 32, 96)):
        x = torch.randn(*lead, C)
        expect_shape(fn(x, *_mlp_weights(C, I)), (*lead, C), f"swiglu(x {(*lead, C)}, I={I})")


@exercise("ch04.swiglu", "equals down(silu(gate(x)) * up(x))")
def _swiglu_values(fn: Callable) -> None:
    for lead, C, I in (((7,), 16, 40), ((2, 3), 32, 96), ((4,), 64, 192)):
        _compare_swiglu(fn, lead, C, I)


@exercise("ch04.swiglu", "works in bfloat16 and float16")
def _swiglu_dtype(fn: Callable) -> None:
    for dtype in _HALF:
        _compare_swiglu(fn, (2, 3), 32, 64, dtype)
