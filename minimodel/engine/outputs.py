"""What the engine hands back for a finished request: RequestOutput, in vLLM's shape.

`RequestOutput` keeps flat fields (`out.text`, `out.token_ids`) and also gives `out.outputs`,
a list of `CompletionOutput` with per-token `{id: Logprob}`, so that code written for vLLM's
offline API runs. `RequestMetrics` are one request's times and sizes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RequestMetrics:
    """Timing and sizes of one request (seconds, tokens)."""

    ttft_s: float  # arrival -> first generated token
    tpot_s: float  # mean time per output token after the first
    e2e_s: float  # arrival -> finish
    prompt_tokens: int
    generated_tokens: int
    num_preemptions: int
    cached_tokens: int = 0  # prompt tokens the prefix cache held when it was first admitted
    # Speculative decoding: draft tokens the model checked for this request, how many it
    # accepted, and the engine steps that gave the request tokens.
    draft_tokens: int = 0
    accepted_tokens: int = 0
    steps: int = 0

    @property
    def acceptance_rate(self) -> float:
        """Accepted / checked draft tokens (0 without drafts)."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def tokens_per_step(self) -> float:
        """Generated tokens per step that gave this request tokens (1 without speculation)."""
        return self.generated_tokens / self.steps if self.steps else 0.0


@dataclass
class Logprob:
    """One token's log-probability in a completion's `logprobs` (vLLM's `Logprob`): `rank` is
    its place among the request's top-N alternatives (1 = most likely), None when the chosen
    token was not among them."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    """One completion of a request, in vLLM's shape: `out.outputs[0].text`."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None  # per token: {token id: Logprob}, the chosen one
    finish_reason: str  # too, and the top-N alternatives with params.logprobs = N
    stop_reason: int | str | None


@dataclass
class RequestOutput:
    """The result of one request. Its fields are flat (`out.text`); `out.outputs[0]` holds
    the same completion in vLLM's shape, so code written for vLLM's offline API runs."""

    request_id: int
    prompt_token_ids: list[int]
    token_ids: list[int]  # generated ids only; EOS included when it ended the request
    # The generated text ("" without a tokenizer), as vLLM makes it: special tokens left out
    # (params.skip_special_tokens), and neither the EOS / stop token nor the stop string that
    # ended the request in it (unless params.include_stop_str_in_output).
    text: str
    finish_reason: str  # "stop" (EOS, a stop token or a stop string) | "length" | "abort"
    logprobs: list[float] | None  # log p of each generated token, with params.logprobs
    metrics: RequestMetrics
    # With params.logprobs = N: per generated token, the N most likely tokens and the chosen
    # one (N + 1 entries when it is not among them) as (token id, log p), most likely first.
    # Like `logprobs`, the model's own distribution (vLLM's "raw_logprobs"), before penalties,
    # temperature and truncation.
    top_logprobs: list[list[tuple[int, float]]] | None = None
    # What ended it, as vLLM says: the stop string or the stop_token_ids entry; None when EOS
    # ended it or it reached its length.
    stop_reason: int | str | None = None

    @property
    def finished(self) -> bool:
        return True  # an LLM hands out a RequestOutput only when the request has ended

    @property
    def outputs(self) -> list[CompletionOutput]:
        """The completion in vLLM's shape (one per request here: n > 1 is n requests)."""
        per_token = None
        if self.logprobs is not None:
            per_token = []
            for i, (tok, lp) in enumerate(zip(self.token_ids, self.logprobs)):
                alts = self.top_logprobs[i] if self.top_logprobs is not None else []
                entry = {t: Logprob(v, rank) for rank, (t, v) in enumerate(alts, 1)}
                entry.setdefault(tok, Logprob(lp))
                per_token.append(entry)
        return [CompletionOutput(
            index=0, text=self.text, token_ids=self.token_ids,
            cumulative_logprob=sum(self.logprobs) if self.logprobs is not None else None,
            logprobs=per_token, finish_reason=self.finish_reason, stop_reason=self.stop_reason)]
