"""Attention two ways: naive (the whole [T, S] score matrix at once) and tiled (FlashAttention).

Both take the packed layout of one request, q [T, Hq, D] and k, v [S, Hkv, D], use the scale
1/sqrt(D), and return the output [T, Hq, D] and the log-sum-exp [T, Hq] (natural log, float32)
of each row's scaled scores: the *attention state* that lets partial results be merged later.
Causal masking is bottom-right aligned (chapter 07): query t is token S - T + t of the sequence
and sees keys 0 .. S - T + t, so prefill (T = S), chunked prefill and decode (T = 1) are one rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from minimodel.ops import causal_mask

# (k [n, Hkv, D], v [n, Hkv, D], position of the first of the n keys), in key order
KeyTiles = Iterable[tuple[torch.Tensor, torch.Tensor, int]]


def naive_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(D)) v with the full score matrix [Hq, T, S] in memory.

    q [T, Hq, D], k and v [S, Hkv, D] -> (o [T, Hq, D], lse [T, Hq]).
    """
    T, Hq, D = q.shape
    S, Hkv = k.shape[:2]
    kh = k.float().repeat_interleave(Hq // Hkv, dim=1)  # [S, Hq, D]: head h reads h // G
    vh = v.float().repeat_interleave(Hq // Hkv, dim=1)
    scores = torch.einsum("thd,shd->hts", q.float(), kh) / math.sqrt(D)  # [Hq, T, S]
    if causal:
        sees = causal_mask(T, S, q.device)  # [T, S], bottom-right
        scores = scores.masked_fill(~sees, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [Hq, T]
    o = torch.einsum("hts,shd->thd", torch.softmax(scores, dim=-1), vh)  # [T, Hq, D]
    return o.to(q.dtype), lse.transpose(0, 1)


def online_update(
    m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor, scores: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fold one tile into the running state of R query rows (per KV head).

    m [Hkv, R]: the largest score so far; l [Hkv, R]: sum of exp(score - m); acc [Hkv, R, D]:
    sum of exp(score - m) * v. scores [Hkv, R, n] (masked entries -inf), v [Hkv, n, D].
    Whatever was summed under the old max is rescaled by exp(m_old - m_new) <= 1.
    """
    m_new = torch.maximum(m, scores.amax(dim=-1))
    alpha = torch.exp(m - m_new)  # [Hkv, R]; 0 on the first tile (m = -inf)
    p = torch.exp(scores - m_new[..., None])  # [Hkv, R, n]
    return m_new, l * alpha + p.sum(dim=-1), acc * alpha[..., None] + p @ v


def tiled_attention(
    q: torch.Tensor,
    kv_len: int,
    num_kv_heads: int,
    key_tiles: Callable[[], KeyTiles],
    block_q: int,
    causal: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The FlashAttention loop: tiles of block_q queries against the key tiles, in order.

    q [T, Hq, D]: the last T of kv_len tokens; key_tiles() yields the K/V tiles afresh for each
    query tile. The G query heads of a group are G more rows against the same K/V tile. Under a
    causal mask, a tile whose first key comes after every query of the query tile is never read;
    only tiles that cross the diagonal compute a mask. -> (o [T, Hq, D], lse [T, Hq] float32).
    """
    T, Hq, D = q.shape
    Hkv, G = num_kv_heads, Hq // num_kv_heads
    scale = 1.0 / math.sqrt(D)
    o, lse = torch.empty(T, Hq, D, device=q.device), torch.empty(T, Hq, device=q.device)
    for t0 in range(0, T, block_q):
        t1 = min(t0 + block_q, T)
        R = (t1 - t0) * G  # rows of the tile: (query t, head g of the group), per KV head
        rows = q[t0:t1].float().view(t1 - t0, Hkv, G, D).transpose(0, 1).reshape(Hkv, R, D)
        pos = kv_len - T + torch.arange(t0, t1, device=q.device)  # the queries' positions
        row_pos = pos.repeat_interleave(G)  # [R]
        m = torch.full((Hkv, R), float("-inf"), device=q.device)
        l = torch.zeros(Hkv, R, device=q.device)
        acc = torch.zeros(Hkv, R, D, device=q.device)
        for k, v, s0 in key_tiles():
            if causal and s0 > pos[-1]:
                break  # this tile and all later ones are in every query's future: never read
            kh, vh = k.float().transpose(0, 1), v.float().transpose(0, 1)  # [Hkv, n, D]
            scores = rows @ kh.transpose(1, 2) * scale  # [Hkv, R, n]
            if causal and s0 + k.shape[0] - 1 > pos[0]:  # the tile crosses the diagonal
                keys = s0 + torch.arange(k.shape[0], device=q.device)
                scores = scores.masked_fill(keys[None, :] > row_pos[:, None], float("-inf"))
            m, l, acc = online_update(m, l, acc, scores, vh)
        # every query sees key 0, which is in the first tile, so m is finite and l >= 1
        o_t = (acc / l[..., None]).view(Hkv, t1 - t0, G, D).transpose(0, 1)
        o[t0:t1] = o_t.reshape(t1 - t0, Hq, D)
        lse[t0:t1] = (m + torch.log(l)).view(Hkv, t1 - t0, G).transpose(0, 1).reshape(-1, Hq)
    return o.to(q.dtype), lse


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    block_q: int,
    block_k: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiled attention that never holds more than a [block_q * G, block_k] tile of scores.

    q [T, Hq, D], k and v [S, Hkv, D], T <= S when causal -> (o [T, Hq, D], lse [T, Hq]).
    """
    T, S = q.shape[0], k.shape[0]
    if causal and T > S:
        raise ValueError(f"causal attention needs T <= S (the queries are the last T of the "
                         f"S tokens), got T={T}, S={S}.")
    if block_q < 1 or block_k < 1:
        raise ValueError(f"tile sizes must be >= 1, got block_q={block_q}, block_k={block_k}.")

    def key_tiles() -> KeyTiles:
        for s0 in range(0, S, block_k):
            yield k[s0 : s0 + block_k], v[s0 : s0 + block_k], s0

    return tiled_attention(q, S, k.shape[1], key_tiles, block_q, causal)
