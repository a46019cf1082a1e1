"""Checks of chapter 12 (sharing the prefix): match_prefix, insert and evict over the engine's
radix tree (minimodel/engine/radix_cache.py), and the capstone my_prefix_cache, the learner's
three functions inside a real engine.

One job per module:
- common: two worlds (pool, tree, requests) driven by the same stream of requests, one with
  the engine's RadixCache and one whose tree calls the learner's function; their comparison
  after every event; the guard that keeps a learner's function from calling the tree's own
  answers;
- match, insert, evict: the checks of match_prefix, insert and evict, each on streams that
  provoke what it must get right (page boundaries, max_pages, splits, shared pages, start,
  reference counts, LRU order, a tight pool), then on random streams;
- capstone: the checks of my_prefix_cache, on mm.LLM("tiny") against the same engine with the
  cache off.

Importing this package registers every check.
"""

from minimodel.grading.ch12 import capstone, common, evict, insert, match
from minimodel.grading.ch12.capstone import CAPSTONE_POOLS, capstone_waves, reference_outputs

__all__ = ["CAPSTONE_POOLS", "capstone", "capstone_waves", "common", "evict", "insert", "match",
           "reference_outputs"]
