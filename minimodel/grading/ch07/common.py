"""What several of chapter 07's checks share: random paged batches, each request with its
tokens and its page table.

Names: S page size, kv_lens the tokens of each request, pages its page ids in order.
"""

from __future__ import annotations

import torch

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
    """(kv_lens, pages, S): `per_size` random batches for each page size S of _PAGE_SIZES."""
    out = []
    for S in _PAGE_SIZES:
        out += [(*_random_batch(S, extra_pages), S) for _ in range(per_size)]
    return out


def _copy_pages(pages: list[list[int]]) -> list[list[int]]:
    """A copy of the page tables, to hand out or to compare with later."""
    return [list(p) for p in pages]
