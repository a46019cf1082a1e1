"""A request inside the engine: its tokens, its pages, how far its K/V are cached, its clock."""

from __future__ import annotations

import time
from enum import Enum

import torch

from minimodel.engine.detokenizer import IncrementalDetokenizer
from minimodel.sampling import SamplingParams


class Status(Enum):
    WAITING = "waiting"  # queued, or preempted and waiting to be recomputed
    RUNNING = "running"  # its whole sequence is cached; it decodes one token per step
    FINISHED = "finished"


class Sequence:
    """One request: prompt + generated tokens, the pages that hold their K/V, and timing.

    The cache holds the K/V of `token_ids[:num_cached_tokens]`. A step feeds the model some of
    the tokens after that (`num_uncached_tokens` of them at most): the whole prompt or a chunk
    of it when prefilling, the last sampled token when decoding, the prompt and every generated
    token again after a preemption.
    """

    def __init__(
        self,
        request_id: int,
        prompt_token_ids: list[int],
        params: SamplingParams,
        generator: torch.Generator | None = None,
        detokenizer: IncrementalDetokenizer | None = None,
    ) -> None:
        self.request_id = request_id
        self.token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.params = params
        self.generator = generator  # the request's own random stream when it has a seed
        self.detokenizer = detokenizer  # present when text (or stop strings) are wanted
        self.status = Status.WAITING
        self.page_table: list[int] = []
        self.num_cached_tokens = 0
        self.logprobs: list[float] = []
        self.finish_reason: str | None = None
        self.stop_text_len: int | None = None  # where a stop string cut the text
        self.num_preemptions = 0
        self.arrival_time = time.perf_counter()
        self.first_token_time: float | None = None
        self.finish_time: float | None = None

    def __repr__(self) -> str:
        return (
            f"Sequence(id={self.request_id}, {self.status.value}, tokens={self.num_tokens}, "
            f"cached={self.num_cached_tokens}, pages={len(self.page_table)})"
        )

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        """The generated tokens (EOS included when it ended the request)."""
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_output_tokens(self) -> int:
        return self.num_tokens - self.num_prompt_tokens

    @property
    def num_uncached_tokens(self) -> int:
        """Tokens whose K/V are not in the cache yet: the work left before the next sample."""
        return self.num_tokens - self.num_cached_tokens

    @property
    def is_finished(self) -> bool:
        return self.status == Status.FINISHED

    def append_token(self, token_id: int, logprob: float) -> None:
        """Record a sampled token (and its text, when a detokenizer is attached)."""
        if self.first_token_time is None:
            self.first_token_time = time.perf_counter()
        self.token_ids.append(token_id)
        if self.params.logprobs:
            self.logprobs.append(logprob)
        if self.detokenizer is not None:
            self.detokenizer.push(token_id)

    def stop_reason(self, eos_token_ids: set[int], max_model_len: int) -> str | None:
        """Why the request should end after its last token, or None to go on.

        "stop": EOS (unless ignore_eos) or a stop string in the text; "length": max_new_tokens
        reached, or the sequence filled the model's context.
        """
        params, last = self.params, self.token_ids[-1]
        if not params.ignore_eos and last in eos_token_ids:
            return "stop"
        if params.stop and self.detokenizer is not None:
            text = self.detokenizer.text
            hits = [i for i in (text.find(s) for s in params.stop) if i >= 0]
            if hits:
                self.stop_text_len = min(hits)
                return "stop"
        if self.num_output_tokens >= params.max_new_tokens or self.num_tokens >= max_model_len:
            return "length"
        return None
