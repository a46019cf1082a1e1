"""The float64 attention (SDPA, with the natural-log lse) that the checks of flash_attention,
merge_states and paged_split_kv_decode compare with, and the random q, k, v they draw.

Shapes: T queries, S keys, Hq query heads, Hkv KV heads (G = Hq / Hkv), D head dim.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _attention64(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
    scale: float | None = None, heads: str = "h // G",
) -> tuple[torch.Tensor, torch.Tensor]:
    """SDPA in float64 and the natural-log lse: (o [T, Hq, D], lse [T, Hq]).
    heads="h % Hkv" reads the KV heads in the wrong order (a classic GQA slip)."""
    T, Hq, D = q.shape
    Hkv = k.shape[1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    if heads == "h // G":
        kh, vh = (t.double().repeat_interleave(Hq // Hkv, dim=1) for t in (k, v))
    else:
        kh, vh = (t.double().repeat(1, Hq // Hkv, 1) for t in (k, v))
    qh, kh, vh = q.double().transpose(0, 1), kh.transpose(0, 1), vh.transpose(0, 1)
    o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, scale=scale)  # [Hq, T, D]
    scores = qh @ kh.transpose(1, 2) * scale  # [Hq, T, S]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return o.transpose(0, 1), torch.logsumexp(scores, dim=-1).transpose(0, 1)


def _qkv(
    T: int, S: int, Hq: int, Hkv: int, D: int, scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random q [T, Hq, D] (times scale), k and v [S, Hkv, D]."""
    return torch.randn(T, Hq, D) * scale, torch.randn(S, Hkv, D), torch.randn(S, Hkv, D)
