"""Linear layers split across ranks (Megatron-LM's column/row scheme, as vLLM and nano-vllm).

A Linear is y = x @ W.T with W [out, in]. Split W by output rows ("column parallel": each rank
computes some of y's columns, no communication) or by input columns ("row parallel": each rank
multiplies its slice of x's features by its slice of W and gets a partial y; the partial ys
sum to the full one, so one all_reduce). Column-then-row (q/k/v then o_proj; gate/up then
down_proj) needs nothing in between: the column layer's output slice is exactly the input slice
the row layer wants.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from minimodel.kernels.matmul import BoundKernels
from minimodel.layers.state import divide, get_tp, local_heads


class _LinearBase(nn.Module):
    """weight [out_local, in_local] (+ bias [out_local]); `full_shapes` holds the unsharded ones.

    The loader lives on the module, not on the Parameter, so that it survives `to_empty`.
    `product(x, bias)` is y = x @ W.T + bias: F.linear, or on a CPU the formulation measured
    fastest for x's row count (`kernels`, set by the engine: minimodel/kernels/matmul.py).
    """

    kernels = BoundKernels()  # a LinearKernels, or None for F.linear

    def __init__(self, in_local: int, out_local: int, bias: bool, full_in: int,
                 full_out: int) -> None:
        super().__init__()
        self.tp_rank, self.tp_size = get_tp()
        self.in_features, self.out_features = in_local, out_local
        self.weight = nn.Parameter(torch.empty(out_local, in_local))
        self.full_shapes = {"weight": (full_out, full_in), "bias": (full_out,)}
        if bias:
            self.bias = nn.Parameter(torch.empty(out_local))
        else:
            self.register_parameter("bias", None)

    def shard(self, full: torch.Tensor, is_bias: bool) -> torch.Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def weight_loader(self, param: nn.Parameter, full: torch.Tensor) -> None:
        """Copy this rank's shard of the full checkpoint tensor into param (weight or bias)."""
        is_bias = param is self.bias
        want = self.full_shapes["bias" if is_bias else "weight"]
        if tuple(full.shape) != want:
            raise ValueError(f"expected the full tensor of shape {want}, got {tuple(full.shape)}")
        param.copy_(self.shard(full, is_bias).to(param.dtype))

    def product(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if self.kernels is None:
            return F.linear(x, self.weight, bias)
        return self.kernels(x, self.weight, bias)


class ColumnParallelLinear(_LinearBase):
    """W [out, in] split by output rows: rank r holds rows r*out/N .. (r+1)*out/N - 1."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        _, size = get_tp()
        super().__init__(in_features, divide(out_features, size, "out_features"), bias,
                         in_features, out_features)

    def shard(self, full: torch.Tensor, is_bias: bool) -> torch.Tensor:
        return full.chunk(self.tp_size, dim=0)[self.tp_rank]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.product(x, self.bias)  # [N, out/N]: this rank's columns of y


class MergedColumnParallelLinear(ColumnParallelLinear):
    """Several column-parallel outputs stacked in one W (gate/up): each block split on its own.

    The full W is [sum(sizes), in] = blocks stacked along dim 0; rank r holds rows r of each
    block's split, stacked in the same order, so silu(gate) * up still pairs matching columns.
    """

    def __init__(self, in_features: int, sizes: list[int], bias: bool = False) -> None:
        self.sizes = list(sizes)
        super().__init__(in_features, sum(sizes), bias)

    def shard(self, full: torch.Tensor, is_bias: bool) -> torch.Tensor:
        blocks = full.split(self.sizes, dim=0)
        return torch.cat([b.chunk(self.tp_size, dim=0)[self.tp_rank] for b in blocks], dim=0)


def qkv_shard_rows(num_heads: int, num_kv_heads: int, head_dim: int, rank: int,
                   size: int) -> torch.Tensor:
    """Row indices of the stacked q/k/v weight [(Hq + 2 Hkv) D, C] that rank `rank` holds.

    Its query heads rank*Hq/N .. (rank+1)*Hq/N - 1, then the KV head(s) they read, for k and for
    v. With fewer KV heads than ranks, the one KV head is shared (replicated) by
    size / num_kv_heads consecutive ranks.
    """
    hq, hkv, replicas = local_heads(num_heads, num_kv_heads, size)
    q_size, kv_size = num_heads * head_dim, num_kv_heads * head_dim
    q = torch.arange(rank * hq * head_dim, (rank + 1) * hq * head_dim)
    kv_head = rank // replicas * hkv
    kv = torch.arange(kv_head * head_dim, (kv_head + hkv) * head_dim)
    return torch.cat([q, q_size + kv, q_size + kv_size + kv])


class QKVParallelLinear(_LinearBase):
    """q/k/v stacked in one W [(Hq + 2 Hkv) D, C], split by heads: see `qkv_shard_rows`.

    Splitting the stacked matrix evenly (rows 0..out/N for rank 0) would hand rank 0 all of q
    and none of k and v: each block must be split on its own.
    """

    def __init__(self, hidden_size: int, head_dim: int, num_heads: int, num_kv_heads: int,
                 bias: bool = False) -> None:
        _, size = get_tp()
        self.head_dim = head_dim
        self.total_heads, self.total_kv_heads = num_heads, num_kv_heads
        self.num_heads, self.num_kv_heads, self.kv_replicas = local_heads(
            num_heads, num_kv_heads, size)
        out_local = (self.num_heads + 2 * self.num_kv_heads) * head_dim
        super().__init__(hidden_size, out_local, bias, hidden_size,
                         (num_heads + 2 * num_kv_heads) * head_dim)

    def shard(self, full: torch.Tensor, is_bias: bool) -> torch.Tensor:
        rows = qkv_shard_rows(self.total_heads, self.total_kv_heads, self.head_dim,
                              self.tp_rank, self.tp_size)
        return full.index_select(0, rows)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.product(x, self.bias)  # [N, (hq + 2 hkv) D]


class RowParallelLinear(_LinearBase):
    """W [out, in] split by input columns; each rank's partial product is summed (all_reduce).

    x arrives already split (the column layer before gave this rank its slice of features).
    A bias would be added once, after the sum (rank 0 adds it).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        _, size = get_tp()
        super().__init__(divide(in_features, size, "in_features"), out_features, bias,
                         in_features, out_features)

    def shard(self, full: torch.Tensor, is_bias: bool) -> torch.Tensor:
        return full if is_bias else full.chunk(self.tp_size, dim=1)[self.tp_rank]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self.bias if self.tp_rank == 0 else None
        y = self.product(x, bias)  # [N, out]: this rank's partial sum
        if self.tp_size > 1:
            dist.all_reduce(y)
        return y
