"""Attention written the way GPU kernels compute it, in plain PyTorch (chapter 09).

- `softmax`: the online softmax, one pass over blocks with a running max and sum;
- `flash`: the naive attention that materialises the [T, S] scores, and the tiled
  FlashAttention forward that never does, returning the output and the log-sum-exp;
- `merge`: merging two attention states (output, log-sum-exp) computed over disjoint key sets;
- `split_kv`: split-KV decode (flash-decoding) and the work partition a kernel's `plan` computes;
- `paged`: the same tiled loop reading K/V through a page table (FlashInfer's format, ch. 07);
- `roofline`: measured matmul FLOP/s and memory bandwidth, and the cost of a step;
- `matmul` and `native`: the decode product y = x @ W.T written several ways (a C kernel built on
  this machine among them), and the fastest chosen per shape, measured.

These are slow in Python: they exist to show, and test, what a fast kernel computes.
Shapes: T queries, S keys, Hq query heads, Hkv KV heads (G = Hq / Hkv), D head dim.
"""

from minimodel.kernels.flash import flash_attention, naive_attention
from minimodel.kernels.merge import merge_states
from minimodel.kernels.paged import paged_attention, paged_split_kv_decode
from minimodel.kernels.softmax import online_softmax
from minimodel.kernels.split_kv import SplitPlan, plan_split_kv, split_kv_decode

__all__ = [
    "SplitPlan",
    "flash_attention",
    "merge_states",
    "naive_attention",
    "online_softmax",
    "paged_attention",
    "paged_split_kv_decode",
    "plan_split_kv",
    "split_kv_decode",
]
