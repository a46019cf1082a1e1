"""Embedding and LM head split by vocabulary rows.

Rank r holds rows r*Vp .. (r+1)*Vp - 1 of the [V, C] table (Vp = ceil(V / N); the last shard is
padded with zero rows when N does not divide V). The embedding looks up the ids that fall in
its rows, writes zeros for the others, and an all_reduce sums the N partial lookups: each id is
found on exactly one rank. The LM head multiplies by its rows -> this rank's slice of the
logits, and rank 0 gathers the slices (only rank 0 samples).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from minimodel.kernels.matmul import BoundKernels
from minimodel.layers.state import get_tp
from minimodel.ops import ceil_div


class VocabParallelEmbedding(nn.Module):
    """weight [Vp, C]: this rank's rows of the table."""

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__()
        self.tp_rank, self.tp_size = get_tp()
        self.num_embeddings = num_embeddings
        self.shard_size = ceil_div(num_embeddings, self.tp_size)
        self.start = min(self.tp_rank * self.shard_size, num_embeddings)  # V < N * Vp: empty
        self.end = min(self.start + self.shard_size, num_embeddings)
        self.weight = nn.Parameter(torch.empty(self.shard_size, embedding_dim))
        self.full_shapes = {"weight": (num_embeddings, embedding_dim)}

    @torch.no_grad()
    def weight_loader(self, param: nn.Parameter, full: torch.Tensor) -> None:
        want = self.full_shapes["weight"]
        if tuple(full.shape) != want:
            raise ValueError(f"expected the full tensor of shape {want}, got {tuple(full.shape)}")
        param.zero_()
        param[: self.end - self.start].copy_(full[self.start : self.end].to(param.dtype))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.tp_size == 1:
            return F.embedding(ids, self.weight)
        mine = (ids >= self.start) & (ids < self.end)
        local = torch.where(mine, ids - self.start, 0)
        y = F.embedding(local, self.weight) * mine.unsqueeze(-1).to(self.weight.dtype)
        dist.all_reduce(y)
        return y


class ParallelLMHead(VocabParallelEmbedding):
    """logits = hidden @ table.T, computed per vocabulary shard and gathered on rank 0.

    `forward` returns [B, V] on rank 0 and None on the other ranks (every rank must call it).
    On a CPU `kernels` (set by the engine) runs the product the fastest measured way.
    """

    kernels = BoundKernels()  # a LinearKernels, or None for F.linear

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__(num_embeddings, embedding_dim)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor | None:
        local = (F.linear(hidden, self.weight) if self.kernels is None
                 else self.kernels(hidden, self.weight, None))  # [B, Vp]
        if self.tp_size == 1:
            return local
        parts = [torch.empty_like(local) for _ in range(self.tp_size)] if self.tp_rank == 0 \
            else None
        dist.gather(local, parts, dst=0)
        if self.tp_rank != 0:
            return None
        return torch.cat(parts, dim=-1)[:, : self.num_embeddings]
