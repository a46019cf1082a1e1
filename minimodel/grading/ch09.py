"""Checks of chapter 09 (inside the attention kernel): online_softmax, flash_attention,
merge_states and paged_split_kv_decode.

Shapes: T queries, S keys, Hq query heads, Hkv KV heads (G = Hq / Hkv), D head dim; in the paged
exercise B requests, P pages in the pool, page size S_p (`page_size`).

Expected values are computed in float64: softmax and logsumexp from torch, attention from
`scaled_dot_product_attention` with an explicit bottom-right mask, and, for the paged exercise,
the engine's torch backend (minimodel.engine.attention) on the same pool; its work items (the
calls of the learner's flash_attention, traced back to the tokens they read) against the budget
and against `longest_item`, the shortest longest chunk the budget allows.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from minimodel.config import Qwen3Config
from minimodel.engine.attention import TorchBackend, build_metadata
from minimodel.engine.kv_cache import KVCache
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.learner import spy_calls
from minimodel.grading.oracles import bottom_right

_TOL = 1e-5  # float32 against float64, as the chapter promises: <= 1e-5

# --- shared --------------------------------------------------------------------------------------


def _close(got: torch.Tensor, want: torch.Tensor, tol: float = _TOL) -> bool:
    return bool(torch.allclose(got.double(), want.double(), atol=tol, rtol=tol))


def _worst(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).abs().nan_to_num(float("inf")).max())


def _tensor(out: object, what: str) -> torch.Tensor:
    expect(isinstance(out, torch.Tensor), f"{what} should return a torch.Tensor, got "
                                          f"{type(out).__name__}")
    assert isinstance(out, torch.Tensor)
    return out


def _pair(out: object, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The (output, lse) a function returned, after checking it is a pair of tensors."""
    expect(isinstance(out, (tuple, list)) and len(out) == 2,
           f"{what} should return a tuple (o, lse), got {type(out).__name__}")
    assert isinstance(out, (tuple, list))
    o, lse = out
    for name, t in (("o", o), ("lse", lse)):
        expect(isinstance(t, torch.Tensor),
               f"{what}: {name} should be a torch.Tensor, got {type(t).__name__}")
    return o, lse


def _unchanged(inputs: tuple[torch.Tensor, ...], copies: tuple[torch.Tensor, ...],
               what: str) -> None:
    same = all(torch.equal(a, b) for a, b in zip(inputs, copies, strict=True))
    expect(same, f"{what} changed one of its inputs; compute into new tensors (a kernel reads "
                 "q, k, v and the states, and writes only its outputs)")


# --- online_softmax ------------------------------------------------------------------------------


def _softmax_problem(fn: Callable, x: torch.Tensor, block: int) -> str | None:
    """What is wrong with fn(x, block), or None."""
    what = f"online_softmax(x {list(x.shape)}, block={block})"
    before = x.clone()
    got = _tensor(fn(x, block), what)
    _unchanged((x,), (before,), what)
    expect_shape(got, tuple(x.shape), what)
    want = torch.softmax(x.double(), dim=-1)
    if _close(got, want, 1e-6):
        return None
    message = f"{what} is off from x.softmax(-1) by up to {_worst(got, want):.3g}."
    if not bool(got.isfinite().all()):
        return message + (" It holds inf or nan: an exp of a large logit overflowed (float32 "
                          "holds up to about exp(88.7)), or 0/0 came from exps that all "
                          "underflowed. Every exp should see a logit minus a max that is at "
                          "least as large.")
    sums = got.double().sum(-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        return message + (f" Its rows sum to {float(sums.min()):.3g}..{float(sums.max()):.3g}, "
                          "not 1: the running sum must end as the sum over the whole row, in "
                          "the same units (the same max) as the numerators it divides.")
    return message + (" The rows sum to 1 but the values are wrong: when a block raises the "
                      "running max, what was summed under the old max has to be brought to "
                      "the new one.")


def _softmax_cases(fn: Callable, cases: list[tuple[torch.Tensor, int]]) -> None:
    for x, block in cases:
        problem = _softmax_problem(fn, x, block)
        if problem:
            raise CheckFailed(problem)


@exercise("ch09.online_softmax", "returns x's shape, equal to x.softmax(-1) for 1-D, 2-D and "
          "3-D inputs")
def _sm_shapes(fn: Callable) -> None:
    cases = []
    for shape in ((9,), (3, 16), (2, 3, 21), (4, 1), (1, 50)):
        cases.append((torch.randn(shape) * 3, int(torch.randint(1, 8, ()))))
    _softmax_cases(fn, cases)


@exercise("ch09.online_softmax", "any block size: 1, one that divides S, one that does not, "
          "and block >= S")
def _sm_blocks(fn: Callable) -> str:
    cases = []
    for S in (int(torch.randint(10, 40, ())), 64):
        x = torch.randn(5, S) * 4
        for block in (1, 8 if S == 64 else 3, S - 1, S, S + 5):
            cases.append((x, block))
    _softmax_cases(fn, cases)
    return f"{len(cases)} (S, block) pairs"


@exercise("ch09.online_softmax", "carries the max across blocks: rows that rise, fall, and "
          "jump")
def _sm_carry(fn: Callable) -> None:
    S = 40
    ramp = torch.linspace(-10, 10, S)
    jump = torch.zeros(S)
    jump[int(torch.randint(20, S, ()))] = 12.0  # a late block with a much larger max
    rows = torch.stack([ramp, ramp.flip(0), jump, torch.randn(S) * 6])
    _softmax_cases(fn, [(rows, b) for b in (4, 7)])


@exercise("ch09.online_softmax", "stable on logits in the thousands, where exp(x) overflows")
def _sm_large(fn: Callable) -> None:
    x = torch.randn(4, 30) * 5
    x[0] += 1000.0
    x[1] -= 1000.0  # exp underflows to 0 for every entry
    x[2, ::2] += 3000.0  # half the row far above the rest
    _softmax_cases(fn, [(x, 4), (x, 7), (x * 2, 30)])


# --- flash_attention ------------------------------------------------------------------------------


def _attention64(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
    scale: float | None = None, heads: str = "h // G",
) -> tuple[torch.Tensor, torch.Tensor]:
    """SDPA in float64 and the natural-log lse: (o [T, Hq, D], lse [T, Hq]).
    heads="h % Hkv" reads the KV heads in the wrong order (a classic GQA slip)."""
    T, Hq, D = q.shape
    Hkv = k.shape[1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    if heads == "h // G":
        kh, vh = (t.double().repeat_interleave(Hq // Hkv, dim=1) for t in (k, v))
    else:
        kh, vh = (t.double().repeat(1, Hq // Hkv, 1) for t in (k, v))
    qh, kh, vh = q.double().transpose(0, 1), kh.transpose(0, 1), vh.transpose(0, 1)
    o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, scale=scale)  # [Hq, T, D]
    scores = qh @ kh.transpose(1, 2) * scale  # [Hq, T, S]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return o.transpose(0, 1), torch.logsumexp(scores, dim=-1).transpose(0, 1)


def _qkv(T: int, S: int, Hq: int, Hkv: int, D: int, scale: float = 1.0):
    return torch.randn(T, Hq, D) * scale, torch.randn(S, Hkv, D), torch.randn(S, Hkv, D)


def _flash_hint(o: torch.Tensor, lse: torch.Tensor, q, k, v, causal: bool) -> str:
    """Name the classic mistake that (o, lse) reproduces, or ''."""
    T, S, D = q.shape[0], k.shape[0], q.shape[-1]
    mask = bottom_right(T, S) if causal else None
    if not (bool(o.isfinite().all()) and bool(lse.isfinite().all())):
        return (" It holds inf or nan: an exp overflowed (scores minus a max that is not the "
                "largest so far), or a row was divided by a sum of zero.")
    want_o, want_lse = _attention64(q, k, v, mask)
    if _close(o, want_o, 1e-4) and not _close(lse, want_lse, 1e-4):
        if _close(lse, want_lse / math.log(2), 1e-4):
            return (" The output is right; the lse is in base 2 (log2 of the sum of 2^x, as "
                    "GPU kernels keep it internally). Return the natural log: the lse of "
                    "torch.logsumexp over the scaled scores.")
        return (" The output is right, the lse is not: it is log(sum(exp(scaled score))) over "
                "the keys each query sees, in natural log, max included.")
    candidates = []
    if causal and T < S:
        candidates.append((torch.ones(T, S, dtype=torch.bool).tril(), None, "h // G",
                           " It matches a top-left causal mask: query t is token S - T + t of "
                           "the sequence (the queries are the last T of the S tokens), so it "
                           "sees keys 0..S-T+t."))
    if causal:
        candidates.append((None, None, "h // G", " It matches attention with no causal mask: "
                           "a query must not see the keys after its own position."))
    candidates += [
        (mask, 1.0, "h // G", " It matches unscaled scores: the scores are q·k / sqrt(D)."),
        (mask, 1.0 / D, "h // G", " It matches scores scaled by 1/D; the scale is 1/sqrt(D)."),
    ]
    if q.shape[1] != k.shape[1] and k.shape[1] > 1:
        candidates.append((mask, None, "h % Hkv", " It matches query head h reading KV head "
                           "h % Hkv; the G = Hq / Hkv heads of a group are neighbours, so "
                           "head h reads KV head h // G."))
    for m, scale, heads, hint in candidates:
        if _close(o, _attention64(q, k, v, m, scale, heads)[0], 1e-4):
            return hint
    return (" A rescaling slip gives this kind of error: whenever a tile raises a row's "
            "running max, both the running sum and the accumulated output must be brought to "
            "the new max, and the max must carry over from one key tile to the next.")


def _flash_problem(
    fn: Callable, T: int, S: int, Hq: int, Hkv: int, D: int, causal: bool, block_q: int,
    block_k: int, q_scale: float = 1.0,
) -> str | None:
    """What is wrong with the learner's flash_attention on one random case, or None."""
    q, k, v = _qkv(T, S, Hq, Hkv, D, q_scale)
    what = (f"flash_attention(q [{T}, {Hq}, {D}], k and v [{S}, {Hkv}, {D}], causal={causal}, "
            f"block_q={block_q}, block_k={block_k})")
    copies = (q.clone(), k.clone(), v.clone())
    o, lse = _pair(fn(q, k, v, causal, block_q, block_k), what)
    _unchanged((q, k, v), copies, what)
    expect_shape(o, (T, Hq, D), f"{what}: o")
    expect_shape(lse, (T, Hq), f"{what}: lse (one per query and head)")
    want_o, want_lse = _attention64(q, k, v, bottom_right(T, S) if causal else None)
    if _close(o, want_o) and _close(lse, want_lse):
        return None
    which = "o" if not _close(o, want_o) else "lse"
    worst = _worst(o, want_o) if which == "o" else _worst(lse, want_lse)
    return (f"{what}: {which} is off by up to {worst:.3g} from scaled_dot_product_attention "
            f"(float64, tolerance {_TOL:g})." + _flash_hint(o, lse, q, k, v, causal))


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
    return f"T = {T}, tiles {tiles}"


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
    for k, bk, kind, tol in ((rising, 4, "rising", _TOL), (base * 600.0, 5, "huge", 1e-4)):
        v = torch.randn(S, Hkv, D)
        for causal in (False, True):
            what = (f"flash_attention(q [{T}, {Hq}, {D}], k and v [{S}, {Hkv}, {D}] with "
                    f"{kind} scores, causal={causal}, block_q=2, block_k={bk})")
            o, lse = _pair(fn(q, k, v, causal, 2, bk), what)
            expect_shape(o, (T, Hq, D), f"{what}: o")
            expect_shape(lse, (T, Hq), f"{what}: lse")
            mask = bottom_right(T, S) if causal else None
            want_o, want_lse = _attention64(q, k, v, mask)
            if not (_close(o, want_o, tol) and _close(lse, want_lse, tol)):
                worst = max(_worst(o, want_o), _worst(lse, want_lse))
                raise CheckFailed(f"{what}: off by up to {worst:.3g} from "
                                  "scaled_dot_product_attention (float64)."
                                  + _flash_hint(o, lse, q, k, v, causal))


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
    expect(seen.largest < T * S // 2, (
        f"flash_attention(q [{T}, {Hq}, {D}], k and v [{S}, {Hkv}, {D}], causal=True, "
        f"block_q={bq}, block_k={bk}) ran a matrix product with {seen.largest} outputs; one "
        f"head's whole score matrix has {T * S}, a tile {bq * bk} per query head. A "
        "FlashAttention kernel only ever holds a tile of scores: loop over query tiles and, "
        "inside, over key tiles, folding each score tile into the running max, sum and "
        "output."))
    full = 2 * (2 * T * S * D * Hq)  # q k^T and p v over every (query, key) pair
    return f"score and output products: {seen.flops / full:.0%} of the full matrix's FLOPs"


# --- merge_states ---------------------------------------------------------------------------------


def _merge64(o_a, lse_a, o_b, lse_b) -> tuple[torch.Tensor, torch.Tensor]:
    lse = torch.logaddexp(lse_a.double(), lse_b.double())
    w_a, w_b = torch.exp(lse_a.double() - lse), torch.exp(lse_b.double() - lse)
    w_a, w_b = w_a.nan_to_num(0.0), w_b.nan_to_num(0.0)
    return o_a.double() * w_a[..., None] + o_b.double() * w_b[..., None], lse


def _call_merge(fn: Callable, o_a, lse_a, o_b, lse_b, what: str):
    copies = tuple(t.clone() for t in (o_a, lse_a, o_b, lse_b))
    o, lse = _pair(fn(o_a, lse_a, o_b, lse_b), what)
    _unchanged((o_a, lse_a, o_b, lse_b), copies, what)
    T, H, D = o_a.shape
    expect_shape(o, (T, H, D), f"{what}: o")
    expect_shape(lse, (T, H), f"{what}: lse")
    return o, lse


def _merge_hint(o, lse, o_a, lse_a, o_b, lse_b) -> str:
    if not (bool(o.isfinite().all()) and bool(lse.isfinite().all())):
        return (" It holds inf or nan: exp(lse) overflows float32 above about 88.7 (and "
                "underflows to 0 below about -103, so 0/0). Only differences of lse values "
                "should meet an exp, taken against the larger of the two.")
    want_o, want_lse = _merge64(o_a, lse_a, o_b, lse_b)
    base2 = torch.logaddexp2(lse_a.double(), lse_b.double())
    if _close(lse, base2, 1e-4) and not _close(lse, want_lse, 1e-4):
        return (" The lse matches a base-2 merge (log2 of 2^a + 2^b). The states here hold "
                "natural logs: merge with exp and log.")
    if _close(o, (o_a.double() + o_b.double()) / 2, 1e-4):
        return (" The output is the plain average of the two: each side counts in proportion "
                "to its share of the total exp-sum, which its lse gives.")
    if _close(lse, torch.maximum(lse_a, lse_b).double(), 1e-4):
        return (" The lse is the larger of the two; the merged lse is the log of the sum of "
                "both exp-sums, a little above the larger one.")
    if _close(lse, lse_a.double() + lse_b.double(), 1e-4):
        return " The lse is the sum of the two; the exp-sums add, so their logs do not."
    return ""


def _merge_case(fn: Callable, o_a, lse_a, o_b, lse_b, what: str, tol: float = _TOL) -> None:
    o, lse = _call_merge(fn, o_a, lse_a, o_b, lse_b, what)
    want_o, want_lse = _merge64(o_a, lse_a, o_b, lse_b)
    if _close(o, want_o, tol) and _close(lse, want_lse, tol):
        return
    worst = max(_worst(o, want_o), _worst(lse, want_lse))
    raise CheckFailed(f"{what} is off by up to {worst:.3g} from the state over both key sets."
                      + _merge_hint(o, lse, o_a, lse_a, o_b, lse_b))


@exercise("ch09.merge_states", "the states of two parts of the keys merge into the state of "
          "all of them (SDPA over the whole)")
def _merge_halves(fn: Callable) -> str:
    for _ in range(5):
        T, Hkv, D = int(torch.randint(1, 6, ())), int(torch.randint(1, 4, ())), 16
        Hq = Hkv * int(torch.randint(1, 4, ()))
        S = int(torch.randint(2, 30, ()))
        cut = int(torch.randint(1, S, ()))
        q, k, v = _qkv(T, S, Hq, Hkv, D, 2.0)
        o_a, lse_a = _attention64(q, k[:cut], v[:cut], None)
        o_b, lse_b = _attention64(q, k[cut:], v[cut:], None)
        what = (f"merge_states of attention over keys 0..{cut - 1} and {cut}..{S - 1} "
                f"(o [{T}, {Hq}, {D}])")
        o, lse = _call_merge(fn, o_a.float(), lse_a.float(), o_b.float(), lse_b.float(), what)
        want_o, want_lse = _attention64(q, k, v, None)
        if not (_close(o, want_o) and _close(lse, want_lse)):
            worst = max(_worst(o, want_o), _worst(lse, want_lse))
            raise CheckFailed(f"{what} is off by up to {worst:.3g} from attention over all "
                              f"{S} keys." + _merge_hint(o, lse, o_a, lse_a, o_b, lse_b))
    return "5 random cuts"


def _states(T: int, H: int, D: int, lse_center: float, spread: float):
    return (torch.randn(T, H, D), lse_center + torch.randn(T, H) * spread,
            torch.randn(T, H, D), lse_center + torch.randn(T, H) * spread)


@exercise("ch09.merge_states", "stable for lse values in the thousands (and far below zero)")
def _merge_large(fn: Callable) -> None:
    for center in (3000.0, 1000.0, -2000.0):
        o_a, lse_a, o_b, lse_b = _states(4, 3, 8, center, 2.0)
        _merge_case(fn, o_a, lse_a, o_b, lse_b, f"merge_states with lse values around "
                    f"{center:g}", tol=1e-4)


@exercise("ch09.merge_states", "one side far larger: the merge is that side; an empty side "
          "(lse = -inf) changes nothing")
def _merge_lopsided(fn: Callable) -> None:
    o_a, lse_a, o_b, lse_b = _states(3, 2, 8, 0.0, 1.0)
    _merge_case(fn, o_a, lse_a + 200.0, o_b, lse_b, "merge_states with lse_a 200 above lse_b")
    empty = torch.full_like(lse_b, float("-inf"))
    _merge_case(fn, o_a, lse_a, torch.zeros_like(o_b), empty,
                "merge_states with an empty second state (o_b = 0, lse_b = -inf)")
    _merge_case(fn, torch.zeros_like(o_a), empty, o_b, lse_b,
                "merge_states with an empty first state (o_a = 0, lse_a = -inf)")


@exercise("ch09.merge_states", "order does not matter: merge(a, b) = merge(b, a), and three "
          "chunks merge the same either way")
def _merge_order(fn: Callable) -> None:
    T, Hq, Hkv, D, S = 3, 4, 2, 8, 24
    q, k, v = _qkv(T, S, Hq, Hkv, D)
    parts = [_attention64(q, k[a:b], v[a:b], None) for a, b in ((0, 5), (5, 17), (17, 24))]
    parts = [(o.float(), lse.float()) for o, lse in parts]
    (o1, l1), (o2, l2), (o3, l3) = parts
    want_o, want_lse = _attention64(q, k, v, None)
    for name, (o, lse) in (
        ("merge(merge(c1, c2), c3)", fn(*_pair(fn(o1, l1, o2, l2), "merge_states"), o3, l3)),
        ("merge(c1, merge(c2, c3))", fn(o1, l1, *_pair(fn(o2, l2, o3, l3), "merge_states"))),
        ("merge(c3, merge(c2, c1))", fn(o3, l3, *_pair(fn(o2, l2, o1, l1), "merge_states"))),
    ):
        expect(_close(o, want_o) and _close(lse, want_lse),
               f"{name} over three chunks of 24 keys is off by up to "
               f"{max(_worst(o, want_o), _worst(lse, want_lse)):.3g} from attention over all "
               "of them")


@exercise("ch09.merge_states", "bfloat16 outputs with float32 lse (FlashInfer's attention "
          "states) and float64")
def _merge_dtypes(fn: Callable) -> None:
    o_a, lse_a, o_b, lse_b = _states(5, 4, 16, 10.0, 3.0)
    _merge_case(fn, o_a.bfloat16(), lse_a, o_b.bfloat16(), lse_b,
                "merge_states with bfloat16 o and float32 lse", tol=2e-2)
    _merge_case(fn, o_a.double(), lse_a.double(), o_b.double(), lse_b.double(),
                "merge_states in float64")


# --- paged_split_kv_decode ------------------------------------------------------------------------

_GARBAGE = 30.0  # K and V of slots no request owns: read them and the result is far off


def _random_lens(page_size: int, B: int) -> list[int]:
    """B request lengths, one of them (when B > 1) an exact number of pages."""
    kv_lens = [int(torch.randint(1, 6 * page_size + 5, ())) for _ in range(B)]
    if B > 1:
        kv_lens[0] = page_size * int(torch.randint(1, 4, ()))  # a full last page
    return kv_lens


def _paged_batch(kv_lens: list[int], page_size: int, Hq: int, Hkv: int, D: int):
    """A pool holding requests of kv_lens tokens on pages scattered over it, garbage in every
    slot no request fills, and one query per request: (q, pool, kv_lens, page tables)."""
    need = [-(-n // page_size) for n in kv_lens]
    P = sum(need) + 5
    order = torch.randperm(P).tolist()
    tables, start = [], 0
    for n in need:
        tables.append(order[start : start + n])
        start += n
    pool = torch.full((P, 2, page_size, Hkv, D), _GARBAGE)
    pool[:, 0] *= torch.sign(torch.randn(P, page_size, Hkv, D))  # garbage keys of both signs
    for n, table in zip(kv_lens, tables, strict=True):
        tokens = torch.randn(n, 2, Hkv, D)  # [n, K/V, Hkv, D]
        for t in range(n):
            pool[table[t // page_size], :, t % page_size] = tokens[t]
    return torch.randn(len(kv_lens), Hq, D), pool, kv_lens, tables


def _engine_decode(q: torch.Tensor, pool: torch.Tensor, kv_lens: list[int],
                   tables: list[list[int]]) -> torch.Tensor:
    """The engine's torch backend on the same pool: o [B, Hq, D] in float32."""
    P, _, S, Hkv, D = pool.shape
    Hq = q.shape[1]
    cfg = Qwen3Config(hidden_size=Hq * D, intermediate_size=8, num_hidden_layers=1,
                      num_attention_heads=Hq, num_key_value_heads=Hkv, head_dim=D,
                      vocab_size=8)
    cache = KVCache(cfg, P, S, torch.float32, "cpu")
    cache.pools[0].copy_(pool.float())
    md = build_metadata([list(t) for t in tables], kv_lens, [1] * len(kv_lens), S)
    backend = TorchBackend(cache, Hq, torch.float32)
    backend.plan(md)
    rows = cache.rows(0)[backend.new_k_rows]  # the new tokens' K as already in the pool, so the
    vals = cache.rows(0)[backend.new_k_rows + S]  # backend's store rewrites the same values
    return backend.forward(q.float(), rows.clone(), vals.clone(), 0)


def _expected_decode(q, pool, kv_lens, tables) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 (o [B, Hq, D], lse [B, Hq]) from each request's tokens, gathered in order."""
    outs, lses = [], []
    for b, (n, table) in enumerate(zip(kv_lens, tables, strict=True)):
        kv = pool[torch.tensor(table)].double()  # [pages, 2, S, Hkv, D]
        k, v = kv[:, 0].flatten(0, 1)[:n], kv[:, 1].flatten(0, 1)[:n]
        o, lse = _attention64(q[b : b + 1], k, v, None)
        outs.append(o[0])
        lses.append(lse[0])
    return torch.stack(outs), torch.stack(lses)


def _metadata(kv_lens: list[int], tables: list[list[int]], page_size: int):
    md = build_metadata([list(t) for t in tables], kv_lens, [1] * len(kv_lens), page_size)
    return md.kv_indptr, md.kv_indices, md.kv_last_page_len


def longest_item(kv_lens: list[int], num_work_items: int) -> int:
    """The fewest tokens the longest work item can have when the requests of kv_lens tokens are
    cut into at most num_work_items contiguous chunks (every request at least one).

    Chunks of at most L tokens take ceil(n / L) items for a request of n; that count falls as L
    grows, so the answer is the smallest L whose counts fit the budget."""
    lo, hi = 1, max(kv_lens)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if sum(-(-n // mid) for n in kv_lens) <= num_work_items else (
            mid + 1, hi)
    return lo


def _budget(kv_lens: list[int]) -> int:
    """A random budget: from one item per request up to one item per token and a few more."""
    return int(torch.randint(len(kv_lens), sum(kv_lens) + 3, ()))


def _paged_call(fn: Callable, q, pool, kv_lens, tables, num_work_items: int):
    S = pool.shape[2]
    indptr, indices, last = _metadata(kv_lens, tables, S)
    what = (f"paged_split_kv_decode(q [{q.shape[0]}, {q.shape[1]}, {q.shape[2]}], pool with "
            f"page_size {S}, kv_lens {kv_lens}, num_work_items={num_work_items})")
    inputs = (q, pool, indptr, indices, last)
    copies = tuple(t.clone() for t in inputs)
    o, lse = _pair(fn(q, pool, indptr, indices, last, num_work_items), what)
    _unchanged(inputs, copies, what)
    expect_shape(o, tuple(q.shape), f"{what}: o (one output per request and head)")
    expect_shape(lse, tuple(q.shape[:2]), f"{what}: lse")
    return o, lse, what


def _paged_hint(o, lse, q, pool, kv_lens, tables) -> str:
    if not (bool(o.isfinite().all()) and bool(lse.isfinite().all())):
        return " It holds inf or nan."
    want_o, want_lse = _expected_decode(q, pool, kv_lens, tables)
    if _close(o, want_o, 1e-4) and _close(lse, want_lse / math.log(2), 1e-4):
        return " The output is right; the lse is in base 2. Return the natural log."
    S = pool.shape[2]
    full = [-(-n // S) * S for n in kv_lens]
    if any(f != n for f, n in zip(full, kv_lens, strict=True)) and _close(
            o, _expected_decode(q, pool, full, tables)[0], 1e-4):
        return (" It matches reading every slot of each request's last page: only "
                "kv_last_page_len of them hold tokens; the rest are whatever the pool held "
                "before (here: large garbage).")
    if len(kv_lens) > 1 and not _close(o[:1], want_o[:1], 1e-4) and _close(o[1:], want_o[1:],
                                                                           1e-4):
        return " Only request 0 is wrong."
    if _close(o[:1], want_o[:1], 1e-4) and not _close(o, want_o, 1e-4):
        return (" Request 0 is right and a later one is not: request b's pages are "
                "kv_indices[kv_indptr[b]:kv_indptr[b+1]].")
    return ""




def _paged_right(fn: Callable, q, pool, kv_lens, tables, num_work_items: int) -> None:
    """Fail unless fn's output equals the engine's torch backend and its lse the float64 one."""
    engine = _engine_decode(q, pool, kv_lens, tables)
    _, want_lse = _expected_decode(q, pool, kv_lens, tables)
    o, lse, what = _paged_call(fn, q, pool, kv_lens, tables, num_work_items)
    if _close(o, engine) and _close(lse, want_lse):
        return
    worst = max(_worst(o, engine), _worst(lse, want_lse))
    raise CheckFailed(f"{what} is off by up to {worst:.3g} from the engine's torch backend "
                      "(o) and a float64 reference (lse)."
                      + _paged_hint(o, lse, q, pool, kv_lens, tables))


def _paged_case(fn: Callable, page_size: int, Hq: int, Hkv: int, D: int, B: int,
                budgets: Callable[[list[int]], list[int]]) -> None:
    q, pool, kv_lens, tables = _paged_batch(_random_lens(page_size, B), page_size, Hq, Hkv, D)
    for w in budgets(kv_lens):
        _paged_right(fn, q, pool, kv_lens, tables, w)


@exercise("ch09.paged_split_kv_decode", "returns (o [B, Hq, D], lse [B, Hq]); one request, "
          "a budget of 1 item, of a few, and of more items than it has tokens")
def _paged_one(fn: Callable) -> None:
    _paged_case(fn, 4, 4, 2, 16, 1, lambda lens: [1, 3, lens[0] + 4])


@exercise("ch09.paged_split_kv_decode", "a batch of requests of different lengths, pages "
          "scattered over the pool, page sizes 1, 3 and 16: equals the engine's torch backend")
def _paged_batches(fn: Callable) -> str:
    for S in (1, 3, 16):
        _paged_case(fn, S, 8, 2, 16, int(torch.randint(2, 5, ())),
                    lambda lens: [len(lens), _budget(lens)])
    return "3 page sizes"


@exercise("ch09.paged_split_kv_decode", "reads only each request's pages, and only "
          "kv_last_page_len slots of its last one (the others hold garbage)")
def _paged_garbage(fn: Callable) -> None:
    for S in (4, 5):
        _paged_case(fn, S, 4, 4, 8, 3, lambda lens: [_budget(lens)])


@exercise("ch09.paged_split_kv_decode", "GQA and MQA: query head h reads KV head h // G")
def _paged_gqa(fn: Callable) -> None:
    _paged_case(fn, 3, 6, 3, 8, 2, lambda lens: [_budget(lens)])
    _paged_case(fn, 4, 8, 1, 16, 2, lambda lens: [_budget(lens)])


class _WorkItems:
    """The calls of the learner's flash_attention while a block runs, traced back to tokens:
    each call's keys as the (request, position) pairs they are, found by value."""

    def __init__(self, fn: Callable, keys: list[torch.Tensor]) -> None:
        self.fn, self.calls = inspect.unwrap(fn), []
        self.where = {(float(k[t, 0, 0]), float(k[t, -1, -1])): (b, t)
                      for b, k in enumerate(keys) for t in range(k.shape[0])}

    def __enter__(self) -> _WorkItems:
        self.space = self.fn.__globals__
        self.original = self.space.get("flash_attention")
        if not callable(self.original):
            raise CheckFailed("paged_split_kv_decode should call your flash_attention of "
                              "exercise 2, once per work item; no flash_attention is defined "
                              "where it runs.")
        original, params = self.original, None
        try:
            params = list(inspect.signature(original).parameters)
        except (TypeError, ValueError):
            pass

        def recorded(*args, **kwargs):
            k = args[1] if len(args) > 1 else kwargs.get(params[1] if params else "k")
            if isinstance(k, torch.Tensor) and k.dim() == 3:
                self.calls.append([self.where.get((float(r[0, 0]), float(r[-1, -1])))
                                   for r in k.detach()])
            else:
                self.calls.append(None)
            return original(*args, **kwargs)

        self.space["flash_attention"] = recorded
        return self

    def __exit__(self, *exc) -> None:
        self.space["flash_attention"] = self.original


def _runs(calls: list, kv_lens: list[int], what: str) -> list[tuple[int, int, int]]:
    """(request, first token, tokens) of every work item, after checking that each is one
    contiguous run of one request's tokens and that together they cover every token once."""
    expect(bool(calls), f"{what} made no call of your flash_attention (exercise 2): each work "
                        "item is one call, over one chunk of one request's keys.")
    runs, seen = [], [[0] * n for n in kv_lens]
    for i, keys in enumerate(calls):
        expect(keys is not None and len(keys) > 0 and None not in keys, (
            f"{what}: call {i + 1} of your flash_attention got keys that are not tokens of the "
            "batch as the pool holds them (each work item's k is a run of one request's K, "
            "gathered through its pages, unchanged)."))
        requests = {b for b, _ in keys}
        expect(len(requests) == 1, f"{what}: call {i + 1} of your flash_attention mixes the "
               f"keys of requests {sorted(requests)}; a work item attends one request's query "
               "over that request's keys.")
        b = keys[0][0]
        first, positions = min(t for _, t in keys), sorted(t for _, t in keys)
        expect(positions == list(range(first, first + len(keys))), (
            f"{what}: call {i + 1} of your flash_attention reads positions {positions[:8]}"
            f"{' ...' if len(keys) > 8 else ''} of request {b}: not one contiguous run. A work "
            "item streams one contiguous chunk of a request's keys, as a thread block does."))
        for t in positions:
            seen[b][t] += 1
        runs.append((b, first, len(keys)))
    for b, counts in enumerate(seen):
        twice = [t for t, c in enumerate(counts) if c > 1]
        never = [t for t, c in enumerate(counts) if c == 0]
        expect(not twice and not never, (
            f"{what}: request {b}'s chunks " + (f"read token(s) {twice[:6]} more than once"
                                                if twice else f"miss token(s) {never[:6]}")
            + ": every token belongs to exactly one chunk."))
    return runs


def _balance_case(fn: Callable, kv_lens: list[int], page_size: int, budget: int) -> str:
    q, pool, kv_lens, tables = _paged_batch(kv_lens, page_size, 4, 2, 8)
    keys = [pool[torch.tensor(t)][:, 0].flatten(0, 1)[:n] for n, t in zip(kv_lens, tables,
                                                                            strict=True)]
    with _WorkItems(fn, keys) as items:
        _paged_right(fn, q, pool, kv_lens, tables, budget)
    what = (f"kv_lens {kv_lens} in pages of {page_size}, num_work_items={budget}")
    runs = _runs(items.calls, kv_lens, what)
    expect(len(runs) <= budget, (
        f"{what}: your flash_attention ran {len(runs)} times, over the budget of {budget} work "
        "items (the blocks a GPU runs at once). Cut fewer, longer chunks."))
    best, longest = longest_item(kv_lens, budget), max(n for _, _, n in runs)
    if longest > best:
        message = (f"{what}: your longest work item has {longest} tokens, and the step waits for "
                   f"it; the batch can be cut into at most {budget} chunks none longer than "
                   f"{best} tokens. Choose the chunks from all the requests' lengths together.")
        if all(first % page_size == 0 for _, first, _ in runs) and page_size > 1:
            message += (" Your chunks all start on a page boundary: a chunk may start and end "
                        "inside a page.")
        raise CheckFailed(message)
    return f"{len(runs)} items, longest {longest}"


@exercise("ch09.paged_split_kv_decode", "work items: at most num_work_items calls of your "
          "flash_attention, each one contiguous run of one request's tokens, the longest as "
          "short as the budget allows (chunks cut inside pages)")
def _paged_balance(fn: Callable) -> str:
    cases = [([40, 7, 100], 16, 8), ([13, 2, 9, 30], 4, 7), ([5, 1, 9, 14], 3, 6),
             ([6, 11], 4, 20), ([1, 1, 25], 5, 4)]
    lens = _random_lens(3, 4)
    cases.append((lens, 3, _budget(lens)))
    return "; ".join(_balance_case(fn, *case) for case in cases)


@exercise("ch09.paged_split_kv_decode", "merges the chunks' states with your merge_states")
def _paged_merges(fn: Callable) -> str:
    kv_lens = [int(torch.randint(7, 20, ())) for _ in range(3)]  # 4 to 10 pages of 2
    q, pool, kv_lens, tables = _paged_batch(kv_lens, 2, 4, 2, 8)
    budget = 2 * len(kv_lens) + 1
    chunks = sum(-(-n // longest_item(kv_lens, budget)) for n in kv_lens)
    with spy_calls(fn) as calls:
        _paged_call(fn, q, pool, kv_lens, tables, budget)
    merges = calls.get("merge_states", 0)
    need = chunks - len(kv_lens)
    expect(merges >= need, (
        f"kv_lens {kv_lens}, num_work_items={budget}: a balanced cut has at least {chunks} "
        f"chunks for {len(kv_lens)} requests, so at least {need} merges, and your merge_states "
        f"was called {merges} times. Compute each chunk's state on its own and combine them "
        "with the merge_states you wrote in exercise 3 (a GPU runs the chunks in parallel, so "
        f"no chunk can see another's running max). Calls seen: {dict(calls) or 'none'}."))
    return f"{chunks} chunks, {merges} merges"
