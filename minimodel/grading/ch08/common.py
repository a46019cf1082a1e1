"""What several of chapter 08's checks share: seeded random ints, a Scheduler that only the pool
limits, and how counts and long lists are written in messages."""

from __future__ import annotations

import torch

from minimodel.engine.kv_cache import PageAllocator
from minimodel.engine.scheduler import Scheduler
from minimodel.grading.i18n import Text, tr

_NO_LIMIT = 1 << 30  # a max_model_len / budget / max_num_seqs that never binds


def _randint(low: int, high: int) -> int:
    """A random int in [low, high] (inclusive), from torch's seeded generator."""
    return int(torch.randint(low, high + 1, ()))


def _scheduler(
    allocator: PageAllocator, page_size: int, max_num_seqs: int, max_num_batched_tokens: int
) -> Scheduler:
    return Scheduler(allocator, page_size, max_num_seqs=max_num_seqs,
                     max_num_batched_tokens=max_num_batched_tokens, max_model_len=_NO_LIMIT)


def _pages(k: int) -> Text:
    """"1 page", "3 pages", in both languages."""
    return tr("{k} page", k=k) if k == 1 else tr("{k} pages", k=k)


def _tokens(k: int) -> Text:
    """"1 token", "3 tokens", in both languages."""
    return tr("{k} token", k=k) if k == 1 else tr("{k} tokens", k=k)


def _clip(xs: list[int], n: int = 8) -> str:
    return str(xs) if len(xs) <= n else f"[{', '.join(map(str, xs[:n]))}, ...]"
