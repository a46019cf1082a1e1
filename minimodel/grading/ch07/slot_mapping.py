"""Checks of ch07.slot_mapping: the pool slot of every new token, found through its request's
page table, compared with the engine's build_metadata in prefill, decode and mixed batches.

Names: S page size, N new tokens in a step (sum of q_lens).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.engine.attention import build_metadata
from minimodel.grading.ch07.common import _batches, _copy_pages
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import Text, tr


def _expected_slots(
    kv_lens: list[int], q_lens: list[int], pages: list[list[int]], page_size: int
) -> torch.Tensor:
    """The engine's slot_mapping for this step: Long [N]."""
    return build_metadata(_copy_pages(pages), kv_lens, q_lens, page_size).slot_mapping


def _step_batches(
    kind: str, per_size: int = 5
) -> list[tuple[list[int], list[int], list[list[int]], int]]:
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


def _call_slots(fn: Callable, kv_lens: list[int], q_lens: list[int], pages: list[list[int]],
                S: int) -> tuple[torch.Tensor, str]:
    """The learner's slots and how the call is written; fails unless they are [N] and the page
    tables are left alone."""
    what = f"slot_mapping(kv_lens={kv_lens}, q_lens={q_lens}, pages={pages}, page_size={S})"
    before = _copy_pages(pages)
    out = fn(kv_lens, q_lens, pages, S)
    expect(pages == before, tr("{what} changed its `pages` argument; leave the page tables "
                               "alone", what=what))
    expect_shape(out, (sum(q_lens),),
                 tr("{what} (one slot per new token, N = sum(q_lens))", what=what))
    return out, what


def _slots_hint(got: torch.Tensor, kv_lens: list[int], q_lens: list[int],
                pages: list[list[int]], S: int) -> Text | str:
    """Name the classic slot mistake that `got` reproduces, or ''."""
    positions = [p for n, q in zip(kv_lens, q_lens, strict=True) for p in range(n - q, n)]
    from_zero = [p for q in q_lens for p in range(q)]
    owner = [i for i, q in enumerate(q_lens) for _ in range(q)]

    def slots(pos: list[int], page_of: Callable[[int, int], int],
              offset_of: Callable[[int], int]) -> list[int]:
        return [page_of(i, p) * S + offset_of(p) for i, p in zip(owner, pos, strict=True)]

    got_list = got.tolist()
    if got_list == positions:
        return tr(" These are the token positions, not slots: a slot is a place in the pool, "
                  "found through the request's page table (which of its pages holds the "
                  "position, and where in that page).")
    if got_list == slots(from_zero, lambda i, p: pages[i][p // S], lambda p: p % S):
        return tr(" The new tokens were placed from position 0; they are the last q_len tokens "
                  "of the sequence, positions seq_len - q_len .. seq_len - 1.")
    if got_list == [pages[i][p // S] + p % S for i, p in zip(owner, positions, strict=True)]:
        return tr(" The page id was added to the offset as if a page held one slot: the pool "
                  "counts slots, and each page holds page_size of them.")
    return ""


@exercise("ch07.slot_mapping", "returns Long [N], N = sum(q_lens)")
def _slots_type(fn: Callable) -> None:
    for kv_lens, q_lens, pages, S in _step_batches("mixed", per_size=2):
        out, what = _call_slots(fn, kv_lens, q_lens, pages, S)
        expect(out.dtype == torch.int64,
               tr("{what} has dtype {dtype}, expected torch.long: slots index the pool's rows",
                  what=what, dtype=out.dtype))


def _compare_slots(fn: Callable, kind: str) -> None:
    """The learner's slots must equal the engine's on batches of `kind` (see _step_batches)."""
    for kv_lens, q_lens, pages, S in _step_batches(kind):
        got, what = _call_slots(fn, kv_lens, q_lens, pages, S)
        want = _expected_slots(kv_lens, q_lens, pages, S)
        if torch.equal(got.long(), want):
            continue
        raise CheckFailed(tr("{what} is {got}, expected {want}.{hint}", what=what,
                             got=got.tolist(), want=want.tolist(),
                             hint=_slots_hint(got, kv_lens, q_lens, pages, S)))


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
