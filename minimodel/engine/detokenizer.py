"""Incremental detokenization: text deltas that never end inside a multi-byte character.

Byte-level BPE tokens are byte strings; one character (an emoji, a CJK character) can be split
over several tokens. Decoding a prefix that ends inside a character gives U+FFFD, so a delta is
only released once the text decoded so far no longer ends in an incomplete character.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

REPLACEMENT = "\ufffd"


class Decoder(Protocol):
    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str: ...


class IncrementalDetokenizer:
    """Feed tokens one at a time with `push`; get back only complete new text.

    Only a short window of recent tokens is decoded each time (from `prefix` on), so the cost
    per token does not grow with the length of the text.
    """

    def __init__(self, tokenizer: Decoder, skip_special_tokens: bool = False) -> None:
        self.tokenizer = tokenizer
        # control tokens (<|im_end|>) decode to "" when skipped: the text never shows them
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self.text = ""  # all text released so far
        self.prefix = 0  # window start: a character boundary
        self.read = 0  # tokens up to here are already in self.text

    def push(self, token_id: int) -> str:
        """Add one token; return the text it completes ("" while a character is pending)."""
        self.ids.append(token_id)
        before = self._decode(self.ids[self.prefix : self.read])
        after = self._decode(self.ids[self.prefix :])
        if len(after) <= len(before) or after.endswith(REPLACEMENT):
            return ""
        delta = after[len(before) :]
        self.prefix, self.read = self.read, len(self.ids)
        self.text += delta
        return delta

    def flush(self) -> str:
        """At the end: whatever is still pending (bytes that never completed become U+FFFD)."""
        rest = self._decode(self.ids[self.prefix :])
        before = self._decode(self.ids[self.prefix : self.read])
        delta = rest[len(before) :]
        self.prefix = self.read = len(self.ids)
        self.text += delta
        return delta

    def _decode(self, ids: list[int]) -> str:
        if not self.skip_special_tokens:
            return self.tokenizer.decode(ids)  # any decoder with decode(ids) will do
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def stop_hold(stop: Sequence[str] | None) -> int:
    """How many characters at the end of the text a stream holds back: len(stop) - 1 for the
    longest stop string, since they may be the beginning of one (the engine then cuts the
    text before it, and nothing of it may have been sent)."""
    return max((len(s) for s in stop or ()), default=1) - 1


class TextStream:
    """The text of one request handed out in pieces: `push` token ids, get the new text that is
    safe to send (complete characters, and not the last `stop_hold` characters, which may start
    a stop string); `flush` with the request's final text (the engine's `RequestOutput.text`,
    cut at its stop) gives the rest. "".join(pieces) == the final text.

    Used by `LLM.stream` (with the engine's own detokenizer) and by the server (with its own).
    """

    def __init__(self, detokenizer: IncrementalDetokenizer, stop: Sequence[str] | None) -> None:
        self.detokenizer = detokenizer
        self.hold = stop_hold(stop)
        self.sent = 0  # characters handed out

    def push(self, token_ids: Sequence[int] = ()) -> str:
        """Feed new token ids (none: the detokenizer is fed elsewhere); the text now safe."""
        for token_id in token_ids:
            self.detokenizer.push(token_id)
        ready = len(self.detokenizer.text) - self.hold
        if ready <= self.sent:
            return ""
        delta = self.detokenizer.text[self.sent : ready]
        self.sent = ready
        return delta

    def flush(self, final_text: str) -> str:
        """The rest of the final text, once the request has ended."""
        delta = final_text[self.sent :]
        self.sent = max(self.sent, len(final_text))
        return delta
