"""The paged KV cache: one pool of fixed-size pages per layer, and the allocator that lends them.

A request's K/V vectors do not live in one contiguous tensor that must be sized for the longest
possible answer. They live in pages of `page_size` tokens, anywhere in the pool; the request
keeps the list of its pages (its page table). Pages return to the free list when the request
finishes or is preempted, so memory follows the tokens actually generated.

Shapes: P = num_pages, S = page_size, Hkv = num_key_value_heads, D = head_dim.
"""

from __future__ import annotations

from collections import deque

import torch

from minimodel.config import Qwen3Config
from minimodel.ops import ceil_div


class PageAllocator:
    """A free list of page ids: `allocate(n)` lends n pages, `free(pages)` takes them back."""

    def __init__(self, num_pages: int) -> None:
        self.num_pages = num_pages
        self._free: deque[int] = deque(range(num_pages))

    @property
    def num_free(self) -> int:
        """Pages that can be lent right now."""
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        """Lend n pages; the caller checks `num_free` first (running out is a scheduler bug)."""
        assert n <= len(self._free), f"asked for {n} pages, {len(self._free)} free"
        return [self._free.popleft() for _ in range(n)]

    def free(self, pages: list[int]) -> None:
        """Take pages back."""
        self._free.extend(pages)


def pages_needed(num_tokens: int, page_size: int) -> int:
    """Pages that hold num_tokens tokens: ceil(num_tokens / page_size)."""
    return ceil_div(num_tokens, page_size)


class KVCache:
    """K and V of every layer in pages: `pools[layer]` is [P, 2, S, Hkv, D] (NHD layout).

    Index 0 of the second dim holds K, index 1 holds V; this is FlashInfer's NHD paged layout,
    so the same tensor is handed to its kernels as is. A token's place in the pool is its
    *slot*: page * S + offset.
    """

    def __init__(
        self,
        cfg: Qwen3Config,
        num_pages: int,
        page_size: int,
        dtype: torch.dtype,
        device: torch.device | str,
        num_kv_heads: int | None = None,
    ) -> None:
        """num_kv_heads: the heads this pool holds (default: the config's; with tensor
        parallelism, one rank's share)."""
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}.")
        if num_pages < 1:
            raise ValueError(f"num_pages must be >= 1, got {num_pages}.")
        self.num_pages = num_pages
        self.page_size = page_size
        self.num_kv_heads = num_kv_heads or cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        shape = (num_pages, 2, page_size, self.num_kv_heads, cfg.head_dim)
        self.pools = [
            torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_hidden_layers)
        ]

    @property
    def nbytes(self) -> int:
        """Bytes of all pools: 2 * L * Hkv * D * dtype_bytes * S * P."""
        return sum(pool.numel() * pool.element_size() for pool in self.pools)

    @staticmethod
    def num_pages_for_budget(
        cfg: Qwen3Config, page_size: int, dtype: torch.dtype, budget_bytes: int
    ) -> int:
        """The most pages whose pools fit in budget_bytes."""
        return budget_bytes // (cfg.kv_bytes_per_token(dtype) * page_size)

    def keys(self, layer: int) -> torch.Tensor:
        """K of every page of one layer: a [P, S, Hkv, D] view of the pool."""
        return self.pools[layer][:, 0]

    def values(self, layer: int) -> torch.Tensor:
        """V of every page of one layer: a [P, S, Hkv, D] view of the pool."""
        return self.pools[layer][:, 1]

    def rows(self, layer: int) -> torch.Tensor:
        """The pool of one layer as [P * 2 * S, Hkv, D]: one row per stored K or V vector.

        A view, not a copy. Slot s = page * S + offset has its K at row page * 2S + offset and
        its V S rows further (see `k_rows`).
        """
        return self.pools[layer].view(-1, self.num_kv_heads, self.head_dim)

    def k_rows(self, slots: torch.Tensor) -> torch.Tensor:
        """Rows of `rows(layer)` that hold the K of these slots; add page_size for their V."""
        S = self.page_size
        return (slots // S) * (2 * S) + slots % S

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor, k_rows: torch.Tensor) -> None:
        """Write new K/V into the pool. k, v: [N, Hkv, D]; k_rows: Long [N] from `k_rows`."""
        rows = self.rows(layer)
        rows.index_copy_(0, k_rows, k)
        rows.index_copy_(0, k_rows + self.page_size, v)
