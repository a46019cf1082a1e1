"""Merging attention states: two partial results over disjoint key sets give the whole one."""

from __future__ import annotations

import torch


def merge_states(
    o_a: torch.Tensor, lse_a: torch.Tensor, o_b: torch.Tensor, lse_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The state of attending over keys A and B from the states over A and over B.

    o_a, o_b [T, H, D]: outputs (each normalised over its own keys); lse_a, lse_b [T, H]:
    natural-log log-sum-exp of each side's scaled scores. Each side's weight is its share of
    the total exp-sum, exp(lse_side - lse_merged), computed against the larger lse so that no
    exp overflows. An empty side (lse = -inf) has weight 0. -> (o [T, H, D], lse [T, H]).
    """
    work = torch.promote_types(torch.promote_types(o_a.dtype, lse_a.dtype), torch.float32)
    lse_a, lse_b = lse_a.to(work), lse_b.to(work)
    m = torch.maximum(lse_a, lse_b)
    m = m.masked_fill(m == float("-inf"), 0.0)  # both sides empty: weights 0, not nan
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)  # [T, H]; the larger one is 1
    total = w_a + w_b  # >= 1 unless both sides are empty
    o = o_a.to(work) * w_a[..., None] + o_b.to(work) * w_b[..., None]
    o = o / total.clamp_min(torch.finfo(work).tiny)[..., None]
    return o.to(o_a.dtype), m + torch.log(total)
