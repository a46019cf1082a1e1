"""Checks of chapter 10 (tensor parallelism): column_parallel_linear, row_parallel_linear,
vocab_parallel_embedding, shard_qkv, and the capstone tp_decoder_layer.

For the first four the ranks are simulated in one process: a function gets `rank` and
`world_size` and returns what that rank computes or holds; "all_reduce" is the sum of the ranks'
results. The capstone runs in real processes: two ranks started with multiprocessing's
forkserver, joined in a gloo process group, each loading the learner's function.

Shapes: N or T tokens, C in-features (hidden), O out-features, W ranks (world_size), V
vocabulary, Hq / Hkv query / KV heads, D head dim, I intermediate size.

One job per module:
- column, row, embedding, qkv: the checks of column_parallel_linear, row_parallel_linear,
  vocab_parallel_embedding and shard_qkv, each with the cases it draws and its own answer;
- reference: the capstone's cases and the reference decoder layer they are compared with, and
  what is wrong with a layer's output or K and V;
- ranks: running the learner's layer on two real processes (forkserver, gloo) and reporting
  each rank's output, K and V, all-reduces, FLOPs and calls;
- capstone: the checks of tp_decoder_layer, on one rank and on the two processes' reports;
- common: seeded generators, the tolerance of each dtype, a linear layer's random inputs.

Importing this package registers every check.
"""

from minimodel.grading.ch10 import capstone, column, embedding, qkv, ranks, reference, row

__all__ = ["capstone", "column", "embedding", "qkv", "ranks", "reference", "row"]
