"""Qwen3's thinking, split from its answer (what vLLM's `--reasoning-parser qwen3` does).

With thinking on, Qwen3 writes `<think>`, its reasoning, `</think>`, then the answer. The chat
answer carries the reasoning in `message.reasoning_content` (streamed: `delta.reasoning_content`)
and only what follows `</think>` in `content`. The think block is the one the answer opens
with: after its `<think>` everything is reasoning until `</think>`, so an answer cut off while
thinking (max_tokens, a stop string) has reasoning and no content. Where the prompt itself ends
with `<think>` (templates of thinking-only checkpoints open the block for the model), the answer
starts inside it. An answer that opens no think block (a small model that never learnt the tags)
is all content. With thinking off (`enable_thinking: false`: the template puts an empty think
block in the prompt) everything is content.

Text arrives in deltas that may end inside a tag ("</thi" + "nk>"): the end of a delta that
could begin a tag waits for the next one.
"""

from __future__ import annotations

START, END = "<think>", "</think>"


def _partial_tag(text: str, tag: str) -> int:
    """How many characters at the end of `text` could begin `tag` (0 if none)."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-k:]):
            return k
    return 0


class ReasoningSplit:
    """Splits one choice's text, delta by delta, into (reasoning, content)."""

    def __init__(self, thinking: bool, opened: bool = False) -> None:
        self.thinking = thinking  # still inside the think block (or not yet known)
        self.started = opened  # the answer's opening was looked at (or the prompt opened it)
        self.pending = ""  # text that may be the start of a tag

    def push(self, delta: str) -> tuple[str, str]:
        """(reasoning, content) that `delta` adds; either may be ""."""
        return self._split(self.pending + delta, final=False)

    def flush(self) -> tuple[str, str]:
        """What was held back, once the text is complete."""
        return self._split(self.pending, final=True)

    def _split(self, text: str, final: bool) -> tuple[str, str]:
        self.pending = ""
        if not self.thinking:
            return "", text
        if not self.started:
            stripped = text.lstrip()
            if START.startswith(stripped) and len(stripped) < len(START) and not final:
                self.pending = text  # perhaps the beginning of "<think>"
                return "", ""
            self.started = True
            if not stripped.startswith(START):
                self.thinking = False  # no think block: the answer is all content
                return "", text
            text = stripped[len(START):]
        end = text.find(END)
        if end >= 0:
            self.thinking = False
            return text[:end], text[end + len(END):]
        hold = 0 if final else _partial_tag(text, END)
        if hold:
            self.pending = text[-hold:]
            text = text[:-hold]
        return text, ""


def prompt_opens_think(prompt_text: str) -> bool:
    """Does the rendered prompt end inside an open think block (`...<think>\n`)?"""
    return prompt_text.rstrip().endswith(START)


def split_reasoning(text: str, thinking: bool,
                    opened: bool = False) -> tuple[str | None, str | None]:
    """A whole answer -> (reasoning_content, content); None where a part is empty."""
    split = ReasoningSplit(thinking, opened)
    reasoning, content = split.push(text)
    rest_reasoning, rest_content = split.flush()
    reasoning, content = reasoning + rest_reasoning, content + rest_content
    if not thinking:
        return None, content
    return reasoning or None, content or None
