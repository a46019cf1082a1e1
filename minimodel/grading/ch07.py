"""Checks of chapter 07 (prefill, decode and the KV cache): kv_bytes_per_token, paged_metadata,
slot_mapping, cached_attention, and the capstone my_cached_decode.

Shapes: B requests, S page size, P pages listed in kv_indices, N new tokens in a step, Q new
tokens of one request, K its cached tokens (the new ones included), Hq query heads, Hkv KV
heads, D head dim, L layers.

Expected values come from the package: Qwen3Config.kv_bytes_per_token, the engine's
build_metadata (minimodel.engine.attention) and minimodel.ops.softmax_attention with the
reference's repeat_kv, in float64 where precision matters; the capstone's logits from the
reference model's full recompute.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from minimodel.checkpoints import SHAPES, random_state_dict_numpy
from minimodel.config import Qwen3Config
from minimodel.engine.attention import build_metadata
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.learner import spy_calls
from minimodel.grading.oracles import bottom_right
from minimodel.hub import resolve_model
from minimodel.ops import softmax_attention
from minimodel.reference.model import Qwen3ForCausalLM as ReferenceQwen3
from minimodel.reference.model import repeat_kv
from minimodel.weights import iter_checkpoint

# --- kv_bytes_per_token ----------------------------------------------------------------------


def _kv_bytes_expected(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    cfg = Qwen3Config(
        num_hidden_layers=num_layers, num_attention_heads=num_kv_heads,
        num_key_value_heads=num_kv_heads, head_dim=head_dim,
    )
    dtype = {1: torch.float8_e4m3fn, 2: torch.bfloat16, 4: torch.float32, 8: torch.float64}
    return cfg.kv_bytes_per_token(dtype[dtype_bytes])


def _kv_bytes_hint(got: float, args: tuple[int, int, int, int]) -> str:
    """Name the classic mistake that gives `got`; '' when none or several fit."""
    L, H, D, b = args
    mistakes = (
        (L * H * D * b, " That is half: both K and V are cached, so count 2 vectors per layer "
         "and KV head."),
        (2 * L * H * D * b * 8, " That is 8 times too much: dtype_bytes is already in bytes, "
         "not bits."),
        (4 * L * H * D * b, " That is twice too much: the factor is 2 (one K and one V), "
         "counted once."),
        (2 * H * D * b, " That is one layer's worth: every one of the L layers keeps its own "
         "K and V."),
        (2 * L * H * D, " That counts numbers, not bytes: each number takes dtype_bytes bytes."),
        (2 * L * H * D * D * b, " head_dim counts once: a K vector of one head has D numbers."),
    )
    hints = [hint for value, hint in mistakes if math.isclose(got, value)]
    return hints[0] if len(hints) == 1 else ""


def _kv_bytes_problem(
    fn: Callable, args: tuple[int, int, int, int], what: str
) -> tuple[str, str] | None:
    """(what is wrong with fn(*args), a hint naming the mistake or ''); None if it is right."""
    got = fn(*args)
    want = _kv_bytes_expected(*args)
    if not isinstance(got, numbers.Real) or isinstance(got, bool):
        return f"{what} returned a {type(got).__name__}; return a number of bytes (int)", ""
    if got != want:
        return (f"{what} returned {got}, expected 2·L·Hkv·D·dtype_bytes = {want}.",
                _kv_bytes_hint(float(got), args))
    return None


def _kv_bytes_cases(fn: Callable, cases: list[tuple[tuple[int, int, int, int], str]]) -> None:
    """Fail on the first wrong case, preferring one whose mistake can be named."""
    problems = [p for args, what in cases if (p := _kv_bytes_problem(fn, args, what))]
    if problems:
        message, hint = max(problems, key=lambda p: bool(p[1]))  # the first with a hint
        raise CheckFailed(message + hint)


@exercise("ch07.kv_bytes_per_token", "equals 2·L·Hkv·D·dtype_bytes on 12 random configs")
def _kv_random(fn: Callable) -> None:
    cases = []
    for _ in range(12):
        args = (
            int(torch.randint(2, 81, ())), int(torch.randint(1, 17, ())),
            [64, 80, 96, 128, 256][int(torch.randint(0, 5, ()))],
            [1, 2, 4][int(torch.randint(0, 3, ()))],
        )
        cases.append((args, f"kv_bytes_per_token{args}"))
    _kv_bytes_cases(fn, cases)


@exercise("ch07.kv_bytes_per_token", "matches Qwen3Config.kv_bytes_per_token for Qwen3 0.6B-8B")
def _kv_published(fn: Callable) -> str:
    cases = []
    for name, cfg in SHAPES.items():
        for dtype in (torch.bfloat16, torch.float32):
            args = (cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim, dtype.itemsize)
            cases.append((args, f"{name} in {dtype}: kv_bytes_per_token{args}"))
    _kv_bytes_cases(fn, cases)
    cfg = SHAPES["qwen3-8b"]
    return f"Qwen3-8B in bfloat16: {cfg.kv_bytes_per_token(torch.bfloat16) // 1024} KiB per token"


@exercise("ch07.kv_bytes_per_token", "returns a Python int (bytes are whole numbers)")
def _kv_int(fn: Callable) -> None:
    for args in ((28, 8, 128, 2), (4, 2, 32, 4), (1, 1, 2, 1)):
        got = fn(*args)
        expect(
            isinstance(got, numbers.Integral) and not isinstance(got, bool),
            f"kv_bytes_per_token{args} returned {got!r} of type {type(got).__name__}; a count "
            "of bytes is a Python int (a division or a float factor makes a float, and a "
            "tensor is not an int)",
        )


# --- shared: random paged batches -----------------------------------------------------------

_PAGE_SIZES = (1, 3, 16)


def _random_batch(page_size: int, extra_pages: bool) -> tuple[list[int], list[list[int]]]:
    """A random batch: kv_lens (>= 1, some exact multiples of page_size) and, for each request,
    distinct page ids from a shuffled pool: the pages it needs, plus 0-2 more when extra_pages."""
    B = int(torch.randint(1, 6, ()))
    kv_lens = []
    for _ in range(B):
        n = int(torch.randint(1, 4 * page_size + 6, ()))
        if torch.rand(()) < 0.3:  # a full last page
            n = page_size * int(torch.randint(1, 4, ()))
        kv_lens.append(n)
    owned = [-(-n // page_size) + (int(torch.randint(0, 3, ())) if extra_pages else 0)
             for n in kv_lens]
    pool = torch.randperm(sum(owned) + 7).tolist()
    pages, start = [], 0
    for n in owned:
        pages.append(pool[start : start + n])
        start += n
    return kv_lens, pages


def _batches(extra_pages: bool, per_size: int = 6) -> list[tuple[list[int], list[list[int]], int]]:
    out = []
    for S in _PAGE_SIZES:
        out += [(*_random_batch(S, extra_pages), S) for _ in range(per_size)]
    return out


def _copy_pages(pages: list[list[int]]) -> list[list[int]]:
    return [list(p) for p in pages]


# --- paged_metadata ----------------------------------------------------------------------------


def _expected_metadata(
    kv_lens: list[int], pages: list[list[int]], page_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The engine's own builder; q_lens do not change the kv side, so the batch is a prefill."""
    md = build_metadata(_copy_pages(pages), kv_lens, kv_lens, page_size)
    return md.kv_indptr, md.kv_indices, md.kv_last_page_len


def _call_metadata(
    fn: Callable, kv_lens: list[int], pages: list[list[int]], page_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """Run the learner's function; check it returns three 1-D tensors and left its input alone."""
    what = f"paged_metadata(kv_lens={kv_lens}, pages={pages}, page_size={page_size})"
    before = _copy_pages(pages)
    out = fn(kv_lens, pages, page_size)
    expect(pages == before, f"{what} changed its `pages` argument; leave the page tables as "
                            "they are (they belong to the requests)")
    expect(isinstance(out, (tuple, list)) and len(out) == 3,
           f"{what} should return a tuple (kv_indptr, kv_indices, kv_last_page_len), "
           f"got {type(out).__name__}")
    names = ("kv_indptr", "kv_indices", "kv_last_page_len")
    for name, t in zip(names, out, strict=True):
        expect(isinstance(t, torch.Tensor) and t.dim() == 1,
               f"{what}: {name} should be a 1-D torch.Tensor, got "
               f"{type(t).__name__}{list(t.shape) if isinstance(t, torch.Tensor) else ''}")
    return out[0], out[1], out[2], what


def _counts(indptr: torch.Tensor) -> list[int]:
    return (indptr[1:] - indptr[:-1]).tolist()


@exercise("ch07.paged_metadata", "returns int32 tensors of shapes [B+1], [P], [B]")
def _md_types(fn: Callable) -> None:
    for kv_lens, pages, S in _batches(extra_pages=False, per_size=2):
        indptr, indices, last, what = _call_metadata(fn, kv_lens, pages, S)
        B, P = len(kv_lens), sum(-(-n // S) for n in kv_lens)
        expect_shape(indptr, (B + 1,), f"{what}: kv_indptr (a 0, then one end per request)")
        expect_shape(indices, (P,), f"{what}: kv_indices (every page the batch reads)")
        expect_shape(last, (B,), f"{what}: kv_last_page_len (one per request)")
        for name, t in (("kv_indptr", indptr), ("kv_indices", indices),
                        ("kv_last_page_len", last)):
            expect(t.dtype == torch.int32,
                   f"{what}: {name} has dtype {t.dtype}, expected torch.int32: FlashInfer's "
                   "kernels take int32 index tensors")


@exercise("ch07.paged_metadata", "kv_indptr is 0, then the running total of pages per request")
def _md_indptr(fn: Callable) -> None:
    for kv_lens, pages, S in _batches(extra_pages=False):
        indptr, _, _, what = _call_metadata(fn, kv_lens, pages, S)
        want, _, _ = _expected_metadata(kv_lens, pages, S)
        expect_shape(indptr, tuple(want.shape), f"{what}: kv_indptr")
        if torch.equal(indptr.long(), want.long()):
            continue
        need = _counts(want)
        hint = ""
        if int(indptr[0]) != 0:
            hint = " It should start at 0: request i's pages are kv_indices[indptr[i]:indptr[i+1]]."
        elif indptr[1:].tolist() == need:
            hint = (" It holds each request's page count; kv_indptr is cumulative: entry i+1 "
                    "counts the pages of requests 0..i, so that request i's pages are "
                    "kv_indices[kv_indptr[i]:kv_indptr[i+1]].")
        elif _counts(indptr) == [n // S for n in kv_lens]:
            hint = (" It counts len // page_size pages, which leaves out a partly filled last "
                    "page; that page holds tokens too.")
        raise CheckFailed(f"{what}: kv_indptr is {indptr.tolist()}, expected {want.tolist()} "
                          f"(requests need {need} pages).{hint}")


@exercise("ch07.paged_metadata", "kv_indices lists each request's pages in order, and only "
          "the ceil(len / page_size) it needs")
def _md_indices(fn: Callable) -> None:
    for extra in (False, True):
        for kv_lens, pages, S in _batches(extra_pages=extra):
            _, indices, _, what = _call_metadata(fn, kv_lens, pages, S)
            _, want, _ = _expected_metadata(kv_lens, pages, S)
            if indices.shape == want.shape and torch.equal(indices.long(), want.long()):
                continue
            hint = ""
            if indices.numel() == sum(len(p) for p in pages) != want.numel():
                hint = (" It lists every page a request owns; a request may own more pages than "
                        "its tokens fill (reserved for later), and the kernels must read only "
                        "the first ceil(len / page_size) of them.")
            elif sorted(indices.tolist()) == sorted(want.tolist()):
                hint = " The pages are right but out of order: request by request, page by page."
            raise CheckFailed(f"{what}: kv_indices is {indices.tolist()}, expected "
                              f"{want.tolist()}.{hint}")


@exercise("ch07.paged_metadata", "kv_last_page_len is in 1..page_size (a full page counts "
          "page_size, not 0)")
def _md_last(fn: Callable) -> None:
    for kv_lens, pages, S in _batches(extra_pages=True):
        _, _, last, what = _call_metadata(fn, kv_lens, pages, S)
        _, _, want = _expected_metadata(kv_lens, pages, S)
        expect_shape(last, tuple(want.shape), f"{what}: kv_last_page_len")
        if torch.equal(last.long(), want.long()):
            continue
        lens = torch.tensor(kv_lens)
        hint = ""
        if torch.equal(last.long(), lens % S):
            hint = (" It is len % page_size, which is 0 when the last page is full; a full "
                    "last page holds page_size tokens (the result must be in 1..page_size).")
        elif bool((last.long() > S).any()):
            hint = " A page holds at most page_size tokens."
        raise CheckFailed(f"{what}: kv_last_page_len is {last.tolist()}, expected "
                          f"{want.tolist()}.{hint}")


@exercise("ch07.paged_metadata", "equals the engine's build_metadata on 36 random batches, "
          "page sizes 1, 3, 16")
def _md_engine(fn: Callable) -> str:
    batches = _batches(extra_pages=True, per_size=12)
    for kv_lens, pages, S in batches:
        got = _call_metadata(fn, kv_lens, pages, S)
        want = _expected_metadata(kv_lens, pages, S)
        names = ("kv_indptr", "kv_indices", "kv_last_page_len")
        for name, g, w in zip(names, got[:3], want, strict=True):
            expect(g.shape == w.shape and torch.equal(g.long(), w.long()),
                   f"{got[3]}: {name} is {g.tolist()}, the engine builds {w.tolist()}")
    return f"{len(batches)} batches"


# --- slot_mapping ------------------------------------------------------------------------------


def _expected_slots(
    kv_lens: list[int], q_lens: list[int], pages: list[list[int]], page_size: int
) -> torch.Tensor:
    return build_metadata(_copy_pages(pages), kv_lens, q_lens, page_size).slot_mapping


def _step_batches(kind: str, per_size: int = 5):
    """(kv_lens, q_lens, pages, S): kind 'prefill' (q = len), 'decode' (q = 1) or 'mixed'."""
    out = []
    for kv_lens, pages, S in _batches(extra_pages=True, per_size=per_size):
        if kind == "prefill":
            q_lens = list(kv_lens)
        elif kind == "decode":
            q_lens = [1] * len(kv_lens)
        else:
            q_lens = [int(torch.randint(1, n + 1, ())) for n in kv_lens]
        out.append((kv_lens, q_lens, pages, S))
    return out


def _call_slots(fn: Callable, kv_lens, q_lens, pages, S) -> tuple[torch.Tensor, str]:
    what = f"slot_mapping(kv_lens={kv_lens}, q_lens={q_lens}, pages={pages}, page_size={S})"
    before = _copy_pages(pages)
    out = fn(kv_lens, q_lens, pages, S)
    expect(pages == before, f"{what} changed its `pages` argument; leave the page tables alone")
    expect_shape(out, (sum(q_lens),), f"{what} (one slot per new token, N = sum(q_lens))")
    return out, what


def _slots_hint(got: torch.Tensor, kv_lens, q_lens, pages, S) -> str:
    """Name the classic slot mistake that `got` reproduces, or ''."""
    positions = [p for n, q in zip(kv_lens, q_lens, strict=True) for p in range(n - q, n)]
    from_zero = [p for q in q_lens for p in range(q)]
    owner = [i for i, q in enumerate(q_lens) for _ in range(q)]

    def slots(pos: list[int], page_of, offset_of) -> list[int]:
        return [page_of(i, p) * S + offset_of(p) for i, p in zip(owner, pos, strict=True)]

    got_list = got.tolist()
    if got_list == positions:
        return (" These are the token positions, not slots: a slot is a place in the pool, "
                "found through the request's page table (which of its pages holds the "
                "position, and where in that page).")
    if got_list == slots(from_zero, lambda i, p: pages[i][p // S], lambda p: p % S):
        return (" The new tokens were placed from position 0; they are the last q_len tokens "
                "of the sequence, positions seq_len - q_len .. seq_len - 1.")
    if got_list == [pages[i][p // S] + p % S for i, p in zip(owner, positions, strict=True)]:
        return (" The page id was added to the offset as if a page held one slot: the pool "
                "counts slots, and each page holds page_size of them.")
    return ""


@exercise("ch07.slot_mapping", "returns Long [N], N = sum(q_lens)")
def _slots_type(fn: Callable) -> None:
    for kv_lens, q_lens, pages, S in _step_batches("mixed", per_size=2):
        out, what = _call_slots(fn, kv_lens, q_lens, pages, S)
        expect(out.dtype == torch.int64,
               f"{what} has dtype {out.dtype}, expected torch.long: slots index the pool's "
               "rows")


def _compare_slots(fn: Callable, kind: str) -> None:
    for kv_lens, q_lens, pages, S in _step_batches(kind):
        got, what = _call_slots(fn, kv_lens, q_lens, pages, S)
        want = _expected_slots(kv_lens, q_lens, pages, S)
        if torch.equal(got.long(), want):
            continue
        raise CheckFailed(f"{what} is {got.tolist()}, expected {want.tolist()}."
                          + _slots_hint(got, kv_lens, q_lens, pages, S))


@exercise("ch07.slot_mapping", "prefill: every token goes to its slot through its request's "
          "page table")
def _slots_prefill(fn: Callable) -> None:
    _compare_slots(fn, "prefill")


@exercise("ch07.slot_mapping", "decode: the one new token is at position seq_len - 1")
def _slots_decode(fn: Callable) -> None:
    _compare_slots(fn, "decode")


@exercise("ch07.slot_mapping", "equals the engine's slot_mapping on mixed batches (chunks of "
          "any size), page sizes 1, 3, 16")
def _slots_mixed(fn: Callable) -> None:
    _compare_slots(fn, "mixed")


# --- cached_attention ----------------------------------------------------------------------------


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


def _cached_hint(got: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> str:
    """Name the classic mistake that `got` reproduces, or ''."""
    Q, K, D = q.shape[0], k.shape[0], q.shape[-1]
    mask = bottom_right(Q, K)
    if got.isnan().any():
        return (" It contains NaN: some new token had every key masked. The mask is bottom-right: "
                "token j sees keys 0..K-Q+j, so no row is empty.")

    def same(t: torch.Tensor) -> bool:
        return torch.allclose(got.double(), t, atol=1e-3, rtol=1e-3)

    top_left = torch.ones(Q, K, dtype=torch.bool).tril()
    candidates = [
        (top_left, D**-0.5, False,
         " It matches a top-left causal mask (tril of a [Q, K] matrix, or SDPA's is_causal=True "
         "with Q < K): new token j is the (K-Q+j)-th token, so it sees keys 0..K-Q+j."),
        (None, D**-0.5, False, " It matches attention with no mask: new token j must not see "
         "the keys after its own position K-Q+j."),
        (mask, 1.0, False, " It matches unscaled scores: without the 1/sqrt(D) scale the "
         "softmax is far too sharp."),
        (mask, 1.0 / D, False, " It matches scores scaled by 1/D; the scale is 1/sqrt(D)."),
        (mask, D**-0.5, True, " It matches K/V heads repeated in the order 0,1,0,1: query head h "
         "reads KV head h // (Hq // Hkv), so neighbouring query heads share a KV head."),
    ]
    for m, scale, tiled, hint in candidates:
        if (m is None or (m.any(-1)).all()) and same(_attend(q, k, v, m, scale, tiled)):
            return hint
    return ""


def _qkv(Q: int, K: int, Hq: int, Hkv: int, D: int, dtype: torch.dtype = torch.float32):
    return (torch.randn(Q, Hq, D).to(dtype), torch.randn(K, Hkv, D).to(dtype),
            torch.randn(K, Hkv, D).to(dtype))


def _compare_cached(
    fn: Callable, Q: int, K: int, Hq: int, Hkv: int, D: int,
    dtype: torch.dtype = torch.float32, tol: float = 1e-4,
) -> None:
    q, k, v = _qkv(Q, K, Hq, Hkv, D, dtype)
    what = (f"cached_attention(q [{Q}, {Hq}, {D}], k and v [{K}, {Hkv}, {D}]"
            + (f", {dtype})" if dtype != torch.float32 else ")"))
    inputs = (q.clone(), k.clone(), v.clone())
    got = fn(*inputs)
    expect_shape(got, (Q, Hq, D), what)
    expect(all(torch.equal(a, b) for a, b in zip(inputs, (q, k, v), strict=True)),
           f"{what} changed its inputs; return a new tensor")
    expect(got.dtype == dtype, f"{what} returned {got.dtype}; return q's dtype {dtype}")
    want = _attend(q, k, v, bottom_right(Q, K), D**-0.5)
    if not torch.allclose(got.double(), want, atol=tol, rtol=tol):
        worst = float((got.double() - want).abs().nan_to_num(float("inf")).max())
        raise CheckFailed(f"{what} is off by up to {worst:.3g} from bottom-right causal "
                          "attention." + _cached_hint(got, q, k, v))


@exercise("ch07.cached_attention", "returns [Q, Hq, D] in q's dtype for 6 shapes")
def _cached_shape(fn: Callable) -> None:
    for Q, K, Hq, Hkv, D in ((1, 1, 2, 1, 4), (3, 3, 4, 2, 8), (2, 9, 6, 3, 16),
                             (1, 17, 8, 8, 32), (5, 12, 4, 1, 8), (4, 4, 2, 2, 64)):
        q, k, v = _qkv(Q, K, Hq, Hkv, D)
        what = f"cached_attention(q [{Q}, {Hq}, {D}], k and v [{K}, {Hkv}, {D}])"
        got = fn(q, k, v)
        expect_shape(got, (Q, Hq, D), what)
        expect(got.dtype == q.dtype, f"{what} returned {got.dtype}; return q's dtype")


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


# --- my_cached_decode (the capstone) --------------------------------------------------------
#
# The learner's function gets a checkpoint's weights by Hugging Face name and its config, and
# greedily decodes `steps` tokens after a prompt: logits[:, 0] come from the prefill (the prompt's
# last row), logits[:, i] from the decode step that feeds the token picked at step i-1. The
# reference is the naive model run once over the prompt and the picked tokens (teacher forcing
# on the learner's own choices, so a near-tie never decides the verdict).

_TOL = 1e-4
# A small config whose LM head is cheap next to its layers (so the matmul count shows whether
# tokens are recomputed), with an untied head, Hq * D != C and 4 query heads per KV head.
_SMALL = Qwen3Config(
    vocab_size=256, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
    num_attention_heads=8, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
    rope_theta=10_000.0, tie_word_embeddings=False, torch_dtype="float32",
)


@functools.cache
def _model(name: str) -> tuple[Qwen3Config, dict[str, torch.Tensor], ReferenceQwen3]:
    """(config, weights by Hugging Face name in float32, the reference model) of bard or the
    small random config."""
    if name == "bard":
        path = resolve_model("bard")
        weights = {n: t.float() for n, t in iter_checkpoint(path)}
        return Qwen3Config.from_pretrained(path), weights, ReferenceQwen3.from_pretrained(path)
    weights = random_state_dict_numpy(_SMALL)
    model = ReferenceQwen3(_SMALL)
    model.load_state_dict(weights)
    return _SMALL, weights, model.eval()


def _run_decode(fn: Callable, name: str, ids: torch.Tensor, steps: int) -> torch.Tensor:
    """The learner's logits [B, steps, V], after checking the type, shape and untouched inputs."""
    cfg, weights, _ = _model(name)
    B, T = ids.shape
    what = (f"my_cached_decode(weights, cfg, ids [{B}, {T}], steps={steps}) on "
            + ("bard" if name == "bard" else "the random config"))
    given = dict(weights)
    got = fn(given, cfg, ids.clone(), steps)
    expect_shape(got, (B, steps, cfg.vocab_size),
                 f"{what} (the logits that picked each of the {steps} new tokens)")
    expect(got.dtype.is_floating_point, f"{what} returned {got.dtype} logits; return floats")
    expect(given.keys() == weights.keys() and all(given[k] is weights[k] for k in weights),
           f"{what} changed the weights dict; read it, don't modify it")
    return got.detach()


def _decode_problem(fn: Callable, name: str, ids: torch.Tensor, steps: int) -> str | None:
    """What is wrong with the learner's cached decode on these prompts, or None."""
    _, _, ref = _model(name)
    B, T = ids.shape
    got = _run_decode(fn, name, ids, steps).double()
    picked = got.argmax(-1)  # [B, steps]: the tokens the learner's loop chose
    want = ref(torch.cat([ids, picked[:, :-1]], dim=1))[:, T - 1:].double()  # [B, steps, V]
    ok = torch.isclose(got, want, atol=_TOL, rtol=1e-5).flatten(2).all(-1).all(0)  # [steps]
    if bool(ok.all()):
        return None
    err = (got - want).abs().nan_to_num(float("inf")).amax(dim=(0, 2))  # [steps]
    errs = ", ".join(f"{e:.2g}" for e in err.tolist())
    where = "bard" if name == "bard" else "the random config"
    what = (f"On {where}, prompts [{B}, {T}], {steps} steps: max |yours - full recompute| per "
            f"step = [{errs}] (step 0 is the prefill)")
    if not bool(ok[0]):
        return (f"{what}. The prefill is already off, before any cached key is reused. Check "
                "that the pieces it calls pass their own checks, the weights each layer reads, "
                "the final norm and the LM head, and the cache: in the prefill every layer "
                "writes the prompt's K/V at positions 0..T-1 and reads exactly those.")
    i = int((~ok).nonzero()[0])
    alone = ref(picked[:, i - 1 : i])[:, 0].double()  # the fed token with no context, position 0
    if torch.allclose(got[:, i], alone, atol=1e-3, rtol=1e-3):
        return (f"{what}. Decode step {i} gives the logits of its token alone, as if nothing "
                "were cached: the step did not read the K/V of the earlier tokens (or they "
                "were never written).")
    return (f"{what}. The prefill matches, decode step {i} does not. The token fed at step "
            f"{i} continues its row at position {T + i - 1}: its RoPE position, the place its "
            f"K and V are written in the cache, and the keys it reads (all {T + i} so far, "
            "its own included) follow on from what is already cached, and it must be the token "
            "the previous step picked.")


def _prompts(name: str, B: int, T: int) -> torch.Tensor:
    return torch.randint(0, _model(name)[0].vocab_size, (B, T))


@exercise("ch07.my_cached_decode", "bard, one prompt at a time: the logits of every step equal "
          "the full recompute within 1e-4 (3 prompts, 6 steps)")
def _decode_single(fn: Callable) -> None:
    for T in (1, int(torch.randint(2, 9, ())), int(torch.randint(9, 25, ()))):
        problem = _decode_problem(fn, "bard", _prompts("bard", 1, T), 6)
        if problem:
            raise CheckFailed(problem)


@exercise("ch07.my_cached_decode", "bard, a batch of 3 prompts of one length decoded together")
def _decode_batch(fn: Callable) -> None:
    problem = _decode_problem(fn, "bard", _prompts("bard", 3, int(torch.randint(4, 17, ()))), 5)
    if problem:
        raise CheckFailed(problem)


@exercise("ch07.my_cached_decode", "another config (untied LM head, Hq·D ≠ C, 4 query heads per "
          "KV head): the same, batches of 1 and 2")
def _decode_small(fn: Callable) -> None:
    for B in (1, 2):
        problem = _decode_problem(fn, "small", _prompts("small", B, int(torch.randint(3, 20, ()))),
                                  7)
        if problem:
            raise CheckFailed(problem)


@exercise("ch07.my_cached_decode", "runs the prompt once and then only the new token per step "
          "(matmul FLOPs counted)")
def _decode_work(fn: Callable) -> str:
    _, _, ref = _model("small")
    T, steps = 24, 8
    ids = _prompts("small", 1, T)
    with FlopCounterMode(display=False) as counted:
        got = _run_decode(fn, "small", ids, steps)
    with FlopCounterMode(display=False) as one_pass:  # every token through the model once
        ref(torch.cat([ids, got.argmax(-1)[:, :-1]], dim=1))
    ratio = counted.get_total_flops() / one_pass.get_total_flops()
    expect(ratio <= 2.0, (
        f"Prompt of {T} tokens, {steps} steps: your loop did {ratio:.1f} times the matmul work "
        "of one pass over the final sequence. A cached decode runs every token through the "
        "model once: the prompt in one prefill, then only the new token of each step, reading "
        "the earlier tokens' K/V from the cache (and only the filled part of it). Recomputing "
        "the whole sequence at every step gives the same logits at many times the cost."))
    return f"{ratio:.1f}x the work of one pass"


# Your own pieces from earlier notebooks (any one name of each group counts).
_PIECES = {
    "RoPE (chapter 02)": ("apply_rope", "rope_qkv"),
    "attention (chapter 03, or cached_attention of this notebook)": ("attention",
                                                                    "cached_attention"),
    "RMSNorm (chapter 04)": ("rms_norm", "fused_add_rms_norm"),
    "SwiGLU (chapter 04)": ("swiglu",),
}


@exercise("ch07.my_cached_decode", "is built from your own RoPE, attention, RMSNorm and SwiGLU")
def _decode_pieces(fn: Callable) -> str:
    # Look through decorators (@torch.no_grad() wraps fn in a function of torch's own module).
    with spy_calls(inspect.unwrap(fn)) as calls:
        _run_decode(fn, "small", _prompts("small", 1, 5), 3)
    missing = [what for what, names in _PIECES.items() if not any(calls[n] for n in names)]
    expect(not missing, (
        f"my_cached_decode never called your own {', '.join(missing)}. Build the model step "
        "from the functions you wrote (load them with learner_module), not from the package's "
        f"model or ops. Calls seen: {dict(calls) or 'none'}."))
    return ", ".join(f"{n} ×{c}" for n, c in sorted(calls.items()))
