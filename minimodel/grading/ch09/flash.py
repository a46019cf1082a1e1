"""Checks of ch09.flash_attention: attention over tiles of queries and keys, returning (o, lse).

The expected values are `scaled_dot_product_attention` in float64 with an explicit bottom-right
mask (reference._attention64); a wrong answer is compared with the classic mistakes (top-left mask,
no mask, wrong scale, wrong KV head, base-2 lse) to name the one it makes. A dispatch mode
records the matrix products, so that a kernel that builds a head's whole score matrix fails.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from minimodel.grading.ch09.common import _TOL, _close, _pair, _unchanged, _worst
from minimodel.grading.ch09.reference import _attention64, _qkv
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import Text, tr
from minimodel.grading.oracles import bottom_right


def _flash_hint(o: torch.Tensor, lse: torch.Tensor, q, k, v, causal: bool) -> Text:
    """Name the classic mistake that (o, lse) reproduces (a hint that starts with a space)."""
    T, S, D = q.shape[0], k.shape[0], q.shape[-1]
    mask = bottom_right(T, S) if causal else None
    if not (bool(o.isfinite().all()) and bool(lse.isfinite().all())):
        return tr(" It holds inf or nan: an exp overflowed (scores minus a max that is not the "
                  "largest so far), or a row was divided by a sum of zero.")
    want_o, want_lse = _attention64(q, k, v, mask)
    if _close(o, want_o, 1e-4) and not _close(lse, want_lse, 1e-4):
        if _close(lse, want_lse / math.log(2), 1e-4):
            return tr(" The output is right; the lse is in base 2 (log2 of the sum of 2^x, as "
                      "GPU kernels keep it internally). Return the natural log: the lse of "
                      "torch.logsumexp over the scaled scores.")
        return tr(" The output is right, the lse is not: it is log(sum(exp(scaled score))) over "
                  "the keys each query sees, in natural log, max included.")
    candidates = []
    if causal and T < S:
        candidates.append((torch.ones(T, S, dtype=torch.bool).tril(), None, "h // G",
                           tr(" It matches a top-left causal mask: query t is token S - T + t "
                              "of the sequence (the queries are the last T of the S tokens), so "
                              "it sees keys 0..S-T+t.")))
    if causal:
        candidates.append((None, None, "h // G", tr(" It matches attention with no causal mask: "
                           "a query must not see the keys after its own position.")))
    candidates += [
        (mask, 1.0, "h // G", tr(" It matches unscaled scores: the scores are q·k / sqrt(D).")),
        (mask, 1.0 / D, "h // G",
         tr(" It matches scores scaled by 1/D; the scale is 1/sqrt(D).")),
    ]
    if q.shape[1] != k.shape[1] and k.shape[1] > 1:
        candidates.append((mask, None, "h % Hkv", tr(" It matches query head h reading KV head "
                           "h % Hkv; the G = Hq / Hkv heads of a group are neighbours, so "
                           "head h reads KV head h // G.")))
    for m, scale, heads, hint in candidates:
        if _close(o, _attention64(q, k, v, m, scale, heads)[0], 1e-4):
            return hint
    return tr(" A rescaling slip gives this kind of error: whenever a tile raises a row's "
              "running max, both the running sum and the accumulated output must be brought to "
              "the new max, and the max must carry over from one key tile to the next.")


def _what(T: int, S: int, Hq: int, Hkv: int, D: int, causal: bool, block_q: int,
          block_k: int) -> Text:
    """The call of flash_attention a message is about."""
    return tr("flash_attention(q [{T}, {Hq}, {D}], k and v [{S}, {Hkv}, {D}], causal={causal}, "
              "block_q={block_q}, block_k={block_k})", T=T, Hq=Hq, D=D, S=S, Hkv=Hkv,
              causal=causal, block_q=block_q, block_k=block_k)


def _flash_problem(
    fn: Callable, T: int, S: int, Hq: int, Hkv: int, D: int, causal: bool, block_q: int,
    block_k: int, q_scale: float = 1.0,
) -> Text | None:
    """What is wrong with the learner's flash_attention on one random case, or None."""
    q, k, v = _qkv(T, S, Hq, Hkv, D, q_scale)
    what = _what(T, S, Hq, Hkv, D, causal, block_q, block_k)
    copies = (q.clone(), k.clone(), v.clone())
    o, lse = _pair(fn(q, k, v, causal, block_q, block_k), what)
    _unchanged((q, k, v), copies, what)
    expect_shape(o, (T, Hq, D), tr("{what}: o", what=what))
    expect_shape(lse, (T, Hq), tr("{what}: lse (one per query and head)", what=what))
    want_o, want_lse = _attention64(q, k, v, bottom_right(T, S) if causal else None)
    if _close(o, want_o) and _close(lse, want_lse):
        return None
    which = "o" if not _close(o, want_o) else "lse"
    worst = _worst(o, want_o) if which == "o" else _worst(lse, want_lse)
    return tr("{what}: {which} is off by up to {worst:.3g} from scaled_dot_product_attention "
              "(float64, tolerance {tol:g}).{hint}", what=what, which=which, worst=worst,
              tol=_TOL, hint=_flash_hint(o, lse, q, k, v, causal))


def _flash_cases(fn: Callable, cases: list[tuple]) -> None:
    for case in cases:
        problem = _flash_problem(fn, *case)
        if problem:
            raise CheckFailed(problem)


def _blocks() -> tuple[int, int]:
    return int(torch.randint(1, 9, ())), int(torch.randint(2, 9, ()))


@exercise("ch09.flash_attention", "returns (o [T, Hq, D], lse [T, Hq]); non-causal equals SDPA "
          "within 1e-5")
def _fa_plain(fn: Callable) -> None:
    cases = [(1, 1, 2, 1, 4, False, 1, 1), (6, 11, 4, 2, 8, False, 4, 3),
             (9, 9, 2, 2, 16, False, *_blocks()), (3, 20, 4, 4, 32, False, 2, 16)]
    _flash_cases(fn, cases)


@exercise("ch09.flash_attention", "prefill (T = S, causal) at several tile sizes, including "
          "tiles that do not divide T and tiles larger than T")
def _fa_prefill(fn: Callable) -> str:
    T = int(torch.randint(9, 24, ()))
    tiles = [(1, 1), (4, 4), (3, 5), (8, 2), (64, 64), _blocks()]
    _flash_cases(fn, [(T, T, 4, 2, 16, True, bq, bk) for bq, bk in tiles])
    return tr("T = {T}, tiles {tiles}", T=T, tiles=tiles)


@exercise("ch09.flash_attention", "chunked prefill (T < S): the causal mask is bottom-right")
def _fa_chunk(fn: Callable) -> None:
    cases = []
    for _ in range(4):
        S = int(torch.randint(8, 30, ()))
        T = int(torch.randint(2, S, ()))
        cases.append((T, S, 4, 2, 8, True, *_blocks()))
    _flash_cases(fn, cases)


@exercise("ch09.flash_attention", "decode (T = 1): one query sees every key, causal or not")
def _fa_decode(fn: Callable) -> None:
    cases = []
    for causal in (True, False):
        S = int(torch.randint(5, 40, ()))
        cases += [(1, S, 8, 2, 16, causal, 1, bk) for bk in (1, 4, S)]
    _flash_cases(fn, cases)


@exercise("ch09.flash_attention", "GQA and MQA: the G query heads of a group share one K/V "
          "tile (head h reads KV head h // G)")
def _fa_gqa(fn: Callable) -> None:
    cases = []
    for Hq in (2, 6, 8):
        for Hkv in sorted({1, 2, Hq} & set(d for d in range(1, Hq + 1) if Hq % d == 0)):
            S = int(torch.randint(4, 16, ()))
            cases.append((int(torch.randint(1, S + 1, ())), S, Hq, Hkv, 8, True, 3, 4))
    _flash_cases(fn, cases)


@exercise("ch09.flash_attention", "lse is the natural-log log-sum-exp of the scaled scores")
def _fa_lse(fn: Callable) -> None:
    _flash_cases(fn, [(5, 12, 4, 2, 8, True, 2, 3), (1, 17, 2, 1, 16, False, 1, 5)])


@exercise("ch09.flash_attention", "rescales across key tiles: keys whose scores rise from tile "
          "to tile, and scores in the hundreds (where exp overflows)")
def _fa_rescale(fn: Callable) -> None:
    T, S, Hq, Hkv, D = 4, 24, 2, 1, 8
    q = torch.randn(T, Hq, D)
    base = torch.randn(S, Hkv, D) * 0.5
    toward_q = q[:1].mean(1, keepdim=True)  # [1, 1, D]: keys along it score high
    rising = base + torch.linspace(0.1, 3.0, S)[:, None, None] * toward_q
    for k, bk, kind, tol in ((rising, 4, tr("rising"), _TOL),
                             (base * 600.0, 5, tr("huge"), 1e-4)):
        v = torch.randn(S, Hkv, D)
        for causal in (False, True):
            what = tr("flash_attention(q [{T}, {Hq}, {D}], k and v [{S}, {Hkv}, {D}] with "
                      "{kind} scores, causal={causal}, block_q=2, block_k={bk})", T=T, Hq=Hq,
                      D=D, S=S, Hkv=Hkv, kind=kind, causal=causal, bk=bk)
            o, lse = _pair(fn(q, k, v, causal, 2, bk), what)
            expect_shape(o, (T, Hq, D), tr("{what}: o", what=what))
            expect_shape(lse, (T, Hq), tr("{what}: lse", what=what))
            mask = bottom_right(T, S) if causal else None
            want_o, want_lse = _attention64(q, k, v, mask)
            if not (_close(o, want_o, tol) and _close(lse, want_lse, tol)):
                worst = max(_worst(o, want_o), _worst(lse, want_lse))
                raise CheckFailed(tr("{what}: off by up to {worst:.3g} from "
                                     "scaled_dot_product_attention (float64).{hint}", what=what,
                                     worst=worst, hint=_flash_hint(o, lse, q, k, v, causal)))


class _MatmulSizes(TorchDispatchMode):
    """Records every matrix product an op runs: the largest output, and the FLOPs in all."""

    PRODUCTS = {"mm", "bmm", "addmm", "baddbmm", "addbmm"}

    def __init__(self) -> None:
        super().__init__()
        self.largest, self.flops = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.__name__.split(".")[0] in self.PRODUCTS and isinstance(out, torch.Tensor):
            a = args[0] if func.__name__.startswith(("mm", "bmm")) else args[1]
            self.largest = max(self.largest, out.numel())
            self.flops += 2 * out.numel() * a.shape[-1]
        return out


@exercise("ch09.flash_attention", "works tile by tile: no matrix product as large as a head's "
          "[T, S] scores (causal prefill, T = S = 64, tiles 4 x 8)")
def _fa_tiles(fn: Callable) -> str:
    T = S = 64
    Hq, Hkv, D, bq, bk = 2, 1, 4, 4, 8
    q, k, v = _qkv(T, S, Hq, Hkv, D)
    with _MatmulSizes() as seen:
        fn(q, k, v, True, bq, bk)
    expect(seen.largest < T * S // 2, tr(
        "{what} ran a matrix product with {largest} outputs; one head's whole score matrix has "
        "{whole}, a tile {tile} per query head. A FlashAttention kernel only ever holds a tile "
        "of scores: loop over query tiles and, inside, over key tiles, folding each score tile "
        "into the running max, sum and output.", what=_what(T, S, Hq, Hkv, D, True, bq, bk),
        largest=seen.largest, whole=T * S, tile=bq * bk))
    full = 2 * (2 * T * S * D * Hq)  # q k^T and p v over every (query, key) pair
    return tr("score and output products: {share:.0%} of the full matrix's FLOPs",
              share=seen.flops / full)
