"""The tiled attention loop over a paged KV cache, in FlashInfer's page-table format (ch. 07).

kv_pool: one layer's pool [P, 2, S, Hkv, D] (NHD: index 0 holds K, 1 holds V; S page size).
Request i's new tokens are rows qo_indptr[i]:qo_indptr[i+1] of q; its pages are
kv_indices[kv_indptr[i]:kv_indptr[i+1]], the last one holding kv_last_page_len[i] tokens.
"""

from __future__ import annotations

import torch

from minimodel.kernels.flash import KeyTiles, flash_attention, tiled_attention
from minimodel.kernels.merge import merge_states


def page_tiles(
    kv_pool: torch.Tensor, pages: torch.Tensor, kv_len: int, pages_per_tile: int
) -> KeyTiles:
    """One request's K/V, pages_per_tile whole pages at a time, read through its page table.

    pages: Long [ceil(kv_len / S)]. Yields (k [n, Hkv, D], v [n, Hkv, D], first position);
    n = pages_per_tile * S, except in the last tile, which stops at token kv_len.
    """
    S = kv_pool.shape[2]
    for p0 in range(0, len(pages), pages_per_tile):
        kv = kv_pool[pages[p0 : p0 + pages_per_tile]]  # [p, 2, S, Hkv, D]: one gather of pages
        n = min(kv.shape[0] * S, kv_len - p0 * S)  # the last page may be partly filled
        yield kv[:, 0].flatten(0, 1)[:n], kv[:, 1].flatten(0, 1)[:n], p0 * S


def _request(
    kv_indptr: torch.Tensor, kv_indices: torch.Tensor, kv_last_page_len: torch.Tensor, i: int,
    page_size: int,
) -> tuple[torch.Tensor, int]:
    """(request i's pages, its kv_len), read from the metadata arrays alone."""
    pages = kv_indices[int(kv_indptr[i]) : int(kv_indptr[i + 1])].long()
    return pages, (len(pages) - 1) * page_size + int(kv_last_page_len[i])


def paged_attention(
    q: torch.Tensor,
    kv_pool: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_last_page_len: torch.Tensor,
    block_q: int = 16,
    pages_per_tile: int = 1,
    causal: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of each request's new tokens over its cached pages, tile by tile.

    q [N, Hq, D] (packed: prefills, chunks and decodes in any mix) -> (o [N, Hq, D],
    lse [N, Hq]); the same numbers as the engine's torch backend, through the same tiled loop
    as `flash_attention`, with key tiles of pages_per_tile whole pages.
    """
    S, Hkv = kv_pool.shape[2], kv_pool.shape[3]
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:2], device=q.device)
    for i in range(len(qo_indptr) - 1):
        start, end = int(qo_indptr[i]), int(qo_indptr[i + 1])
        pages, kv_len = _request(kv_indptr, kv_indices, kv_last_page_len, i, S)

        def tiles(pages: torch.Tensor = pages, kv_len: int = kv_len) -> KeyTiles:
            return page_tiles(kv_pool, pages, kv_len, pages_per_tile)

        o[start:end], lse[start:end] = tiled_attention(q[start:end], kv_len, Hkv, tiles,
                                                       block_q, causal)
    return o, lse


def paged_split_kv_decode(
    q: torch.Tensor,
    kv_pool: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_last_page_len: torch.Tensor,
    pages_per_chunk: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split-KV decode over pages: one query per request, its pages cut into chunks of
    pages_per_chunk, each chunk's state computed on its own, then merged.

    q [B, Hq, D] -> (o [B, Hq, D], lse [B, Hq]).
    """
    S = kv_pool.shape[2]
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:2], device=q.device)
    for b in range(q.shape[0]):
        pages, kv_len = _request(kv_indptr, kv_indices, kv_last_page_len, b, S)
        state = None
        for k, v, _ in page_tiles(kv_pool, pages, kv_len, pages_per_chunk):  # one work item
            part = flash_attention(q[b : b + 1], k, v, causal=False, block_q=1,
                                   block_k=k.shape[0])
            state = part if state is None else merge_states(*state, *part)
        o[b], lse[b] = state[0][0], state[1][0]
    return o, lse
