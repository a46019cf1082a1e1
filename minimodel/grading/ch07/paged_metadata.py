"""Checks of ch07.paged_metadata: kv_indptr, kv_indices and kv_last_page_len of a paged batch,
compared with the engine's build_metadata (minimodel.engine.attention).

Names: B requests, S page size, P pages listed in kv_indices.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from minimodel.engine.attention import build_metadata
from minimodel.grading.ch07.common import _batches, _copy_pages
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import Text, tr

_NAMES = ("kv_indptr", "kv_indices", "kv_last_page_len")  # what paged_metadata returns, in order

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
    expect(pages == before, tr("{what} changed its `pages` argument; leave the page tables as "
                               "they are (they belong to the requests)", what=what))
    expect(isinstance(out, (tuple, list)) and len(out) == 3,
           tr("{what} should return a tuple (kv_indptr, kv_indices, kv_last_page_len), got "
              "{got}", what=what, got=type(out).__name__))
    for name, t in zip(_NAMES, out, strict=True):
        got = f"{type(t).__name__}{list(t.shape) if isinstance(t, torch.Tensor) else ''}"
        expect(isinstance(t, torch.Tensor) and t.dim() == 1,
               tr("{what}: {name} should be a 1-D torch.Tensor, got {got}", what=what, name=name,
                  got=got))
    return out[0], out[1], out[2], what


def _counts(indptr: torch.Tensor) -> list[int]:
    """The pages of each request, from kv_indptr."""
    return (indptr[1:] - indptr[:-1]).tolist()


def _mismatch(what: str, name: str, got: torch.Tensor, want: torch.Tensor,
              hints: list[tuple[bool, Text]], need: Text | str = "") -> CheckFailed:
    """The failure of a wrong `name`: what came back, what was expected (followed by `need`),
    and the first hint whose condition holds."""
    hint = next((text for holds, text in hints if holds), "")
    return CheckFailed(tr("{what}: {name} is {got}, expected {want}{need}.{hint}", what=what,
                          name=name, got=got.tolist(), want=want.tolist(), need=need, hint=hint))


def _differences(
    fn: Callable, name: str, extra_pages: bool
) -> Iterator[tuple[list[int], list[list[int]], int, torch.Tensor, torch.Tensor, str]]:
    """(kv_lens, pages, S, the learner's `name`, the engine's, how the call is written) for each
    random batch where the two differ. kv_indices may differ in length; the others must not."""
    index = _NAMES.index(name)
    for kv_lens, pages, S in _batches(extra_pages=extra_pages):
        out = _call_metadata(fn, kv_lens, pages, S)
        got, want, what = out[index], _expected_metadata(kv_lens, pages, S)[index], out[3]
        if name != "kv_indices":
            expect_shape(got, tuple(want.shape), f"{what}: {name}")
        if not torch.equal(got.long(), want.long()):
            yield kv_lens, pages, S, got, want, what


@exercise("ch07.paged_metadata", "returns int32 tensors of shapes [B+1], [P], [B]")
def _md_types(fn: Callable) -> None:
    for kv_lens, pages, S in _batches(extra_pages=False, per_size=2):
        indptr, indices, last, what = _call_metadata(fn, kv_lens, pages, S)
        B, P = len(kv_lens), sum(-(-n // S) for n in kv_lens)
        expect_shape(indptr, (B + 1,),
                     tr("{what}: kv_indptr (a 0, then one end per request)", what=what))
        expect_shape(indices, (P,), tr("{what}: kv_indices (every page the batch reads)",
                                       what=what))
        expect_shape(last, (B,), tr("{what}: kv_last_page_len (one per request)", what=what))
        for name, t in zip(_NAMES, (indptr, indices, last), strict=True):
            expect(t.dtype == torch.int32,
                   tr("{what}: {name} has dtype {dtype}, expected torch.int32: FlashInfer's "
                      "kernels take int32 index tensors", what=what, name=name, dtype=t.dtype))


@exercise("ch07.paged_metadata", "kv_indptr is 0, then the running total of pages per request")
def _md_indptr(fn: Callable) -> None:
    for kv_lens, _, S, indptr, want, what in _differences(fn, "kv_indptr", extra_pages=False):
        need = _counts(want)
        raise _mismatch(what, "kv_indptr", indptr, want, [
            (int(indptr[0]) != 0,
             tr(" It should start at 0: request i's pages are "
                "kv_indices[indptr[i]:indptr[i+1]].")),
            (indptr[1:].tolist() == need,
             tr(" It holds each request's page count; kv_indptr is cumulative: entry i+1 counts "
                "the pages of requests 0..i, so that request i's pages are "
                "kv_indices[kv_indptr[i]:kv_indptr[i+1]].")),
            (_counts(indptr) == [n // S for n in kv_lens],
             tr(" It counts len // page_size pages, which leaves out a partly filled last page; "
                "that page holds tokens too.")),
        ], need=tr(" (requests need {need} pages)", need=need))


@exercise("ch07.paged_metadata", "kv_indices lists each request's pages in order, and only "
          "the ceil(len / page_size) it needs")
def _md_indices(fn: Callable) -> None:
    for extra in (False, True):
        for _, pages, _, indices, want, what in _differences(fn, "kv_indices", extra):
            raise _mismatch(what, "kv_indices", indices, want, [
                (indices.numel() == sum(len(p) for p in pages) != want.numel(),
                 tr(" It lists every page a request owns; a request may own more pages than its "
                    "tokens fill (reserved for later), and the kernels must read only the first "
                    "ceil(len / page_size) of them.")),
                (sorted(indices.tolist()) == sorted(want.tolist()),
                 tr(" The pages are right but out of order: request by request, page by "
                    "page.")),
            ])


@exercise("ch07.paged_metadata", "kv_last_page_len is in 1..page_size (a full page counts "
          "page_size, not 0)")
def _md_last(fn: Callable) -> None:
    for kv_lens, _, S, last, want, what in _differences(fn, "kv_last_page_len", extra_pages=True):
        raise _mismatch(what, "kv_last_page_len", last, want, [
            (torch.equal(last.long(), torch.tensor(kv_lens) % S),
             tr(" It is len % page_size, which is 0 when the last page is full; a full last "
                "page holds page_size tokens (the result must be in 1..page_size).")),
            (bool((last.long() > S).any()), tr(" A page holds at most page_size tokens.")),
        ])


@exercise("ch07.paged_metadata", "equals the engine's build_metadata on 36 random batches, "
          "page sizes 1, 3, 16")
def _md_engine(fn: Callable) -> str:
    batches = _batches(extra_pages=True, per_size=12)
    for kv_lens, pages, S in batches:
        got = _call_metadata(fn, kv_lens, pages, S)
        want = _expected_metadata(kv_lens, pages, S)
        for name, g, w in zip(_NAMES, got[:3], want, strict=True):
            expect(g.shape == w.shape and torch.equal(g.long(), w.long()),
                   tr("{what}: {name} is {got}, the engine builds {want}", what=got[3],
                      name=name, got=g.tolist(), want=w.tolist()))
    return tr("{n} batches", n=len(batches))
