"""Checks of chapter 04 (the transformer block): rms_norm, fused_add_rms_norm, swiglu,
merge_qkv, and the part-1 capstone my_qwen3_forward (the learner's own Qwen3, compared with the
reference model on bard's weights and on small random models).

One job per module:
- rms_norm, fused, swiglu, merge_qkv: the checks of rms_norm, fused_add_rms_norm, swiglu and
  merge_qkv, each with the classic mistakes a wrong output is matched against;
- capstone: the checks of my_qwen3_forward, with the reference model's logits they compare;
- common: the half-precision dtypes tried, each dtype's tolerance, how a dtype is written.

Importing this package registers every check.
"""

from minimodel.grading.ch04 import capstone, fused, merge_qkv, rms_norm, swiglu

__all__ = ["capstone", "fused", "merge_qkv", "rms_norm", "swiglu"]
