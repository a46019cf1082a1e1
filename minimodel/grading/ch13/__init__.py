"""Checks of chapter 13 (guess, then check): accept_greedy, rejection_sample, and the capstone
speculative_step, which composes the learner's two verifiers with a target and a drafter on the
engine's paged KV cache (CachedLM).

One job per module:
- common: the chi-square test and its false-alarm rate; TableLM, a CachedLM with exact, tiny
  distributions; two small random Qwen3s (a target and a drafter) on the engine's cache;
- accept: the checks of accept_greedy;
- rejection: the checks of rejection_sample, exact cases and then distributions;
- step: the checks of speculative_step: greedy output equal to plain greedy decoding, the
  caches after every step, sampled output following the target, and the learner's own
  verifiers called.

Importing this package registers every check.
"""

from minimodel.grading.ch13 import accept, common, rejection, step

__all__ = ["accept", "common", "rejection", "step"]
