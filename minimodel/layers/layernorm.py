"""RMSNorm, the one module of both models: the reference's norms, and the engine's, replicated
on every rank (the hidden dim is never split, so there is nothing to shard)."""

from __future__ import annotations

import torch
from torch import nn

from minimodel.ops import fused_add_rms_norm, rms_norm


class RMSNorm(nn.Module):
    """RMSNorm with a learned per-channel scale (weight: [C]), and `add_forward`, which adds
    the residual stream first (the engine's fused add + norm, chapter 04 section 5)."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)

    def add_forward(
        self, x: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(x + residual), x + residual); residual=None means x starts the stream."""
        return fused_add_rms_norm(x, residual, self.weight, self.eps)
