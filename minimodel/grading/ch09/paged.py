"""Checks of ch09.paged_split_kv_decode's answer: decode attention of a batch whose K and V lie on
pages scattered over a pool.

Names: B requests, P pages in the pool, page size S (`page_size`). The expected output is the
engine's torch backend (minimodel.engine.attention) on the same pool, and the lse a float64
attention over each request's tokens gathered in order. Every slot no request fills holds large
garbage, so that reading one shows.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from minimodel.config import Qwen3Config
from minimodel.engine.attention import TorchBackend, build_metadata
from minimodel.engine.kv_cache import KVCache
from minimodel.grading.ch09.common import _close, _pair, _unchanged, _worst
from minimodel.grading.ch09.reference import _attention64
from minimodel.grading.core import CheckFailed, exercise, expect_shape
from minimodel.grading.i18n import Text, tr

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


def _budget(kv_lens: list[int]) -> int:
    """A random budget: from one item per request up to one item per token and a few more."""
    return int(torch.randint(len(kv_lens), sum(kv_lens) + 3, ()))


def _paged_call(fn: Callable, q, pool, kv_lens, tables, num_work_items: int):
    S = pool.shape[2]
    indptr, indices, last = _metadata(kv_lens, tables, S)
    what = tr("paged_split_kv_decode(q [{B}, {Hq}, {D}], pool with page_size {S}, kv_lens "
              "{kv_lens}, num_work_items={num_work_items})", B=q.shape[0], Hq=q.shape[1],
              D=q.shape[2], S=S, kv_lens=kv_lens, num_work_items=num_work_items)
    inputs = (q, pool, indptr, indices, last)
    copies = tuple(t.clone() for t in inputs)
    o, lse = _pair(fn(q, pool, indptr, indices, last, num_work_items), what)
    _unchanged(inputs, copies, what)
    expect_shape(o, tuple(q.shape), tr("{what}: o (one output per request and head)",
                                       what=what))
    expect_shape(lse, tuple(q.shape[:2]), tr("{what}: lse", what=what))
    return o, lse, what


def _paged_hint(o, lse, q, pool, kv_lens, tables) -> Text | str:
    """The classic mistake (o, lse) shows (a hint that starts with a space), or ''."""
    if not (bool(o.isfinite().all()) and bool(lse.isfinite().all())):
        return tr(" It holds inf or nan.")
    want_o, want_lse = _expected_decode(q, pool, kv_lens, tables)
    if _close(o, want_o, 1e-4) and _close(lse, want_lse / math.log(2), 1e-4):
        return tr(" The output is right; the lse is in base 2. Return the natural log.")
    S = pool.shape[2]
    full = [-(-n // S) * S for n in kv_lens]
    if any(f != n for f, n in zip(full, kv_lens, strict=True)) and _close(
            o, _expected_decode(q, pool, full, tables)[0], 1e-4):
        return tr(" It matches reading every slot of each request's last page: only "
                  "kv_last_page_len of them hold tokens; the rest are whatever the pool held "
                  "before (here: large garbage).")
    if len(kv_lens) > 1 and not _close(o[:1], want_o[:1], 1e-4) and _close(o[1:], want_o[1:],
                                                                           1e-4):
        return tr(" Only request 0 is wrong.")
    if _close(o[:1], want_o[:1], 1e-4) and not _close(o, want_o, 1e-4):
        return tr(" Request 0 is right and a later one is not: request b's pages are "
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
    raise CheckFailed(tr("{what} is off by up to {worst:.3g} from the engine's torch backend "
                         "(o) and a float64 reference (lse).{hint}", what=what, worst=worst,
                         hint=_paged_hint(o, lse, q, pool, kv_lens, tables)))


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
    return tr("3 page sizes")


@exercise("ch09.paged_split_kv_decode", "reads only each request's pages, and only "
          "kv_last_page_len slots of its last one (the others hold garbage)")
def _paged_garbage(fn: Callable) -> None:
    for S in (4, 5):
        _paged_case(fn, S, 4, 4, 8, 3, lambda lens: [_budget(lens)])


@exercise("ch09.paged_split_kv_decode", "GQA and MQA: query head h reads KV head h // G")
def _paged_gqa(fn: Callable) -> None:
    _paged_case(fn, 3, 6, 3, 8, 2, lambda lens: [_budget(lens)])
    _paged_case(fn, 4, 8, 1, 16, 2, lambda lens: [_budget(lens)])
