"""Turning logits into tokens: SamplingParams and one batched sampler for every request.

Order of operations, per request: temperature -> top-k -> top-p -> draw. temperature=0 is
greedy, and so is any temperature below GREEDY_BELOW (dividing logits by 1e-38 overflows to
inf, and softmax of inf is NaN: such a temperature means "the most likely token"). Each
request may carry its own parameters and seed; a seeded request draws from its own generator,
so it gets the same tokens alone or inside any batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

GREEDY_BELOW = 1e-5  # temperatures under this are greedy (the same threshold as vLLM's)
INT64_MAX = 2**63 - 1  # integer fields must fit the int64 tensors and generators they reach


@dataclass
class SamplingParams:
    """How to pick the next tokens of one request, and when to stop."""

    temperature: float = 1.0  # 0 = greedy; higher = flatter distribution
    top_k: int = 0  # keep the k most likely tokens; 0 = no limit
    top_p: float = 1.0  # keep the smallest set with probability >= top_p; 1.0 = no limit
    max_new_tokens: int = 16  # generated tokens at most (EOS included)
    stop: list[str] | str | None = None  # stop when the text ends with one of these
    seed: int | None = None  # per-request random stream
    ignore_eos: bool = False  # keep going past EOS (benchmarks)
    logprobs: bool = False  # return the log-probability of each generated token

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the field and its range if a value is invalid.

        Runs on construction; the engine runs it again when a request is submitted, since a
        dataclass field can be changed after construction.
        """

        def bad(field: str, value: object, rule: str) -> ValueError:
            return ValueError(f"SamplingParams.{field} must be {rule}, got {value!r}.")

        def integer(value: object) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        def number(value: object) -> bool:
            return isinstance(value, (int, float)) and not isinstance(value, bool)

        if not number(self.temperature) or not 0 <= self.temperature < math.inf:
            raise bad("temperature", self.temperature, "a finite number >= 0 (0 means greedy)")
        if not integer(self.top_k) or not 0 <= self.top_k <= INT64_MAX:
            raise bad("top_k", self.top_k, "an integer from 0 to 2**63 - 1 (0 means no top-k)")
        if not number(self.top_p) or not 0.0 < self.top_p <= 1.0:
            raise bad("top_p", self.top_p, "in (0, 1] (1.0 means no top-p)")
        if not integer(self.max_new_tokens) or not 0 <= self.max_new_tokens <= INT64_MAX:
            raise bad("max_new_tokens", self.max_new_tokens, "an integer from 0 to 2**63 - 1")
        if self.seed is not None and (not integer(self.seed) or not 0 <= self.seed <= INT64_MAX):
            raise bad("seed", self.seed, "None or an integer from 0 to 2**63 - 1")
        for name in ("ignore_eos", "logprobs"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, getattr(self, name), "True or False")
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.stop is not None and (
            not isinstance(self.stop, list) or not all(isinstance(s, str) and s for s in self.stop)
        ):
            raise bad("stop", self.stop, "None, a non-empty string or a list of them")

    @property
    def greedy(self) -> bool:
        """The argmax: temperature 0, or one so small that logits / T would overflow."""
        return self.temperature < GREEDY_BELOW


def top_k_filter(logits: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """-inf where a logit is below its row's k-th largest (ties kept); k=0 keeps the row.

    logits: [B, V], k: Long [B].
    """
    V = logits.shape[-1]
    k = torch.where(k <= 0, V, k.clamp(max=V))
    sorted_desc = logits.sort(dim=-1, descending=True).values
    kth = sorted_desc.gather(-1, (k - 1)[:, None])  # [B, 1]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Keep each row's smallest set of most likely tokens whose probability reaches p.

    The token that crosses p is kept, and so is the top token always. logits: [B, V], p: [B].
    """
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # probability mass strictly before each token
    # p = 1.0 keeps everything: a float32 running sum can reach 1.0 before the tail ends.
    drop_sorted = (before >= p[:, None]) & (p < 1.0)[:, None]
    drop_sorted[:, 0] = False
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


class Sampler:
    """Samples one token per row of a [B, V] logits tensor with per-row parameters."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self._shared = torch.Generator(device=self.device)
        self._shared.seed()

    def make_generator(self, seed: int | None) -> torch.Generator | None:
        """A generator for one request's own stream, or None to use the shared one."""
        if seed is None:
            return None
        return torch.Generator(device=self.device).manual_seed(seed)

    def __call__(
        self,
        logits: torch.Tensor,
        params: list[SamplingParams],
        generators: list[torch.Generator | None] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """logits [B, V] -> (tokens Long [B], logprobs float32 [B] of those tokens).

        logprobs are those of the model's own distribution, log_softmax(logits), before
        temperature and truncation.
        """
        B = logits.shape[0]
        generators = generators or [None] * B
        logits = logits.float()
        tokens = logits.argmax(dim=-1)
        sampled = [i for i, sp in enumerate(params) if not sp.greedy]
        if sampled:
            rows = torch.tensor(sampled, device=logits.device)
            sub = logits[rows] / torch.tensor(
                [params[i].temperature for i in sampled], device=logits.device
            )[:, None]
            top_k = [min(params[i].top_k, logits.shape[-1]) for i in sampled]  # k > V is V
            top_p = [params[i].top_p for i in sampled]
            # Both filters sort the whole vocabulary: skip them when no row asks for them.
            if any(k > 0 for k in top_k):
                sub = top_k_filter(sub, torch.tensor(top_k, device=logits.device))
            if any(p < 1.0 for p in top_p):
                sub = top_p_filter(sub, torch.tensor(top_p, device=logits.device,
                                                     dtype=torch.float32))
            probs = sub.softmax(dim=-1)
            # Exponential race: argmax(p / E) with E ~ Exp(1) draws from p. Each row's noise
            # comes from its own generator, so a seeded row ignores what else is in the batch.
            noise = torch.empty_like(probs)
            for j, i in enumerate(sampled):
                noise[j].exponential_(generator=generators[i] or self._shared)
            tokens[rows] = (probs / noise).argmax(dim=-1)
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, None])[:, 0]
        return tokens, logprobs
