"""The grader's own top-p, written apart from the package: which tokens it keeps (every token as
likely as the one that crosses p, ties included), and how close a case's running sums come to p
(a case on the boundary could round either way, so the checks draw clear of it)."""

from __future__ import annotations

import torch


def _crossing(logits: torch.Tensor, p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(index in descending order, logit) of each row's token that brings the mass to >= p.

    Both are [B, 1]. The logit does not depend on how a sort orders tied tokens.
    """
    sorted_desc = logits.double().sort(dim=-1, descending=True).values  # [B, V]
    mass = sorted_desc.softmax(dim=-1).cumsum(dim=-1)  # running sum, most likely first
    index = (mass < p).sum(dim=-1, keepdim=True).clamp(max=logits.shape[-1] - 1)
    return index, sorted_desc.gather(-1, index)


def _top_p_mask(logits: torch.Tensor, p: float) -> torch.Tensor:
    """The tokens top-p keeps, Bool [B, V], in float64: every token at least as likely as the
    token that crosses p (so the tokens tied with it stay too)."""
    if p >= 1.0:
        return torch.ones_like(logits, dtype=torch.bool)
    return logits.double() >= _crossing(logits, p)[1]


def _margin_to_p(logits: torch.Tensor, p: float) -> float:
    """How close any row's cumulative probability (sorted, descending) comes to p."""
    probs = logits.double().softmax(-1).sort(-1, descending=True).values
    return float((probs.cumsum(-1) - p).abs().min())
