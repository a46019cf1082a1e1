"""Checks of chapter 04 (the transformer block): rms_norm, fused_add_rms_norm, swiglu,
merge_qkv.

Shapes: C hidden, I intermediate (MLP), Hq/Hkv query/KV heads, D head dim. Expected values come
from minimodel.ops (rms_norm, fused_add_rms_norm, silu_and_mul), the functions the reference
model and the engine both run.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from minimodel.grading.core import CheckFailed, exercise, expect, expect_close, expect_shape
from minimodel.ops import fused_add_rms_norm as ref_fused
from minimodel.ops import rms_norm as ref_rms_norm
from minimodel.ops import silu_and_mul

_HALF = (torch.bfloat16, torch.float16)
_TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


# --- rms_norm ------------------------------------------------------------------------------


def _diagnose_norm(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, eps: float) -> str:
    """A hint naming the classic RMSNorm mistake that `out` reproduces, or "" if none does."""
    x64, w64, got = x.double(), w.double(), out.double()
    ms = x64.pow(2).mean(-1, keepdim=True)
    variants = {
        " It matches x / sqrt(mean(x^2) + eps) without the weight: multiply by weight.":
            x64 * torch.rsqrt(ms + eps),
        " It matches LayerNorm (the mean subtracted first); RMSNorm only divides by the root "
        "mean square, it does not center x.":
            F.layer_norm(x64, x64.shape[-1:], eps=eps) * w64,
        " It matches x / sqrt(mean(x) + eps): square x before taking the mean.":
            x64 * torch.rsqrt(x64.mean(-1, keepdim=True).abs() + eps) * w64,
        " It matches x / (sqrt(mean(x^2)) + eps): eps goes inside the square root.":
            x64 / (ms.sqrt() + eps) * w64,
        " It matches x / sqrt(mean(x^2)) with no eps: add eps inside the square root.":
            x64 * torch.rsqrt(ms) * w64,
        " It matches x / sqrt(sum(x^2) + eps): take the mean over C, not the sum.":
            x64 * torch.rsqrt(x64.pow(2).sum(-1, keepdim=True) + eps) * w64,
    }
    for hint, wrong in variants.items():
        if wrong.shape == got.shape and torch.allclose(got, wrong, atol=1e-4, rtol=1e-4):
            return hint
    if x.dim() >= 2:
        over_first = x64 * torch.rsqrt(x64.pow(2).mean(0, keepdim=True) + eps) * w64
        if torch.allclose(got, over_first, atol=1e-4, rtol=1e-4):
            return " It normalises over the first dim; normalise over the last dim (C)."
    return ""


def _compare_norm(fn: Callable, x: torch.Tensor, w: torch.Tensor, eps: float) -> None:
    before = x.clone()
    out = fn(x, w, eps)
    what = f"rms_norm(x {tuple(x.shape)} {_name(x.dtype)}, weight, eps={eps:g})"
    expect_shape(out, tuple(x.shape), what)
    expect(torch.equal(x, before), f"{what} changed x in place; return a new tensor instead.")
    expected = ref_rms_norm(x, w, eps)
    tol = _TOL[x.dtype]
    if not torch.allclose(out.double(), expected.double(), atol=tol, rtol=tol, equal_nan=False):
        worst = float((out.double() - expected.double()).abs().nan_to_num(float("inf")).max())
        raise CheckFailed(
            f"{what} is off from x / sqrt(mean(x^2) + eps) * weight: max abs diff {worst:.3g}."
            + (" It contains NaN or inf." if not out.isfinite().all() else "")
            + _diagnose_norm(out, x, w, eps)
        )


@exercise("ch04.rms_norm", "keeps x's shape for [C], [T, C], [B, T, C] and [B, T, H, D]")
def _norm_shape(fn: Callable) -> None:
    for shape in ((16,), (5, 32), (2, 3, 64), (2, 3, 4, 8)):
        x = torch.randn(shape)
        expect_shape(fn(x, torch.rand(shape[-1]) + 0.5, 1e-6), shape,
                     f"rms_norm(x of shape {shape}, ...)")


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
           "rms_norm of an all-zero row should be all zeros, got "
           f"{'NaN' if zeros.isnan().any() else 'non-zero values'}: eps keeps the division finite.")


@exercise("ch04.rms_norm", "returns x's dtype for float32, bfloat16 and float16 inputs")
def _norm_dtype(fn: Callable) -> None:
    for dtype in (torch.float32, *_HALF):
        x = torch.randn(4, 64).to(dtype)
        w = (torch.rand(64) + 0.5).to(dtype)
        out = fn(x, w, 1e-6)
        expect_shape(out, (4, 64), f"rms_norm(x {_name(dtype)})")
        expect(out.dtype == dtype,
               f"rms_norm of {_name(dtype)} x (weight {_name(dtype)}) returned {_name(out.dtype)};"
               " compute in float32, then cast back to x's dtype.")
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
           f"in bfloat16 each row of rms_norm(x) is scaled {100 * bias:.2f}% off on average "
           "(float32 math stays below 0.07%): compute mean(x^2) and x * rsqrt(...) in float32, "
           "then cast the result to x's dtype.")


@exercise("ch04.rms_norm", "does not overflow in float16 when x² exceeds 65504")
def _norm_fp16_overflow(fn: Callable) -> None:
    x = (torch.randn(4, 64) * 400).to(torch.float16)  # x^2 ~ 1e5: inf in float16
    w = (torch.rand(64) + 0.5).to(torch.float16)
    out = fn(x, w, 1e-6)
    expect_shape(out, (4, 64), "rms_norm(x float16)")
    expect(bool(out.isfinite().all()) and out.abs().amax() > 0.1,
           "rms_norm of float16 x with |x| in the hundreds gave NaN, inf or zeros: x^2 overflows "
           "float16 (max 65504). Square and average in float32.")
    _compare_norm(fn, x, w, 1e-6)


# --- fused_add_rms_norm --------------------------------------------------------------------


def _call_fused(fn: Callable, x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    out = fn(x, residual, w, eps)
    pair = isinstance(out, (tuple, list))
    expect(pair and len(out) == 2,
           "fused_add_rms_norm should return a pair (normed, new_residual), got "
           f"{type(out).__name__}{f' of {len(out)}' if pair else ''}.")
    normed, new_residual = out
    expect_shape(normed, tuple(x.shape), "normed (the first output)")
    expect_shape(new_residual, tuple(x.shape), "new_residual (the second output)")
    return normed, new_residual


def _check_fused(fn: Callable, x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                 eps: float) -> None:
    want_normed, want_residual = ref_fused(x.clone(), residual.clone(), w, eps)
    old_residual = residual.clone()
    normed, new_residual = _call_fused(fn, x, residual, w, eps)
    where = f"for x {tuple(x.shape)} {_name(x.dtype)}"
    tol = _TOL[x.dtype]
    for name, got in (("normed", normed), ("new_residual", new_residual)):
        expect(got.dtype == x.dtype,
               f"{name} has dtype {_name(got.dtype)} {where}; return x's dtype.")
    if not torch.allclose(new_residual.float(), want_residual.float(), atol=tol, rtol=tol):
        hint = ""
        if torch.equal(new_residual, old_residual):
            hint = " It equals the old residual: the new residual stream is x + residual."
        elif torch.allclose(new_residual.float(), want_normed.float(), atol=tol, rtol=tol):
            hint = (" It equals the normed output: the residual stream carries x + residual "
                    "un-normalised, or every layer's input would shrink to RMS 1.")
        elif torch.equal(new_residual, x):
            hint = " It equals x: add the old residual to it."
        raise CheckFailed(f"new_residual (the second output) is not x + residual {where}." + hint)
    if not torch.allclose(normed.float(), want_normed.float(), atol=tol, rtol=tol):
        hint = ""
        if torch.allclose(normed.float(), ref_rms_norm(x, w, eps).float(), atol=tol, rtol=tol):
            hint = " It equals rms_norm(x): normalise the sum x + residual."
        elif torch.allclose(normed.float(), want_residual.float(), atol=tol, rtol=tol):
            hint = " It equals x + residual: did you swap the two outputs?"
        worst = float((normed.float() - want_normed.float()).abs().max())
        raise CheckFailed(
            f"normed (the first output) is off from rms_norm(x + residual) {where}: "
            f"max abs diff {worst:.3g}." + hint
        )


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
    expect_close(final, want, "the final hidden state of the fused chain", atol=1e-4, rtol=1e-4)


# --- swiglu --------------------------------------------------------------------------------


def _mlp_weights(C: int, I: int, dtype: torch.dtype = torch.float32):
    return (
        (torch.randn(I, C) / C**0.5).to(dtype),
        (torch.randn(I, C) / C**0.5).to(dtype),
        (torch.randn(C, I) / I**0.5).to(dtype),
    )


def _expected_swiglu(x, w_gate, w_up, w_down):
    gate_up = torch.cat([x.double() @ w_gate.double().T, x.double() @ w_up.double().T], -1)
    return silu_and_mul(gate_up) @ w_down.double().T


def _diagnose_swiglu(out, x, w_gate, w_up, w_down) -> str:
    x, wg, wu, wd = (t.double() for t in (x, w_gate, w_up, w_down))
    g, u = x @ wg.T, x @ wu.T
    variants = {
        " It matches relu(gate) * up: Qwen3 uses silu(z) = z * sigmoid(z).": F.relu(g) * u,
        " It matches gelu(gate) * up: Qwen3 uses silu(z) = z * sigmoid(z).": F.gelu(g) * u,
        " It matches sigmoid(gate) * up: silu is z * sigmoid(z), not sigmoid(z).":
            torch.sigmoid(g) * u,
        " It matches gate * silu(up): the activation goes on the gate projection.": g * F.silu(u),
        " It matches silu(gate * up): apply silu to the gate alone, then multiply.": F.silu(g * u),
        " It matches silu(gate) without the up projection: multiply by up(x).": F.silu(g),
        " It matches gate * up with no activation: apply silu to the gate.": g * u,
    }
    got = out.double()
    for hint, h in variants.items():
        wrong = h @ wd.T
        if wrong.shape == got.shape and torch.allclose(got, wrong, atol=1e-4, rtol=1e-4):
            return hint
    return ""


def _compare_swiglu(fn: Callable, lead: tuple[int, ...], C: int, I: int,
                    dtype: torch.dtype = torch.float32) -> None:
    x = torch.randn(*lead, C).to(dtype)
    w_gate, w_up, w_down = _mlp_weights(C, I, dtype)
    out = fn(x, w_gate, w_up, w_down)
    what = f"swiglu(x {tuple(x.shape)} {_name(dtype)}, I={I})"
    expect_shape(out, tuple(x.shape), what)
    expect(out.dtype == dtype, f"{what} returned {_name(out.dtype)}; keep x's dtype.")
    expected = _expected_swiglu(x, w_gate, w_up, w_down)
    tol = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 5e-3}[dtype]
    if not torch.allclose(out.double(), expected, atol=tol, rtol=tol):
        worst = float((out.double() - expected).abs().max())
        raise CheckFailed(
            f"{what} is off from down(silu(gate(x)) * up(x)): max abs diff {worst:.3g}."
            + _diagnose_swiglu(out, x, w_gate, w_up, w_down)
        )


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


# --- merge_qkv -----------------------------------------------------------------------------

# (C, Hq, Hkv, D): MHA, GQA, MQA, and Hq * D != C as in Qwen3
_QKV_CASES = ((32, 4, 4, 8), (64, 4, 2, 32), (48, 6, 1, 16), (40, 8, 2, 10))


def _qkv_weights(C: int, Hq: int, Hkv: int, D: int, dtype: torch.dtype = torch.float32):
    return (torch.randn(Hq * D, C).to(dtype), torch.randn(Hkv * D, C).to(dtype),
            torch.randn(Hkv * D, C).to(dtype))


@exercise("ch04.merge_qkv", "returns [(Hq + 2*Hkv) * D, C] for MHA, GQA, MQA and Hq*D != C")
def _merge_shape(fn: Callable) -> None:
    for C, Hq, Hkv, D in _QKV_CASES:
        expect_shape(fn(*_qkv_weights(C, Hq, Hkv, D)), ((Hq + 2 * Hkv) * D, C),
                     f"merge_qkv for C={C}, Hq={Hq}, Hkv={Hkv}, D={D}")


@exercise("ch04.merge_qkv", "one matmul x @ W.T then a split gives q, k, v (in that order)")
def _merge_matmul(fn: Callable) -> None:
    for C, Hq, Hkv, D in _QKV_CASES:
        w_q, w_k, w_v = _qkv_weights(C, Hq, Hkv, D)
        merged = fn(w_q, w_k, w_v)
        where = f"merge_qkv for C={C}, Hq={Hq}, Hkv={Hkv}, D={D}"
        expect_shape(merged, ((Hq + 2 * Hkv) * D, C), where)
        x = torch.randn(3, C)
        q, k, v = (x @ merged.T).split([Hq * D, Hkv * D, Hkv * D], dim=-1)
        for name, got, w in (("q", q, w_q), ("k", k, w_k), ("v", v, w_v)):
            if not torch.allclose(got, x @ w.T, atol=1e-4, rtol=1e-4):
                raise CheckFailed(
                    f"{where}: the {name} slice of x @ merged.T is not x @ w_{name}.T. Stack the "
                    "rows of w_q, then w_k, then w_v along dim 0 (the order of "
                    "PACKED_MODULES['qkv_proj'])."
                )


@exercise("ch04.merge_qkv", "keeps the weights' dtype and values exactly (bfloat16)")
def _merge_dtype(fn: Callable) -> None:
    w_q, w_k, w_v = _qkv_weights(64, 4, 2, 32, torch.bfloat16)
    merged = fn(w_q, w_k, w_v)
    expect_shape(merged, (256, 64), "merge_qkv of bfloat16 weights")
    expect(merged.dtype == torch.bfloat16,
           f"merge_qkv of bfloat16 weights returned {_name(merged.dtype)}; keep their dtype.")
    expect(torch.equal(merged, torch.cat([w_q, w_k, w_v])),
           "merge_qkv should only stack the weights: torch.cat of w_q, w_k, w_v along dim 0.")
