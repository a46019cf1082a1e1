"""The workloads: seeded requests, the same for every system, and the lengths of the card's runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from minimodel.bench.settings import BenchSettings

PROMPT_VOCAB = 151643  # draw prompt ids among the real tokens of Qwen3's vocabulary


@dataclass
class Request:
    """One request: its prompt's token ids and how many new tokens it generates (EOS ignored)."""

    prompt: list[int]
    max_new_tokens: int


def make_requests(
    n: int, prompt_range: tuple[int, int], output_range: tuple[int, int], seed: int, vocab: int
) -> list[Request]:
    """n requests with lengths drawn uniformly (inclusive ranges) from a seeded generator."""
    rng = np.random.RandomState(seed)
    prompt_lens = rng.randint(prompt_range[0], prompt_range[1] + 1, size=n)
    output_lens = rng.randint(output_range[0], output_range[1] + 1, size=n)
    return [
        Request(rng.randint(0, vocab, size=int(p)).tolist(), int(o))
        for p, o in zip(prompt_lens, output_lens, strict=True)
    ]


def make_work(settings: BenchSettings, workloads: set[str], vocab: int) -> dict[str, Any]:
    """The requests of each chosen workload, and a pool big enough that nothing is preempted."""
    work: dict[str, Any] = {}
    if "A" in workloads:
        work["A"] = make_requests(settings.a_requests, (32, 256), (16, 128), seed=0, vocab=vocab)
    if "B" in workloads:
        work["B"] = make_requests(1, (128, 128), (64, 64), seed=1, vocab=vocab)[0]
    if "C" in workloads:
        work["C"] = make_requests(1, (16, 16), (settings.c_tokens, settings.c_tokens), seed=2,
                                  vocab=vocab)[0]
    if settings.device == "cuda" and "N" in workloads:
        work["N"] = make_requests(256, (100, 1024), (100, 1024), seed=0, vocab=vocab)
    tokens = max(
        [sum(len(r.prompt) + r.max_new_tokens for r in work.get(k, [])) for k in ("A", "N")]
        + [len(work[k].prompt) + work[k].max_new_tokens for k in ("B", "C") if k in work]
        + [8]
    )
    work["num_pages"] = -(-tokens // settings.page_size) + 16
    return work


def card_workload(settings: BenchSettings) -> dict[str, int]:
    """Prompt and output lengths of the card's decode and prefill runs (longer on a GPU)."""
    cuda = settings.device == "cuda"
    return {
        "decode_prompt": settings.card_prompt,
        "decode_tokens": settings.card_decode_tokens or (256 if cuda else 32),
        "prefill_tokens": settings.card_prefill_tokens or (2048 if cuda else 256),
    }
