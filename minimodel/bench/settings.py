"""The settings one benchmark run reads, in one frozen object: built once from the command line
(cli.settings_from_args) and handed to the workloads, the runners and the card."""

from __future__ import annotations

from dataclasses import dataclass


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
