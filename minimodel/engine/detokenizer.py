"""Incremental detokenization: text deltas that never end inside a multi-byte character.

Byte-level BPE tokens are byte strings; one character (an emoji, a CJK character) can be split
over several tokens. Decoding a prefix that ends inside a character gives U+FFFD, so a delta is
only released once the text decoded so far no longer ends in an incomplete character.
"""

from __future__ import annotations

from typing import Protocol

REPLACEMENT = "\ufffd"


class Decoder(Protocol):
    def decode(self, ids: list[int]) -> str: ...


class IncrementalDetokenizer:
    """Feed tokens one at a time with `push`; get back only complete new text.

    Only a short window of recent tokens is decoded each time (from `prefix` on), so the cost
    per token does not grow with the length of the text.
    """

    def __init__(self, tokenizer: Decoder) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.text = ""  # all text released so far
        self.prefix = 0  # window start: a character boundary
        self.read = 0  # tokens up to here are already in self.text

    def push(self, token_id: int) -> str:
        """Add one token; return the text it completes ("" while a character is pending)."""
        self.ids.append(token_id)
        before = self.tokenizer.decode(self.ids[self.prefix : self.read])
        after = self.tokenizer.decode(self.ids[self.prefix :])
        if len(after) <= len(before) or after.endswith(REPLACEMENT):
            return ""
        delta = after[len(before) :]
        self.prefix, self.read = self.read, len(self.ids)
        self.text += delta
        return delta

    def flush(self) -> str:
        """At the end: whatever is still pending (bytes that never completed become U+FFFD)."""
        rest = self.tokenizer.decode(self.ids[self.prefix :])
        before = self.tokenizer.decode(self.ids[self.prefix : self.read])
        delta = rest[len(before) :]
        self.prefix = self.read = len(self.ids)
        self.text += delta
        return delta
