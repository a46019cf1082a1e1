"""Split-KV decode (flash-decoding), and the work partition that a kernel's `plan` computes.

A decode query attends over its whole context. One GPU thread block per (request, KV head)
leaves most of a GPU idle when there are few requests; cutting each context into chunks gives
one block per (request, KV head, chunk), each producing a partial attention state that a second,
small step merges. How many chunks is decided once per step from the page counts alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minimodel.kernels.flash import flash_attention
from minimodel.kernels.merge import merge_states
from minimodel.ops import ceil_div


def split_kv_decode(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries that see every key (decode), the keys cut into chunks of chunk_size.

    Each chunk's state is computed on its own (on a GPU: in parallel), then the states are
    merged. q [T, Hq, D], k and v [S, Hkv, D] -> (o [T, Hq, D], lse [T, Hq]).
    """
    S = k.shape[0]
    parts = [flash_attention(q, k[s : s + chunk_size], v[s : s + chunk_size], causal=False,
                             block_q=q.shape[0], block_k=chunk_size)
             for s in range(0, S, chunk_size)]
    o, lse = parts[0]
    for o_c, lse_c in parts[1:]:
        o, lse = merge_states(o, lse, o_c, lse_c)
    return o, lse


@dataclass
class SplitPlan:
    """One decode step's work partition: work item w attends request request_indices[w] over
    its pages chunk_indices[w] * pages_per_chunk ... + pages_per_chunk; request b's partial
    states are items merge_indptr[b]:merge_indptr[b+1]."""

    pages_per_chunk: int
    request_indices: torch.Tensor  # int32 [W]
    chunk_indices: torch.Tensor  # int32 [W]
    merge_indptr: torch.Tensor  # int32 [B+1]

    @property
    def split(self) -> bool:
        """Whether any request is cut into more than one chunk (then a merge step runs)."""
        return len(self.request_indices) > len(self.merge_indptr) - 1

    @property
    def num_work_items(self) -> int:
        return len(self.request_indices)


def plan_split_kv(
    kv_indptr: torch.Tensor, num_kv_heads: int, max_blocks: int, min_pages_per_chunk: int = 1
) -> SplitPlan:
    """Choose the chunk size for a decode step: the smallest that keeps the thread blocks,
    (chunks over all requests) x num_kv_heads, within max_blocks (what the GPU runs at once).

    kv_indptr [B+1]: the step's page table offsets (chapter 07). When the requests alone fill
    the GPU (B * num_kv_heads >= max_blocks), nothing is split. Chunks are never shorter than
    min_pages_per_chunk pages, so a chunk is worth its merge.
    """
    num_pages = (kv_indptr[1:] - kv_indptr[:-1]).tolist()  # [B], on the host
    longest = max(num_pages)

    def blocks(chunk: int) -> int:
        return num_kv_heads * sum(ceil_div(max(n, 1), chunk) for n in num_pages)

    chunk = longest
    if len(num_pages) * num_kv_heads < max_blocks:
        lo, hi = min(min_pages_per_chunk, longest), longest  # blocks(chunk) falls as chunk grows
        while lo < hi:  # the smallest chunk with blocks(chunk) <= max_blocks
            mid = (lo + hi) // 2
            lo, hi = (mid + 1, hi) if blocks(mid) > max_blocks else (lo, mid)
        chunk = lo
    requests, chunks, merge_indptr = [], [], [0]
    for b, n in enumerate(num_pages):
        count = ceil_div(max(n, 1), chunk)
        requests += [b] * count
        chunks += list(range(count))
        merge_indptr.append(merge_indptr[-1] + count)
    return SplitPlan(chunk, torch.tensor(requests, dtype=torch.int32),
                     torch.tensor(chunks, dtype=torch.int32),
                     torch.tensor(merge_indptr, dtype=torch.int32))
