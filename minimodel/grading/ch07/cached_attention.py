"""Checks of ch07.cached_attention: Q new tokens attend to K cached keys (theirs included) under
the bottom-right causal mask, compared in float64 with minimodel.ops.softmax_attention on K/V
repeated by the reference's repeat_kv; a wrong output is matched against the classic mistakes.

Shapes: Q new tokens of one request, K its cached tokens, Hq query heads, Hkv KV heads, D head
dim.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import Text, tr
from minimodel.grading.oracles import bottom_right
from minimodel.ops import softmax_attention
from minimodel.reference.model import repeat_kv


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
    scale: float, tiled: bool = False,
) -> torch.Tensor:
    """The package's attention in float64 on the packed layout: [Q, Hq, D]."""
    groups = q.shape[1] // k.shape[1]
    kh, vh = (t.double().transpose(0, 1)[None] for t in (k, v))  # [1, Hkv, K, D]
    if tiled:
        kh, vh = kh.repeat(1, groups, 1, 1), vh.repeat(1, groups, 1, 1)
    else:
        kh, vh = repeat_kv(kh, groups), repeat_kv(vh, groups)  # [1, Hq, K, D]
    out = softmax_attention(q.double().transpose(0, 1)[None], kh, vh, mask, scale)
    return out[0].transpose(0, 1)  # [Q, Hq, D]


def _cached_hint(
    got: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> Text | str:
    """Name the classic mistake that `got` reproduces, or ''."""
    Q, K, D = q.shape[0], k.shape[0], q.shape[-1]
    mask = bottom_right(Q, K)
    if got.isnan().any():
        return tr(" It contains NaN: some new token had every key masked. The mask is "
                  "bottom-right: token j sees keys 0..K-Q+j, so no row is empty.")

    def same(t: torch.Tensor) -> bool:
        return torch.allclose(got.double(), t, atol=1e-3, rtol=1e-3)

    top_left = torch.ones(Q, K, dtype=torch.bool).tril()
    candidates = [
        (top_left, D**-0.5, False,
         tr(" It matches a top-left causal mask (tril of a [Q, K] matrix, or SDPA's "
            "is_causal=True with Q < K): new token j is the (K-Q+j)-th token, so it sees keys "
            "0..K-Q+j.")),
        (None, D**-0.5, False, tr(" It matches attention with no mask: new token j must not "
                                  "see the keys after its own position K-Q+j.")),
        (mask, 1.0, False, tr(" It matches unscaled scores: without the 1/sqrt(D) scale the "
                              "softmax is far too sharp.")),
        (mask, 1.0 / D, False, tr(" It matches scores scaled by 1/D; the scale is 1/sqrt(D).")),
        (mask, D**-0.5, True, tr(" It matches K/V heads repeated in the order 0,1,0,1: query "
                                 "head h reads KV head h // (Hq // Hkv), so neighbouring query "
                                 "heads share a KV head.")),
    ]
    for m, scale, tiled, hint in candidates:
        if (m is None or (m.any(-1)).all()) and same(_attend(q, k, v, m, scale, tiled)):
            return hint
    return ""


def _what(Q: int, K: int, Hq: int, Hkv: int, D: int, dtype: torch.dtype = torch.float32) -> Text:
    """How a call of cached_attention on these shapes is written (its dtype when not float32)."""
    return tr("cached_attention(q [{Q}, {Hq}, {D}], k and v [{K}, {Hkv}, {D}]{dtype})", Q=Q, Hq=Hq,
              D=D, K=K, Hkv=Hkv, dtype=f", {dtype}" if dtype != torch.float32 else "")


def _qkv(
    Q: int, K: int, Hq: int, Hkv: int, D: int, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random q [Q, Hq, D], k and v [K, Hkv, D]."""
    return (torch.randn(Q, Hq, D).to(dtype), torch.randn(K, Hkv, D).to(dtype),
            torch.randn(K, Hkv, D).to(dtype))


def _compare_cached(
    fn: Callable, Q: int, K: int, Hq: int, Hkv: int, D: int,
    dtype: torch.dtype = torch.float32, tol: float = 1e-4,
) -> None:
    """The learner's output must keep its inputs and match bottom-right causal attention."""
    q, k, v = _qkv(Q, K, Hq, Hkv, D, dtype)
    what = _what(Q, K, Hq, Hkv, D, dtype)
    inputs = (q.clone(), k.clone(), v.clone())
    got = fn(*inputs)
    expect_shape(got, (Q, Hq, D), what)
    expect(all(torch.equal(a, b) for a, b in zip(inputs, (q, k, v), strict=True)),
           tr("{what} changed its inputs; return a new tensor", what=what))
    expect(got.dtype == dtype, tr("{what} returned {got}; return q's dtype {dtype}", what=what,
                                  got=got.dtype, dtype=dtype))
    want = _attend(q, k, v, bottom_right(Q, K), D**-0.5)
    if not torch.allclose(got.double(), want, atol=tol, rtol=tol):
        worst = float((got.double() - want).abs().nan_to_num(float("inf")).max())
        raise CheckFailed(tr("{what} is off by up to {worst:.3g} from bottom-right causal "
                             "attention.{hint}", what=what, worst=worst,
                             hint=_cached_hint(got, q, k, v)))


@exercise("ch07.cached_attention", "returns [Q, Hq, D] in q's dtype for 6 shapes")
def _cached_shape(fn: Callable) -> None:
    for Q, K, Hq, Hkv, D in ((1, 1, 2, 1, 4), (3, 3, 4, 2, 8), (2, 9, 6, 3, 16),
                             (1, 17, 8, 8, 32), (5, 12, 4, 1, 8), (4, 4, 2, 2, 64)):
        q, k, v = _qkv(Q, K, Hq, Hkv, D)
        what = _what(Q, K, Hq, Hkv, D)
        got = fn(q, k, v)
        expect_shape(got, (Q, Hq, D), what)
        expect(got.dtype == q.dtype, tr("{what} returned {got}; return q's dtype", what=what,
                                        got=got.dtype))


@exercise("ch07.cached_attention", "decode (Q = 1): the new token reads every cached key")
def _cached_decode(fn: Callable) -> None:
    for K, Hq, Hkv, D in ((1, 4, 2, 8), (7, 4, 2, 16), (20, 8, 2, 32), (33, 2, 1, 64)):
        _compare_cached(fn, 1, K, Hq, Hkv, D)


@exercise("ch07.cached_attention", "prefill (Q = K): ordinary causal attention, scaled by "
          "1/sqrt(D)")
def _cached_prefill(fn: Callable) -> None:
    for K, Hq, Hkv, D in ((2, 2, 2, 4), (6, 4, 2, 16), (11, 8, 4, 32), (16, 4, 1, 64)):
        _compare_cached(fn, K, K, Hq, Hkv, D)


@exercise("ch07.cached_attention", "chunked prefill (1 < Q < K): new token j reads keys "
          "0..K-Q+j (bottom-right)")
def _cached_chunk(fn: Callable) -> None:
    for Q, K, Hq, Hkv, D in ((3, 10, 4, 2, 8), (2, 5, 2, 1, 16), (8, 20, 4, 4, 32),
                             (5, 6, 8, 2, 16), (4, 16, 6, 3, 8)):
        _compare_cached(fn, Q, K, Hq, Hkv, D)


@exercise("ch07.cached_attention", "GQA and MQA: query head h reads KV head h // (Hq // Hkv), "
          "Hkv in {1, 2, Hq}")
def _cached_gqa(fn: Callable) -> None:
    for Hq in (2, 4, 8):
        for Hkv in sorted({1, 2, Hq}):
            Q = int(torch.randint(1, 6, ()))
            _compare_cached(fn, Q, Q + int(torch.randint(0, 8, ())), Hq, Hkv, 16)


@exercise("ch07.cached_attention", "works in bfloat16 and float16 and returns q's dtype")
def _cached_dtypes(fn: Callable) -> None:
    for dtype in (torch.bfloat16, torch.float16):
        for Q, K in ((1, 9), (3, 8), (6, 6)):
            _compare_cached(fn, Q, K, 4, 2, 32, dtype=dtype, tol=5e-2)
