"""Checks of chapter 09 (inside the attention kernel): online_softmax, flash_attention,
merge_states, paged_split_kv_decode and predict_step_seconds.

Shapes: T queries, S keys, Hq query heads, Hkv KV heads (G = Hq / Hkv), D head dim; in the paged
exercise B requests, P pages in the pool, page size S_p (`page_size`). Expected values are
computed in float64.

One job per module:
- softmax, flash, merge: the checks of online_softmax, flash_attention and merge_states, each
  with the float64 answer it compares with and the hints that name a classic mistake;
- paged: the checks of paged_split_kv_decode's output, against the engine's torch backend on
  the same pool of scattered pages;
- work_items: the checks of how paged_split_kv_decode cuts the batch (the calls of the learner's
  flash_attention, traced back to the tokens they read) against the budget and `longest_item`,
  the shortest longest chunk the budget allows, and of its merges;
- step_time: the checks of predict_step_seconds, a decode step's time from its bytes (weights
  in float32, bfloat16, int8 or int4, and each request's K/V) and FLOPs on a given roofline,
  against the package's step_cost with the quantized weights' bytes;
- reference: the float64 attention (SDPA and its lse) that flash, merge and paged compare with,
  and the random q, k, v they draw;
- common: the tolerance, how results are compared, and the checks every kernel's result passes.

Importing this package registers every check.
"""

from minimodel.grading.ch09 import flash, merge, paged, softmax, step_time, work_items
from minimodel.grading.ch09.work_items import longest_item

__all__ = ["flash", "longest_item", "merge", "paged", "softmax", "step_time", "work_items"]
