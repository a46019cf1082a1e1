"""The online softmax: softmax over the last dim, reading it one block at a time."""

from __future__ import annotations

import torch


def online_softmax(x: torch.Tensor, block: int) -> torch.Tensor:
    """x [..., S] -> softmax(x) [..., S], computed from `block` entries at a time.

    One pass keeps a running max m and a running sum l = sum(exp(x - m)) of the entries seen so
    far; when a block raises the max, the sum so far is rescaled by exp(m_old - m_new). A last
    elementwise step divides exp(x - m) by l. No exp ever sees a positive argument, so large
    logits cannot overflow.
    """
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}.")
    work = torch.promote_types(x.dtype, torch.float32)  # accumulate in float32 at least
    xs = x.to(work)
    m = torch.full(x.shape[:-1], float("-inf"), dtype=work, device=x.device)  # [...]
    l = torch.zeros(x.shape[:-1], dtype=work, device=x.device)  # [...]
    for start in range(0, x.shape[-1], block):
        xb = xs[..., start : start + block]  # [..., <= block]
        m_new = torch.maximum(m, xb.amax(dim=-1))
        l = l * torch.exp(m - m_new) + torch.exp(xb - m_new[..., None]).sum(dim=-1)
        m = m_new
    return (torch.exp(xs - m[..., None]) / l[..., None]).to(x.dtype)
