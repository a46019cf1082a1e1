"""A request inside the engine: its tokens, its pages, how far its K/V are cached, its clock."""

from __future__ import annotations

import time
from enum import Enum

import torch

from minimodel.engine.detokenizer import IncrementalDetokenizer
from minimodel.engine.radix_cache import Node
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
        eos_token_ids: frozenset[int] | set[int] = frozenset(),
    ) -> None:
        self.request_id = request_id
        self.token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.params = params
        self.generator = generator  # the request's own random stream when it has a seed
        self.detokenizer = detokenizer  # present when text (or stop strings) are wanted
        self.eos_token_ids = frozenset(eos_token_ids)  # the model's EOS ids (its text is left out)
        self.status = Status.WAITING
        self.page_table: list[int] = []
        self.num_cached_tokens = 0
        # With a prefix cache: page_table[:num_pages_in_cache] are in its tree, ending at
        # cache_node; how many prompt tokens it held when the request was first admitted.
        self.cache_node: Node | None = None
        self.num_pages_in_cache = 0
        self.num_cached_prompt_tokens: int | None = None
        # With a draft model (engine/spec_decode.py): how many tokens' K/V its pool holds (it
        # may lag the target's by the drafts it did not see); drafts checked, and accepted;
        # steps that gave this request tokens.
        self.num_draft_cached: int | None = None
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.num_steps = 0
        self.logprobs: list[float] = []
        self.top_logprobs: list[list[tuple[int, float]]] = []  # per token, with logprobs=N
        self.finish_reason: str | None = None
        self.stop_text_len: int | None = None  # where a stop string cut the text
        self.stop_string: str | None = None  # the stop string that ended it
        self.stop_token_id: int | None = None  # the stop_token_ids entry that ended it
        self.stop_search_from = 0  # text before this index cannot hold a stop (min_tokens)
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
    def num_shareable_tokens(self) -> int:
        """Tokens whose K/V every pool holds (the target's, and a draft model's if there is
        one): the pages the prefix cache may take."""
        if self.num_draft_cached is None:
            return self.num_cached_tokens
        return min(self.num_cached_tokens, self.num_draft_cached)

    @property
    def is_finished(self) -> bool:
        return self.status == Status.FINISHED

    def append_token(self, token_id: int, logprob: float) -> None:
        """Record a sampled token (and its text, when a detokenizer is attached).

        A token that ends the request (EOS, or one of stop_token_ids) is kept in token_ids but
        not in the text, unless params.include_stop_str_in_output.
        """
        if self.first_token_time is None:
            self.first_token_time = time.perf_counter()
        self.token_ids.append(token_id)
        params = self.params
        if params.num_logprobs is not None:
            self.logprobs.append(logprob)
        if self.detokenizer is not None:
            if self.num_output_tokens == params.min_tokens:  # stops count from this token on
                self.stop_search_from = len(self.detokenizer.text)
            if params.include_stop_str_in_output or not self.ends_with_stop_token():
                self.detokenizer.push(token_id)

    def _is_stop_token(self, token_id: int) -> bool:
        """Does this (last) token end the request as one of params.stop_token_ids?"""
        ids = self.params.stop_token_ids
        return bool(ids) and token_id in ids and self.num_output_tokens >= self.params.min_tokens

    def ends_with_stop_token(self) -> bool:
        """Does the last token end the request as EOS (unless ignore_eos) or a stop token?
        (Not before min_tokens tokens: the sampler keeps them out until then anyway.)"""
        if self.num_output_tokens < max(self.params.min_tokens, 1):
            return False
        last = self.token_ids[-1]
        return self._is_stop_token(last) or (
            not self.params.ignore_eos and last in self.eos_token_ids)

    def output_text_ids(self) -> list[int]:
        """The generated ids whose text is the output: without the EOS or stop token that
        ended the request (unless include_stop_str_in_output)."""
        ids = self.output_token_ids
        if self.is_finished and self.finish_reason == "stop" and ids and \
                self.stop_string is None and not self.params.include_stop_str_in_output:
            return ids[:-1]
        return ids

    def stop_reason(self, max_model_len: int) -> str | None:
        """Why the request should end after its last token, or None to go on.

        "stop": EOS (unless ignore_eos), a token of stop_token_ids, or a stop string in the
        text; none of them before min_tokens tokens (a stop string must end in the text of
        token min_tokens or later, as vLLM). "length": max_tokens reached, or the sequence
        filled the model's context.
        """
        params, last = self.params, self.token_ids[-1]
        if self.num_output_tokens >= params.min_tokens:
            if not params.ignore_eos and last in self.eos_token_ids:
                return "stop"
            if self._is_stop_token(last):
                self.stop_token_id = last
                return "stop"
            if params.stop and self.detokenizer is not None:
                text = self.detokenizer.text
                hits = [(i, s) for s in params.stop
                        if (i := text.find(s, max(0, self.stop_search_from - len(s) + 1))) >= 0]
                if hits:  # the earliest; the text ends before it (or after it, if kept)
                    at, self.stop_string = min(hits, key=lambda hit: hit[0])
                    keep = len(self.stop_string) if params.include_stop_str_in_output else 0
                    self.stop_text_len = at + keep
                    return "stop"
        if self.num_output_tokens >= params.max_tokens or self.num_tokens >= max_model_len:
            return "length"
        return None
