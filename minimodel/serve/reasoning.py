"""Qwen3's thinking, split from its answer (what vLLM's `--reasoning-parser qwen3` does).

With thinking on, Qwen3 writes `<think>`, its reasoning, `</think>`, then the answer. The chat
answer carries the reasoning in `message.reasoning_content` (streamed: `delta.reasoning_content`)
and only what follows `</think>` in `content`. A `<think>` the model writes is left out; until
`</think>` comes everything is reasoning, so an answer cut off while thinking (max_tokens, a stop
string) has reasoning and no content. With thinking off (`enable_thinking: false`: the template
puts an empty think block in the prompt) everything is content.

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

    def __init__(self, thinking: bool) -> None:
        self.thinking = thinking  # still inside the think block
        self.started = False  # a leading <think> was looked for
        self.pending = ""  # text that may be the start of a tag

    def push(self, delta: str) -> tuple[str, str]:
        """(reasoning, content) that `delta` adds; either may be ""."""
        return self._split(self.pending + delta, final=False)

    def finish(self) -> tuple[str, str]:
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
            if stripped.startswith(START):
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


def split_reasoning(text: str, thinking: bool) -> tuple[str | None, str | None]:
    """A whole answer -> (reasoning_content, content); None where a part is empty."""
    split = ReasoningSplit(thinking)
    reasoning, content = split.push(text)
    rest_reasoning, rest_content = split.finish()
    reasoning, content = reasoning + rest_reasoning, content + rest_content
    if not thinking:
        return None, content
    return reasoning or None, content or None
