"""Checks of ch04.rms_norm: x / sqrt(mean(x²) + eps) * weight over the last dim, computed in
float32 whatever x's dtype, compared with minimodel.ops.rms_norm; a wrong output is matched
against the classic mistakes (no weight, LayerNorm, eps outside the root, ...).

Shapes: C hidden (the last dim of x).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from minimodel.grading.ch04.common import _HALF, _TOL, _name
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import Text, tr
from minimodel.ops import rms_norm as ref_rms_norm


def _diagnose_norm(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                   eps: float) -> Text | str:
    """A hint naming the classic RMSNorm mistake that `out` reproduces, or "" if none does."""
    x64, w64, got = x.double(), w.double(), out.double()
    ms = x64.pow(2).mean(-1, keepdim=True)
    variants = (
        (tr(" It matches x / sqrt(mean(x^2) + eps) without the weight: multiply by weight."),
         x64 * torch.rsqrt(ms + eps)),
        (tr(" It matches LayerNorm (the mean subtracted first); RMSNorm only divides by the "
            "root mean square, it does not center x."),
         F.layer_norm(x64, x64.shape[-1:], eps=eps) * w64),
        (tr(" It matches x / sqrt(mean(x) + eps): square x before taking the mean."),
         x64 * torch.rsqrt(x64.mean(-1, keepdim=True).abs() + eps) * w64),
        (tr(" It matches x / (sqrt(mean(x^2)) + eps): eps goes inside the square root."),
         x64 / (ms.sqrt() + eps) * w64),
        (tr(" It matches x / sqrt(mean(x^2)) with no eps: add eps inside the square root."),
         x64 * torch.rsqrt(ms) * w64),
        (tr(" It matches x / sqrt(sum(x^2) + eps): take the mean over C, not the sum."),
         x64 * torch.rsqrt(x64.pow(2).sum(-1, keepdim=True) + eps) * w64),
    )
    for hint, wrong in variants:
        if wrong.shape == got.shape and torch.allclose(got, wrong, atol=1e-4, rtol=1e-4):
            return hint
    if x.dim() >= 2:
        over_first = x64 * torch.rsqrt(x64.pow(2).mean(0, keepdim=True) + eps) * w64
        if torch.allclose(got, over_first, atol=1e-4, rtol=1e-4):
            return tr(" It normalises over the first dim; normalise over the last dim (C).")
    return ""


def _compare_norm(fn: Callable, x: torch.Tensor, w: torch.Tensor, eps: float) -> None:
    """The learner's rms_norm(x, w, eps) must keep x and match minimodel.ops', within x's
    dtype's precision."""
    before = x.clone()
    out = fn(x, w, eps)
    what = f"rms_norm(x {tuple(x.shape)} {_name(x.dtype)}, weight, eps={eps:g})"
    expect_shape(out, tuple(x.shape), what)
    expect(torch.equal(x, before),
           tr("{what} changed x in place; return a new tensor instead.", what=what))
    expected = ref_rms_norm(x, w, eps)
    tol = _TOL[x.dtype]
    if not torch.allclose(out.double(), expected.double(), atol=tol, rtol=tol, equal_nan=False):
        worst = float((out.double() - expected.double()).abs().nan_to_num(float("inf")).max())
        raise CheckFailed(tr(
            "{what} is off from x / sqrt(mean(x^2) + eps) * weight: max abs diff {worst:.3g}."
            "{nan}{hint}", what=what, worst=worst,
            nan=tr(" It contains NaN or inf.") if not out.isfinite().all() else "",
            hint=_diagnose_norm(out, x, w, eps)))


@exercise("ch04.rms_norm", "keeps x's shape for [C], [T, C], [B, T, C] and [B, T, H, D]")
def _norm_shape(fn: Callable) -> None:
    for shape in ((16,), (5, 32), (2, 3, 64), (2, 3, 4, 8)):
        x = torch.randn(shape)
        expect_shape(fn(x, torch.rand(shape[-1]) + 0.5, 1e-6), shape,
                     tr("rms_norm(x of shape {shape}, ...)", shape=shape))


@exercise("ch04.rms_norm", "equals x / sqrt(mean(x²) + eps) * weight over the last dim")
def _norm_values(fn: Callable) -> None:
    for shape, eps in (((7, 32), 1e-6), ((2, 5, 64), 1e-5), ((3, 2, 4, 16), 1e-6)):
        x = torch.randn(shape) * 2 + 0.7  # a non-zero mean, so LayerNorm differs
        _compare_norm(fn, x, torch.rand(shape[-1]) * 1.5 + 0.25, eps)


@exercise("ch04.rms_norm", "puts eps inside the square root, and maps zeros to zeros (no NaN)")
def _norm_eps(fn: Callable) -> None:
    for scale, eps in ((1e-3, 1e-6), (0.1, 1e-2), (1.0, 0.5)):  # eps matters at these scales
        _compare_norm(fn, torch.randn(4, 32) * scale, torch.rand(32) + 0.5, eps)
    zeros = fn(torch.zeros(3, 16), torch.ones(16), 1e-6)
    expect_shape(zeros, (3, 16), "rms_norm(zeros)")
    expect(bool((zeros == 0).all()),
           tr("rms_norm of an all-zero row should be all zeros, got {got}: eps keeps the "
              "division finite.",
              got="NaN" if zeros.isnan().any() else tr("non-zero values")))


@exercise("ch04.rms_norm", "returns x's dtype for float32, bfloat16 and float16 inputs")
def _norm_dtype(fn: Callable) -> None:
    for dtype in (torch.float32, *_HALF):
        x = torch.randn(4, 64).to(dtype)
        w = (torch.rand(64) + 0.5).to(dtype)
        out = fn(x, w, 1e-6)
        expect_shape(out, (4, 64), f"rms_norm(x {_name(dtype)})")
        expect(out.dtype == dtype,
               tr("rms_norm of {dtype} x (weight {dtype}) returned {got}; compute in float32, "
                  "then cast back to x's dtype.", dtype=_name(dtype), got=_name(out.dtype)))
        _compare_norm(fn, x, w, 1e-6)


@exercise("ch04.rms_norm", "computes in float32 for bfloat16 input (no per-row rounding bias)")
def _norm_bf16_float32(fn: Callable) -> None:
    # Rounding the row's scale 1/sqrt(mean(x^2) + eps) to bfloat16 shifts a whole row by up to
    # 0.4%; rounding only the outputs is unbiased. Measure the mean relative bias of each row.
    C = 512
    x = (torch.randn(64, C) * 2 + 0.3).to(torch.bfloat16)
    w = (torch.rand(C) + 0.5).to(torch.bfloat16)
    out = fn(x, w, 1e-6)
    expect_shape(out, (64, C), "rms_norm(x bfloat16)")
    exact = ref_rms_norm(x.float(), w.float(), 1e-6)
    bias = (out.float() / exact - 1).mean(-1).abs().mean().item()
    expect(bias < 7e-4,
           tr("in bfloat16 each row of rms_norm(x) is scaled {percent:.2f}% off on average "
              "(float32 math stays below 0.07%): compute mean(x^2) and x * rsqrt(...) in "
              "float32, then cast the result to x's dtype.", percent=100 * bias))


@exercise("ch04.rms_norm", "does not overflow in float16 when x² exceeds 65504")
def _norm_fp16_overflow(fn: Callable) -> None:
    x = (torch.randn(4, 64) * 400).to(torch.float16)  # x^2 ~ 1e5: inf in float16
    w = (torch.rand(64) + 0.5).to(torch.float16)
    out = fn(x, w, 1e-6)
    expect_shape(out, (4, 64), "rms_norm(x float16)")
    expect(bool(out.isfinite().all()) and out.abs().amax() > 0.1,
           tr("rms_norm of float16 x with |x| in the hundreds gave NaN, inf or zeros: x^2 "
              "overflows float16 (max 65504). Square and average in float32."))
    _compare_norm(fn, x, w, 1e-6)
