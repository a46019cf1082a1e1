"""The settings one benchmark run reads, in one frozen object: built once from the command line
(cli.settings_from_args) and handed to the workloads, the runners and the card; and the
formats a card or a quality comparison can run the model in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

# A format: the activations' dtype and the weights' quantization (None: the weights in that
# dtype). int8 and int4 are torchao's weight-only formats with bfloat16 activations.
FORMATS: dict[str, tuple[str, str | None]] = {
    "float32": ("float32", None),
    "bfloat16": ("bfloat16", None),
    "float16": ("float16", None),
    "int8": ("bfloat16", "int8"),
    "int4": ("bfloat16", "int4"),
}


def engine_format(name: str) -> dict[str, Any]:
    """The LLM settings of a format: {"dtype": ..., "quantization": ...}."""
    dtype, quantization = FORMATS[name]
    return {"dtype": getattr(torch, dtype), "quantization": quantization}


@dataclass(frozen=True)
class BenchSettings:
    """What a run measures and how; each field is the command line's flag of the same name."""

    model: str                         # a name resolve_model() knows, or a folder
    device: str                        # "cpu" or "cuda"
    systems: tuple[str, ...]           # which of "engine", "transformers", "reference" run
    page_size: int                     # tokens per page of the engine's KV cache
    repeats: int                       # runs of B, the engine's C and the card; the best is kept
    a_requests: int                    # requests in workload A
    c_tokens: int                      # new tokens in workload C
    card_prompt: int                   # card: prompt length of the decode run
    card_decode_tokens: int | None     # card: new tokens of the decode run (None: by device)
    card_prefill_tokens: int | None    # card: prompt length of the prefill run (None: by device)
    quiet: bool                        # print no progress lines and no table
    curve_batches: tuple[int, ...]     # card: requests per decode step, one point each
    curve_prompt: int                  # card: prompt length of the curve's requests
    curve_steps: int                   # card: timed decode steps per batch size (best kept)
    profile_steps: int                 # card: batch-1 decode steps under the profiler
    quality_prompts: int               # quality: prompts per model
    quality_tokens: int                # quality: greedy tokens per prompt
