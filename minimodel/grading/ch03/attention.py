"""Checks of ch03.attention: softmax(q k^T / sqrt(D)) v with a Bool mask (True = may attend) and
grouped KV heads, compared in float64 with minimodel.ops.softmax_attention on K/V repeated by
minimodel.reference's repeat_kv; a wrong output is matched against the classic mistakes.

Shapes: B batch, T queries, S keys, Hq query heads, Hkv KV heads, D head dim.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from minimodel.grading.ch03.common import _tril
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import Text, tr
from minimodel.ops import softmax_attention
from minimodel.reference.model import repeat_kv as ref_repeat_kv


def _expected_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """The package's attention in float64, K/V repeated to Hq heads: [B, Hq, T, D]."""
    groups = q.shape[1] // k.shape[1]
    return softmax_attention(
        q.double(), ref_repeat_kv(k.double(), groups), ref_repeat_kv(v.double(), groups),
        mask, scale,
    )


def _qkv(
    B: int, Hq: int, Hkv: int, T: int, S: int, D: int, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random q [B, Hq, T, D], k and v [B, Hkv, S, D]."""
    q = torch.randn(B, Hq, T, D).to(dtype)
    k = torch.randn(B, Hkv, S, D).to(dtype)
    v = torch.randn(B, Hkv, S, D).to(dtype)
    return q, k, v


def _random_mask(T: int, S: int) -> torch.Tensor:
    """A random Bool [T, S] mask with at least one True per row."""
    mask = torch.rand(T, S) < 0.5
    mask[torch.arange(T), torch.randint(S, (T,))] = True
    return mask


def _diagnose(
    out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
) -> Text | str:
    """A hint naming the classic mistake that `out` reproduces, or "" if none does."""
    D = q.shape[-1]
    groups = q.shape[1] // k.shape[1]
    got = out.double()
    if got.isnan().any():
        return tr(
            " Your output contains NaN: some query had every key masked, so its softmax ran "
            "over -inf only. Is the mask inverted? True means 'may attend'."
        )

    def same(t: torch.Tensor) -> bool:
        return t.shape == got.shape and torch.allclose(got, t, atol=1e-4, rtol=1e-4)

    if same(_expected_attention(q, k, v, mask, 1.0)):
        return tr(" It matches attention without scaling: multiply the scores by 1/sqrt(D).")
    if same(_expected_attention(q, k, v, mask, 1.0 / D)):
        return tr(" It matches scores scaled by 1/D; the scale is 1/sqrt(D).")
    if same(_expected_attention(q, k, v, mask, math.sqrt(D))):
        return tr(" It matches scores multiplied by sqrt(D); divide by sqrt(D) instead.")
    if mask is not None:
        if mask.shape[0] == mask.shape[1] and same(_expected_attention(q, k, v, mask.T, D**-0.5)):
            return tr(" It matches the transposed mask: mask[t, s] says whether query t reads "
                      "key s.")
        if (~mask).any(-1).all() and same(_expected_attention(q, k, v, ~mask, D**-0.5)):
            return tr(
                " It matches the inverted mask: True means 'may attend', so the scores that "
                "become -inf are those where the mask is False."
            )
        if same(_expected_attention(q, k, v, None, D**-0.5)):
            return tr(" It matches attention with no mask at all: apply the mask to the "
                      "scores.")
    if groups > 1:
        tiled_k, tiled_v = k.repeat(1, groups, 1, 1), v.repeat(1, groups, 1, 1)
        if same(_expected_attention(q, tiled_k, tiled_v, mask, D**-0.5)):
            return tr(
                " It matches K/V heads tiled in the order 0,1,0,1: query head h reads KV head "
                "h // groups, so consecutive query heads share a KV head (0,0,1,1)."
            )
    scores = q.double() @ ref_repeat_kv(k.double(), groups).transpose(-1, -2) * D**-0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    wrong_axis = scores.softmax(dim=-2).nan_to_num(0.0) @ ref_repeat_kv(v.double(), groups)
    if same(wrong_axis):
        return tr(
            " It matches a softmax over the queries (dim -2); each query's weights over the "
            "keys must sum to 1, so take the softmax over the last dim."
        )
    return ""


def _compare_attention(
    fn: Callable,
    B: int, Hq: int, Hkv: int, T: int, S: int, D: int,
    mask: torch.Tensor | None,
    dtype: torch.dtype = torch.float32,
) -> None:
    """The learner's attention must match softmax(q k^T / sqrt(D)) v on random q, k, v."""
    q, k, v = _qkv(B, Hq, Hkv, T, S, D, dtype)
    out = fn(q, k, v, mask)
    sizes = f"B={B}, Hq={Hq}, Hkv={Hkv}, T={T}, S={S}, D={D}"
    name = str(dtype).replace("torch.", "")
    what = (tr("attention with {sizes}, no mask, {dtype}", sizes=sizes, dtype=name)
            if mask is None else
            tr("attention with {sizes}, a mask, {dtype}", sizes=sizes, dtype=name))
    expect_shape(out, (B, Hq, T, D), what)
    expected = _expected_attention(q, k, v, mask, 1.0 / math.sqrt(D))
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    ok = torch.allclose(out.double(), expected, atol=tol, rtol=tol)
    if not ok:
        worst = float((out.double() - expected).abs().max())
        raise CheckFailed(tr(
            "{what} is off from softmax(q k^T / sqrt(D)) v: max abs diff {worst:.3g}.{hint}",
            what=what, worst=worst, hint=_diagnose(out, q, k, v, mask)))


@exercise("ch03.attention", "returns [B, Hq, T, D] for MHA, GQA and MQA, with and without mask")
def _attn_shape(fn: Callable) -> None:
    for B, Hq, Hkv, T, S, D in ((1, 4, 4, 3, 3, 8), (2, 4, 2, 5, 5, 16), (2, 6, 1, 4, 7, 8)):
        for mask in (None, _random_mask(T, S)):
            q, k, v = _qkv(B, Hq, Hkv, T, S, D)
            expect_shape(fn(q, k, v, mask), (B, Hq, T, D),
                         f"attention(q {tuple(q.shape)}, k {tuple(k.shape)}, v, mask)")


@exercise("ch03.attention", "without a mask equals softmax(q k^T / sqrt(D)) v (D = 4, 16, 64)")
def _attn_plain(fn: Callable) -> None:
    for B, H, T, D in ((1, 2, 5, 4), (2, 3, 6, 16), (1, 2, 4, 64)):
        _compare_attention(fn, B, H, H, T, T, D, None)


@exercise("ch03.attention", "with the causal mask, query t reads only keys 0..t")
def _attn_causal(fn: Callable) -> None:
    for B, H, T, D in ((1, 2, 6, 8), (2, 4, 9, 16)):
        _compare_attention(fn, B, H, H, T, T, D, _tril(T))


@exercise("ch03.attention", "applies any Bool [T, S] mask (True = may attend), also with S != T")
def _attn_any_mask(fn: Callable) -> None:
    for B, H, T, S, D in ((1, 2, 4, 4, 8), (2, 3, 3, 7, 8), (1, 2, 5, 2, 4)):
        _compare_attention(fn, B, H, H, T, S, D, _random_mask(T, S))


@exercise("ch03.attention", "GQA/MQA: query head h reads KV head h // (Hq // Hkv)")
def _attn_gqa(fn: Callable) -> None:
    for B, Hq, Hkv, T, D in ((1, 4, 2, 5, 8), (2, 8, 2, 4, 16), (1, 6, 3, 3, 8), (2, 4, 1, 6, 8)):
        _compare_attention(fn, B, Hq, Hkv, T, T, D, None)
        _compare_attention(fn, B, Hq, Hkv, T, T, D, _tril(T))


@exercise("ch03.attention", "works in bfloat16 and float16 and returns q's dtype")
def _attn_dtype(fn: Callable) -> None:
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v = _qkv(2, 4, 2, 5, 5, 16, dtype)
        out = fn(q, k, v, _tril(5))
        expect_shape(out, (2, 4, 5, 16), tr("attention in {dtype}", dtype=dtype))
        expect(out.dtype == dtype, tr("attention on {dtype} inputs returned {got}; return q's "
                                      "dtype (compute in float32 if you like, then cast).",
                                      dtype=dtype, got=out.dtype))
        _compare_attention(fn, 2, 4, 2, 5, 5, 16, _tril(5), dtype)
