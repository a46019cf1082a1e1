"""Checks of how ch09.paged_split_kv_decode cuts the batch into work items: at most
num_work_items calls of the learner's flash_attention, each one contiguous run of one request's
tokens, the longest no longer than `longest_item` (the shortest the budget allows), and the
chunks' states combined with the learner's merge_states.

The calls are traced back to tokens by value (_WorkItems): each key a call reads is found in the
batch as the (request, position) it is.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from minimodel.grading.ch09.paged import (
    _budget,
    _paged_batch,
    _paged_call,
    _paged_right,
    _random_lens,
)
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import Text, join, tr
from minimodel.grading.learner import spy_calls


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
            raise CheckFailed(tr("paged_split_kv_decode should call your flash_attention of "
                                 "exercise 2, once per work item; no flash_attention is defined "
                                 "where it runs."))
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
    expect(bool(calls), tr("{what} made no call of your flash_attention (exercise 2): each work "
                           "item is one call, over one chunk of one request's keys.", what=what))
    runs, seen = [], [[0] * n for n in kv_lens]
    for i, keys in enumerate(calls):
        expect(keys is not None and len(keys) > 0 and None not in keys, tr(
            "{what}: call {call} of your flash_attention got keys that are not tokens of the "
            "batch as the pool holds them (each work item's k is a run of one request's K, "
            "gathered through its pages, unchanged).", what=what, call=i + 1))
        requests = {b for b, _ in keys}
        expect(len(requests) == 1, tr(
            "{what}: call {call} of your flash_attention mixes the keys of requests {requests}; "
            "a work item attends one request's query over that request's keys.", what=what,
            call=i + 1, requests=sorted(requests)))
        b = keys[0][0]
        first, positions = min(t for _, t in keys), sorted(t for _, t in keys)
        expect(positions == list(range(first, first + len(keys))), tr(
            "{what}: call {call} of your flash_attention reads positions {positions}{more} of "
            "request {b}: not one contiguous run. A work item streams one contiguous chunk of a "
            "request's keys, as a thread block does.", what=what, call=i + 1,
            positions=positions[:8], more=" ..." if len(keys) > 8 else "", b=b))
        for t in positions:
            seen[b][t] += 1
        runs.append((b, first, len(keys)))
    for b, counts in enumerate(seen):
        twice = [t for t, c in enumerate(counts) if c > 1]
        never = [t for t, c in enumerate(counts) if c == 0]
        problem = (tr("read token(s) {tokens} more than once", tokens=twice[:6]) if twice
                   else tr("miss token(s) {tokens}", tokens=never[:6]))
        expect(not twice and not never, tr(
            "{what}: request {b}'s chunks {problem}: every token belongs to exactly one chunk.",
            what=what, b=b, problem=problem))
    return runs


def _balance_case(fn: Callable, kv_lens: list[int], page_size: int, budget: int) -> Text:
    q, pool, kv_lens, tables = _paged_batch(kv_lens, page_size, 4, 2, 8)
    keys = [pool[torch.tensor(t)][:, 0].flatten(0, 1)[:n] for n, t in zip(kv_lens, tables,
                                                                            strict=True)]
    with _WorkItems(fn, keys) as items:
        _paged_right(fn, q, pool, kv_lens, tables, budget)
    what = tr("kv_lens {kv_lens} in pages of {page_size}, num_work_items={budget}",
              kv_lens=kv_lens, page_size=page_size, budget=budget)
    runs = _runs(items.calls, kv_lens, what)
    expect(len(runs) <= budget, tr(
        "{what}: your flash_attention ran {runs} times, over the budget of {budget} work items "
        "(the blocks a GPU runs at once). Cut fewer, longer chunks.", what=what, runs=len(runs),
        budget=budget))
    best, longest = longest_item(kv_lens, budget), max(n for _, _, n in runs)
    if longest > best:
        pages = all(first % page_size == 0 for _, first, _ in runs) and page_size > 1
        hint = tr(" Your chunks all start on a page boundary: a chunk may start and end inside "
                  "a page.") if pages else ""
        raise CheckFailed(tr(
            "{what}: your longest work item has {longest} tokens, and the step waits for it; the "
            "batch can be cut into at most {budget} chunks none longer than {best} tokens. "
            "Choose the chunks from all the requests' lengths together.{hint}", what=what,
            longest=longest, budget=budget, best=best, hint=hint))
    return tr("{items} items, longest {longest}", items=len(runs), longest=longest)


@exercise("ch09.paged_split_kv_decode", "work items: at most num_work_items calls of your "
          "flash_attention, each one contiguous run of one request's tokens, the longest as "
          "short as the budget allows (chunks cut inside pages)")
def _paged_balance(fn: Callable) -> str:
    cases = [([40, 7, 100], 16, 8), ([13, 2, 9, 30], 4, 7), ([5, 1, 9, 14], 3, 6),
             ([6, 11], 4, 20), ([1, 1, 25], 5, 4)]
    lens = _random_lens(3, 4)
    cases.append((lens, 3, _budget(lens)))
    return join(tr("; "), [_balance_case(fn, *case) for case in cases])


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
    seen = (tr("Calls seen: {calls}.", calls=dict(calls)) if calls else
            tr("Calls seen: none."))
    expect(merges >= need, tr(
        "kv_lens {kv_lens}, num_work_items={budget}: a balanced cut has at least {chunks} chunks "
        "for {requests} requests, so at least {need} merges, and your merge_states was called "
        "{merges} times. Compute each chunk's state on its own and combine them with the "
        "merge_states you wrote in exercise 3 (a GPU runs the chunks in parallel, so no chunk "
        "can see another's running max). {seen}", kv_lens=kv_lens, budget=budget,
        chunks=chunks, requests=len(kv_lens), need=need, merges=merges, seen=seen))
    return tr("{chunks} chunks, {merges} merges", chunks=chunks, merges=merges)
