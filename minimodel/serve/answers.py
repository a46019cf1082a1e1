"""What the two OpenAI routes answer with: choices, chunks, usage, and log-probabilities in
OpenAI's shapes, assembled from the engine's token ids and text.

Completions and chat completions differ only here (`Kind`): the object names, a choice's
`text` or `message` (with `reasoning_content` when a reasoning parser splits Qwen3's think
block), a chunk's `text` or `delta`, and the shape of `logprobs` (tokens, token_logprobs,
top_logprobs and text_offset for completions; per-token entries with UTF-8 `bytes` and
`top_logprobs` for chat).
"""

from __future__ import annotations

from typing import Any

from minimodel.bpe import bytes_to_unicode
from minimodel.engine.detokenizer import IncrementalDetokenizer, TextStream
from minimodel.sampling import SamplingParams
from minimodel.serve.reasoning import split_reasoning
from minimodel.tokenizer import Tokenizer

_BYTE_OF = {char: byte for byte, char in bytes_to_unicode().items()}


def choice_text(tokenizer: Tokenizer, params: SamplingParams) -> TextStream:
    """One choice's text as its tokens arrive, decoded as the engine decodes it (special tokens
    skipped unless asked otherwise); `flush` takes the engine's final `RequestOutput.text`."""
    return TextStream(IncrementalDetokenizer(tokenizer, params.skip_special_tokens), params.stop)


def token_texts(tokenizer: Tokenizer, ids: list[int]) -> list[str]:
    return [tokenizer.decode([i]) for i in ids]


def completion_logprobs(tokenizer: Tokenizer, ids: list[int], logprobs: list[float],
                        offset: int = 0, top: list | None = None,
                        n: int = 0) -> dict[str, Any]:
    """The `logprobs` object of a completion choice.

    top_logprobs: per token, {text: logprob} of the n most likely tokens (with n > 0; else
    null). text_offset counts characters from the start of the choice's text.
    """
    texts = token_texts(tokenizer, ids)
    offsets = []
    for text in texts:
        offsets.append(offset)
        offset += len(text)
    alternatives = None
    if n and top is not None:
        alternatives = [{tokenizer.decode([i]): lp for i, lp in step[:n]} for step in top]
    return {"tokens": texts, "token_logprobs": logprobs, "top_logprobs": alternatives,
            "text_offset": offsets}


def token_bytes(tokenizer: Tokenizer, token_id: int, text: str) -> list[int]:
    """The UTF-8 bytes one token stands for, also when it ends inside a character (its text
    then shows U+FFFD): read from the byte-level token string, one character per byte."""
    if "\ufffd" not in text:
        return list(text.encode("utf-8"))
    piece = tokenizer.id_to_token(token_id) or ""
    if all(char in _BYTE_OF for char in piece):
        return [_BYTE_OF[char] for char in piece]
    return list(text.encode("utf-8"))


def chat_logprobs(tokenizer: Tokenizer, ids: list[int], logprobs: list[float],
                  top: list | None = None, n: int = 0) -> dict[str, Any]:
    """The `logprobs` object of a chat choice, in OpenAI's shape: each token's text, its
    log-probability, its UTF-8 bytes (a piece of a character has its own bytes) and the n
    most likely tokens in the same shape."""

    def entry(token_id: int, lp: float) -> dict[str, Any]:
        text = tokenizer.decode([token_id])
        return {"token": text, "logprob": lp, "bytes": token_bytes(tokenizer, token_id, text)}

    content = []
    for step, (i, lp) in enumerate(zip(ids, logprobs, strict=True)):
        alternatives = (top[step][:n] if n and top is not None else [])
        content.append({**entry(i, lp), "top_logprobs": [entry(t, a) for t, a in alternatives]})
    return {"content": content}


class Kind:
    """What differs between /v1/completions and /v1/chat/completions in the answer."""

    def __init__(self, chat: bool, thinking: bool | None = None, opened: bool = False) -> None:
        self.chat = chat
        # None: no reasoning parser, the whole text is content; else whether thinking is on
        self.thinking = thinking
        self.opened = opened  # the prompt ends inside an open think block
        self.object = "chat.completion" if chat else "text_completion"
        self.chunk_object = "chat.completion.chunk" if chat else "text_completion"
        self.id_prefix = "chatcmpl-" if chat else "cmpl-"

    def choice(self, index: int, text: str, logprobs: Any, finish: str | None) -> dict:
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if self.thinking is not None:
                reasoning, message["content"] = split_reasoning(text, self.thinking, self.opened)
                message["reasoning_content"] = reasoning
            return {"index": index, "message": message, "logprobs": logprobs,
                    "finish_reason": finish}
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}

    def chunk_choice(self, index: int, text: str | None, logprobs: Any,
                     finish: str | None, role: bool = False, reasoning: str = "") -> dict:
        if self.chat:
            delta: dict[str, str] = {"role": "assistant"} if role else {}
            if reasoning:
                delta["reasoning_content"] = reasoning
            if text is not None and (text or not reasoning):
                delta["content"] = text
            return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        return {"index": index, "text": text or "", "logprobs": logprobs, "finish_reason": finish}


def usage_body(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
    """OpenAI's usage; prompt_tokens_details.cached_tokens: the prompt tokens the prefix cache
    held (not computed again)."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}
