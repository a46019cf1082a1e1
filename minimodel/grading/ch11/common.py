"""What several of chapter 11's checks share: seeded random ints, the words streams are made of,
and synthetic streams of events (several choices interleaved, chat or completions, with or
without a usage chunk)."""

from __future__ import annotations

import torch


def _randint(low: int, high: int) -> int:
    """A random int in [low, high] (inclusive), from torch's seeded generator."""
    return int(torch.randint(low, high + 1, ()))


_WORDS = ["I", " am", " not", "床前", "明月光", "，", "\n", " \"quoted\"", "\\", "é", "😀", ""]


def _synthetic_stream(n: int, chat: bool, usage: bool) -> list[dict]:
    """The events of a stream of n choices, interleaved at random, each ending with a finish."""
    pieces = {i: ["".join(_WORDS[_randint(0, len(_WORDS) - 2)] for _ in range(_randint(1, 2)))
                  for _ in range(_randint(1, 5))] for i in range(n)}
    for i in range(n):
        if _randint(0, 2) == 0:
            pieces[i].append("")  # a last chunk with its finish_reason and no text
    order = [i for i in range(n) for _ in pieces[i]]
    order = [order[k] for k in torch.randperm(len(order)).tolist()]
    meta = {"id": f"id-{_randint(0, 9999)}", "created": 1700000000 + _randint(0, 99),
            "model": ["tiny", "bard"][_randint(0, 1)]}
    events = []
    if chat:
        events.append({**meta, "object": "chat.completion.chunk", "choices": [
            {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
             "finish_reason": None} for i in range(n)]})
    seen = dict.fromkeys(range(n), 0)
    for i in order:
        seen[i] += 1
        last = seen[i] == len(pieces[i])
        finish = ["length", "stop"][_randint(0, 1)] if last else None
        text = pieces[i][seen[i] - 1]
        if chat:
            delta = {"content": text} if text or not last or _randint(0, 1) else {}
            choice = {"index": i, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": i, "text": text, "logprobs": None, "finish_reason": finish}
        event = {**meta, "object": "chat.completion.chunk" if chat else "text_completion",
                 "choices": [choice]}
        if usage:
            event["usage"] = None
        events.append(event)
    if usage:
        tokens = _randint(n, 40)
        events.append({**meta, "object": events[-1]["object"], "choices": [],
                       "usage": {"prompt_tokens": 5, "completion_tokens": tokens,
                                 "total_tokens": 5 + tokens}})
    return events
