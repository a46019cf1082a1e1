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


# Public-domain verse for the quality comparison's prompts: bard was trained on plays and poems,
# so windows of real text are prompts it has a confident answer to (random ids are not).
QUALITY_TEXT = """\
Shall I compare thee to a summer's day?
Thou art more lovely and more temperate:
Rough winds do shake the darling buds of May,
And summer's lease hath all too short a date;
Sometime too hot the eye of heaven shines,
And often is his gold complexion dimm'd;
And every fair from fair sometime declines,
By chance or nature's changing course untrimm'd;
But thy eternal summer shall not fade,
Nor lose possession of that fair thou ow'st;
Nor shall Death brag thou wander'st in his shade,
When in eternal lines to time thou grow'st:
So long as men can breathe or eyes can see,
So long lives this, and this gives life to thee.

HAMLET.
To be, or not to be, that is the question:
Whether 'tis nobler in the mind to suffer
The slings and arrows of outrageous fortune,
Or to take arms against a sea of troubles,
And by opposing end them? To die: to sleep;
No more; and by a sleep to say we end
The heart-ache and the thousand natural shocks
That flesh is heir to, 'tis a consummation
Devoutly to be wish'd. To die, to sleep;
To sleep: perchance to dream: ay, there's the rub;
For in that sleep of death what dreams may come
When we have shuffled off this mortal coil,
Must give us pause.

Tyger Tyger, burning bright,
In the forests of the night;
What immortal hand or eye,
Could frame thy fearful symmetry?
In what distant deeps or skies.
Burnt the fire of thine eyes?
On what wings dare he aspire?
What the hand, dare seize the fire?

I wandered lonely as a cloud
That floats on high o'er vales and hills,
When all at once I saw a crowd,
A host, of golden daffodils;
Beside the lake, beneath the trees,
Fluttering and dancing in the breeze.
"""


def text_prompts(token_ids: list[int], n: int, length_range: tuple[int, int],
                 seed: int) -> list[list[int]]:
    """n windows of a tokenized text, lengths uniform in length_range (inclusive), starts
    uniform over the text: the same windows for the same text and seed."""
    rng = np.random.RandomState(seed)
    lengths = rng.randint(length_range[0], length_range[1] + 1, size=n)
    if lengths.max() > len(token_ids):
        raise ValueError(f"The text has {len(token_ids)} tokens, fewer than the longest prompt "
                         f"({lengths.max()}); shorten the prompts.")
    starts = [rng.randint(0, len(token_ids) - int(k) + 1) for k in lengths]
    return [token_ids[s : s + int(k)] for s, k in zip(starts, lengths, strict=True)]
