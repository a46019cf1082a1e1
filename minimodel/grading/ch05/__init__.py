"""Checks for chapter 05, logits and sampling: top_k_filter, top_p_filter, sample.

Shapes: B rows (requests), V vocabulary. Filters return logits [B, V] with -inf where a token is
removed; `sample` returns one token id per row, Long [B].

The learner's top-p is fairer than the package's on ties: every token whose probability equals
that of the token crossing p stays (the package keeps whichever of them its sort put first).
Without ties the two agree, so `sample` is checked on untied random logits.

One job per module:
- top_k, top_p, sample: the checks of top_k_filter, top_p_filter and sample;
- oracle: the grader's own top-p (which tokens it keeps) and how close a case comes to p;
- common: reading a filter's output (the tokens it kept, or that it changed nothing), the
  first row it got wrong, and values written short for messages.

Importing this package registers every check.
"""

from minimodel.grading.ch05 import sample, top_k, top_p

__all__ = ["sample", "top_k", "top_p"]
