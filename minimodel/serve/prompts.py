"""Requests' prompts -> token ids: completions' prompts (text, token ids, or lists of them) and
chat messages through the chat template, tokenised in a worker thread, never on the event
loop; what can be refused without tokenising (a text too long for any context) is refused
first, and prompt + max_tokens must fit the context.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from minimodel.sampling import SamplingParams
from minimodel.serve.protocol import bad_request, check_roles, message_dicts
from minimodel.tokenizer import DEFAULT_ENABLE_THINKING, Tokenizer

T = TypeVar("T")
Prompt = str | list[int]  # a completion's prompt: text, or token ids


def longest_token_bytes(tokenizer: Tokenizer) -> int:
    """The most UTF-8 bytes one token stands for: a text of B bytes has >= B / this tokens."""
    longest = 1
    for i in range(len(tokenizer)):
        piece = tokenizer.id_to_token(i)  # byte-level: one character per byte
        if piece is not None:
            longest = max(longest, len(piece.encode("utf-8")))
    return longest


def prompt_list(prompt: Any) -> list[Prompt]:
    """A prompt, a list of prompts, token ids or a list of them -> a list of prompts."""
    if isinstance(prompt, str):
        prompts: list[Any] = [prompt]
    elif prompt and all(isinstance(t, int) for t in prompt):
        prompts = [prompt]
    else:
        prompts = list(prompt)
    if not prompts:
        raise bad_request("prompt is empty: give at least one token.", param="prompt")
    return prompts


def _completion_prompts(prompts: list[Prompt], tokenizer: Tokenizer) -> list[list[int]]:
    """Text prompts tokenised, token-id prompts as they are (a 400 if one is empty)."""
    out = [tokenizer.encode(p) if isinstance(p, str) else list(p) for p in prompts]
    if any(not ids for ids in out):
        raise bad_request("prompt is empty: give at least one token.", param="prompt")
    return out


class PromptReader:
    """The server's own tokenizer and one worker thread that tokenises with it, so that other
    clients (and /health) are answered while a long prompt is tokenised."""

    def __init__(self, tokenizer: Tokenizer, max_model_len: int) -> None:
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self.longest_token = longest_token_bytes(tokenizer)
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="minimodel-tokenize")

    def close(self) -> None:
        self._worker.shutdown(wait=True, cancel_futures=True)

    async def off_loop(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """fn(*args, **kwargs) in the worker thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker, lambda: fn(*args, **kwargs))

    def check_text_length(self, text: str, param: str) -> None:
        """A text whose bytes need more tokens than the context holds, even if every token
        were the vocabulary's longest, is refused before it is tokenised."""
        size = len(text.encode("utf-8", errors="replace"))
        if size > self.max_model_len * self.longest_token:
            raise bad_request(
                f"The {param} has {size} bytes of text, more than {self.max_model_len} tokens "
                f"of this model's context can hold (at most {self.longest_token} bytes a "
                "token); shorten it.", param=param)

    async def text(self, prompt: str) -> list[int]:
        """One text's token ids."""
        self.check_text_length(prompt, "prompt")
        return await self.off_loop(self.tokenizer.encode, prompt)

    async def completion(self, prompts: list[Prompt]) -> list[list[int]]:
        """A completion request's prompts (see prompt_list) -> their token ids."""
        for p in prompts:
            if isinstance(p, str):
                self.check_text_length(p, "prompt")
        return await self.off_loop(_completion_prompts, prompts, self.tokenizer)

    async def chat(self, messages: list, chat_template_kwargs: dict | None,
                   enable_thinking: bool | None,
                   add_generation_prompt: bool = True) -> tuple[list[int], bool]:
        """Chat messages through the chat template -> (token ids, thinking on)."""
        check_roles(messages)
        dicts = message_dicts(messages)
        self.check_text_length("".join(m["content"] for m in dicts), "messages")
        kwargs = dict(chat_template_kwargs or {})
        taken = sorted(kwargs.keys() & {"messages", "add_generation_prompt", "tokenize"})
        if taken:
            raise bad_request(f"chat_template_kwargs may not set {', '.join(taken)}: the server "
                              "sets these itself.", param="chat_template_kwargs")
        thinking = kwargs.pop("enable_thinking", DEFAULT_ENABLE_THINKING)
        if enable_thinking is not None:
            thinking = enable_thinking
        if not isinstance(thinking, bool):
            raise bad_request(f"enable_thinking must be true or false, got {thinking!r}.",
                              param="chat_template_kwargs")
        try:
            ids = await self.off_loop(self.tokenizer.apply_chat_template, dicts,
                                      add_generation_prompt=add_generation_prompt,
                                      enable_thinking=thinking, tokenize=True, **kwargs)
        except Exception as err:  # the template rejects the conversation
            raise bad_request(f"messages: the chat template cannot render them: {err}",
                              param="messages") from None
        return ids, thinking

    def context_left(self, prompt: list[int]) -> int:
        """How many tokens the context holds after `prompt`."""
        return max(self.max_model_len - len(prompt), 0)

    def check_context(self, requests: list[tuple[list[int], SamplingParams]]) -> None:
        """Prompt + max_tokens must fit the context, as OpenAI requires (a prompt that alone
        is too long gets the engine's own message)."""
        for ids, params in requests:
            if len(ids) <= self.max_model_len < len(ids) + params.max_new_tokens:
                raise bad_request(
                    f"This model's context is {self.max_model_len} tokens: the prompt has "
                    f"{len(ids)} and max_tokens asks for {params.max_new_tokens} more; lower "
                    "max_tokens or shorten the prompt.", param="max_tokens")
