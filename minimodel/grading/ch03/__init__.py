"""Checks of chapter 03 (attention and masks): causal_mask, sliding_window_mask, repeat_kv,
attention, is_causal, predict_shapes.

One job per module:
- causal_mask, sliding_window, repeat_kv: the checks of causal_mask, sliding_window_mask and
  repeat_kv;
- attention: the checks of attention, with the classic mistakes a wrong output is matched
  against;
- is_causal: the checks of is_causal, with the causal and leaky functions it must tell apart;
- predict_shapes: the checks of predict_shapes;
- common: the causal mask, built the grader's own way.

Importing this package registers every check.
"""

from minimodel.grading.ch03 import (
    attention,
    causal_mask,
    is_causal,
    predict_shapes,
    repeat_kv,
    sliding_window,
)

__all__ = [
    "attention",
    "causal_mask",
    "is_causal",
    "predict_shapes",
    "repeat_kv",
    "sliding_window",
]
