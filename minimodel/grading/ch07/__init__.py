"""Checks of chapter 07 (prefill, decode and the KV cache): kv_bytes_per_token, paged_metadata,
slot_mapping, cached_attention, and the capstone my_cached_decode.

One job per module:
- kv_bytes: the checks of kv_bytes_per_token, against Qwen3Config.kv_bytes_per_token;
- paged_metadata, slot_mapping: the checks of paged_metadata and slot_mapping, against the
  engine's build_metadata;
- cached_attention: the checks of cached_attention, with the classic mistakes a wrong output is
  matched against;
- capstone: the checks of my_cached_decode, against the reference model's full recompute;
- common: random paged batches (each request's tokens and page table).

Importing this package registers every check.
"""

from minimodel.grading.ch07 import (
    cached_attention,
    capstone,
    kv_bytes,
    paged_metadata,
    slot_mapping,
)

__all__ = ["cached_attention", "capstone", "kv_bytes", "paged_metadata", "slot_mapping"]
