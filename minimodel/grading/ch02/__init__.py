"""Checks of chapter 02 (positions and RoPE): rope_tables, apply_rope, rope_qkv, and the
interleaved convention: rope_interleaved, interleave_permutation.

One job per module:
- tables: the checks of rope_tables;
- rope: the checks of apply_rope and rope_interleaved (one contract, two pairings);
- qkv: the checks of rope_qkv;
- permutation: the checks of interleave_permutation, with the attention layer they run;
- mistakes: the wrong tables and rotations learners write, to name them in a failure message;
- common: the cases drawn, the grader's cos/sin tables and both RoPE references, how a
  position list is written, and the comparison that appends a hint.

Importing this package registers every check.
"""

from minimodel.grading.ch02 import mistakes, permutation, qkv, rope, tables
from minimodel.grading.ch02.common import rope_interleaved_reference

__all__ = [
    "mistakes",
    "permutation",
    "qkv",
    "rope",
    "rope_interleaved_reference",
    "tables",
]
