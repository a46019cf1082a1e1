"""Tensor-parallel layers: each rank holds a shard of every weight and computes its part.

    ColumnParallelLinear        W [out, in] split by output rows: rank r computes y[:, its cols]
    MergedColumnParallelLinear  gate/up stacked: each block split by columns, per block
    QKVParallelLinear           q/k/v stacked: each rank its query heads and their KV heads
    RowParallelLinear           W split by input columns: partial sums, then all_reduce
    VocabParallelEmbedding      the table split by vocabulary rows: masked lookup + all_reduce
    ParallelLMHead              the same split: local logits, gathered on rank 0
    RMSNorm                     replicated (every rank holds the whole [C] weight)

Every sharded layer has `weight_loader(param, full)`: given the full checkpoint tensor (q/k/v or
gate/up already stacked along dim 0; `full_shapes` says its shape), it copies this rank's shard
into `param`. `minimodel.weights.load_weights` calls it for every parameter it owns. With one rank
(the default, `tensor_parallel(0, 1)`), every layer is the plain layer and nothing communicates.
"""

from minimodel.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from minimodel.layers.layernorm import RMSNorm
from minimodel.layers.linear import (
    ColumnParallelLinear,
    MergedColumnParallelLinear,
    QKVParallelLinear,
    RowParallelLinear,
    qkv_shard_rows,
)
from minimodel.layers.state import (
    TPConfigError,
    check_tensor_parallel_size,
    divide,
    get_tp,
    local_heads,
    tensor_parallel,
)

__all__ = [
    "ColumnParallelLinear", "MergedColumnParallelLinear", "ParallelLMHead", "QKVParallelLinear",
    "RMSNorm", "RowParallelLinear", "TPConfigError", "VocabParallelEmbedding",
    "check_tensor_parallel_size", "divide", "get_tp", "local_heads", "qkv_shard_rows",
    "tensor_parallel",
]
