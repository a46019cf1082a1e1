"""Checks of ch04.fused_add_rms_norm: (rms_norm(x + residual), x + residual), as the engine
chains it through the layers, compared with minimodel.ops.fused_add_rms_norm.

Shapes: C hidden (the last dim of x and residual).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.ch04.common import _HALF, _TOL, _name
from minimodel.grading.core import CheckFailed, exercise, expect, expect_close, expect_shape
from minimodel.grading.i18n import tr
from minimodel.ops import fused_add_rms_norm as ref_fused
from minimodel.ops import rms_norm as ref_rms_norm


def _call_fused(fn: Callable, x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The learner's (normed, new_residual); fails unless it is a pair of tensors of x's shape."""
    out = fn(x, residual, w, eps)
    pair = isinstance(out, (tuple, list))
    expect(pair and len(out) == 2,
           tr("fused_add_rms_norm should return a pair (normed, new_residual), got {type} of "
              "{n}.", type=type(out).__name__, n=len(out)) if pair else
           tr("fused_add_rms_norm should return a pair (normed, new_residual), got {type}.",
              type=type(out).__name__))
    normed, new_residual = out
    expect_shape(normed, tuple(x.shape), tr("normed (the first output)"))
    expect_shape(new_residual, tuple(x.shape), tr("new_residual (the second output)"))
    return normed, new_residual


def _check_fused(fn: Callable, x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                 eps: float) -> None:
    """Both outputs must match minimodel.ops', in x's dtype; a wrong one is named."""
    want_normed, want_residual = ref_fused(x.clone(), residual.clone(), w, eps)
    old_residual = residual.clone()
    normed, new_residual = _call_fused(fn, x, residual, w, eps)
    where = tr("for x {shape} {dtype}", shape=tuple(x.shape), dtype=_name(x.dtype))
    tol = _TOL[x.dtype]
    for name, got in (("normed", normed), ("new_residual", new_residual)):
        expect(got.dtype == x.dtype,
               tr("{name} has dtype {dtype} {where}; return x's dtype.", name=name,
                  dtype=_name(got.dtype), where=where))
    if not torch.allclose(new_residual.float(), want_residual.float(), atol=tol, rtol=tol):
        hint = ""
        if torch.equal(new_residual, old_residual):
            hint = tr(" It equals the old residual: the new residual stream is x + residual.")
        elif torch.allclose(new_residual.float(), want_normed.float(), atol=tol, rtol=tol):
            hint = tr(" It equals the normed output: the residual stream carries x + residual "
                      "un-normalised, or every layer's input would shrink to RMS 1.")
        elif torch.equal(new_residual, x):
            hint = tr(" It equals x: add the old residual to it.")
        raise CheckFailed(tr("new_residual (the second output) is not x + residual {where}."
                             "{hint}", where=where, hint=hint))
    if not torch.allclose(normed.float(), want_normed.float(), atol=tol, rtol=tol):
        hint = ""
        if torch.allclose(normed.float(), ref_rms_norm(x, w, eps).float(), atol=tol, rtol=tol):
            hint = tr(" It equals rms_norm(x): normalise the sum x + residual.")
        elif torch.allclose(normed.float(), want_residual.float(), atol=tol, rtol=tol):
            hint = tr(" It equals x + residual: did you swap the two outputs?")
        worst = float((normed.float() - want_normed.float()).abs().max())
        raise CheckFailed(tr(
            "normed (the first output) is off from rms_norm(x + residual) {where}: max abs diff "
            "{worst:.3g}.{hint}", where=where, worst=worst, hint=hint))


@exercise("ch04.fused_add_rms_norm", "returns (rms_norm(x + residual), x + residual)")
def _fused_values(fn: Callable) -> None:
    for shape, eps in (((6, 32), 1e-6), ((2, 5, 64), 1e-5)):
        _check_fused(fn, torch.randn(shape), torch.randn(shape) * 3, torch.rand(shape[-1]) + 0.5,
                     eps)


@exercise("ch04.fused_add_rms_norm", "keeps the dtype in bfloat16 and float16")
def _fused_dtype(fn: Callable) -> None:
    for dtype in _HALF:
        x, residual = torch.randn(3, 64).to(dtype), (torch.randn(3, 64) * 3).to(dtype)
        _check_fused(fn, x, residual, (torch.rand(64) + 0.5).to(dtype), 1e-6)


@exercise("ch04.fused_add_rms_norm", "chained over 3 layers equals the explicit x + f(norm(x))")
def _fused_chain(fn: Callable) -> None:
    C, L, eps = 32, 3, 1e-6
    x = torch.randn(2, 4, C)
    norms = [torch.rand(C) + 0.5 for _ in range(2 * L + 1)]
    subs = [torch.randn(C, C) / C**0.5 for _ in range(2 * L)]  # stand-ins for attn and mlp
    # the reference's way: explicit residual adds
    h = x
    for i in range(2 * L):
        h = h + ref_rms_norm(h, norms[i], eps) @ subs[i]
    want = ref_rms_norm(h, norms[-1], eps)
    # the engine's way: each sublayer's output goes to the next norm with the residual
    out, residual = x, torch.zeros_like(x)
    for i in range(2 * L):
        normed, residual = _call_fused(fn, out, residual, norms[i], eps)
        out = normed @ subs[i]
    final, _ = _call_fused(fn, out, residual, norms[-1], eps)
    expect_close(final, want, tr("the final hidden state of the fused chain"), atol=1e-4,
                 rtol=1e-4)
