"""Turning logits into tokens: SamplingParams and one batched sampler for every request.

The parameters and their meanings are vLLM's (and, for the penalties, the OpenAI API's).
Order of operations, per request, as in vLLM's sampler:

1. min_tokens: EOS and stop_token_ids get -inf until min_tokens tokens were generated;
2. penalties on the raw logits: repetition (prompt and output tokens), then frequency and
   presence (output tokens only);
3. greedy requests take the argmax here; the others go on:
4. temperature, then min_p, then top-k, then top-p, then the draw.

temperature=0 is greedy, and so is any temperature below GREEDY_BELOW (dividing logits by
1e-38 overflows to inf, and softmax of inf is NaN: such a temperature means "the most likely
token"). Each request may carry its own parameters and seed; a seeded request draws from its
own generator, and every step above works on its own row, so a request gets the same tokens
alone or inside any batch.

The log-probabilities reported are vLLM's default ("raw_logprobs"): log_softmax of the model's
own logits, before min_tokens, penalties, temperature and truncation.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import InitVar, dataclass
from typing import Protocol

import torch

GREEDY_BELOW = 1e-5  # temperatures under this are greedy (the same threshold as vLLM's)
INT64_MAX = 2**63 - 1  # integer fields must fit the int64 tensors and generators they reach
INT64_MIN = -(2**63)
DEFAULT_MAX_TOKENS = 16  # vLLM's default too
PENALTY_LIMIT = 2.0  # presence_penalty and frequency_penalty lie in [-2, 2] (OpenAI's range)


@dataclass
class SamplingParams:
    """How to pick the next tokens of one request, and when to stop (vLLM's fields).

    temperature: 0 (or below 1e-5) = greedy; higher = flatter distribution.
    top_k: keep the k most likely tokens; 0 or -1 = no limit.
    top_p: keep the smallest set of most likely tokens whose probability reaches top_p.
    max_tokens: generated tokens at most (EOS included); default 16. `max_new_tokens` is the
        same value under its older name: pass either one (not both); both attributes read it.
    stop: strings that end the request when the text contains one (cut before it).
    seed: the request's own random stream: any int64, negative too.
    ignore_eos: keep going past EOS (stop_token_ids still stop).
    logprobs: None = no log-probabilities; N >= 0 = the log-probability of each generated
        token and of the N most likely tokens at that step (RequestOutput.top_logprobs).
        True and False are accepted for backward compatibility: True is 0, False is None.
    min_tokens: EOS and stop_token_ids cannot be drawn, and stop strings do not end the
        request, before this many tokens were generated.
    min_p: drop tokens whose probability (after temperature) is below min_p times the most
        likely token's; 0 = off.
    repetition_penalty: for every token in the prompt or the output so far, a logit l becomes
        l / penalty if l > 0 else l * penalty; 1.0 = off, > 1 discourages repeats.
    presence_penalty, frequency_penalty: over the output tokens so far, a token seen c times
        has its logit lowered by presence * (c > 0) + frequency * c; 0 = off; in [-2, 2].
    stop_token_ids: token ids that end the request like EOS (finish_reason "stop"); the token
        is kept in token_ids but not in the text.
    skip_special_tokens: leave control tokens (<|im_end|>, <|endoftext|>) out of the text;
        True by default, as vLLM. Qwen3's <think> and tool-call tags are not special: they stay.
    include_stop_str_in_output: keep the stop string, or the text of the EOS / stop_token_ids
        token, that ended the request at the end of the text (vLLM's switch; off by default:
        what ended the request is in finish_reason and stop_reason, not in the text).
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    max_tokens: int | None = None  # None: DEFAULT_MAX_TOKENS (or max_new_tokens when given)
    stop: list[str] | str | None = None
    seed: int | None = None
    ignore_eos: bool = False
    logprobs: int | bool | None = None
    min_tokens: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    max_new_tokens: InitVar[int | None] = None  # the older name of max_tokens (keyword only)

    def __post_init__(self, max_new_tokens: int | None) -> None:
        if max_new_tokens is not None:
            if self.max_tokens is not None:
                raise ValueError(
                    f"SamplingParams got both max_tokens={self.max_tokens!r} and "
                    f"max_new_tokens={max_new_tokens!r}: they are one setting under two names; "
                    "pass only one of them (max_tokens is vLLM's and OpenAI's name)."
                )
            if not _is_int(max_new_tokens) or not 0 <= max_new_tokens <= INT64_MAX:
                raise ValueError(
                    f"SamplingParams.max_new_tokens must be an integer from 0 to 2**63 - 1 "
                    f"(it is max_tokens under its older name), got {max_new_tokens!r}.")
            self.max_tokens = max_new_tokens
        elif self.max_tokens is None:
            self.max_tokens = DEFAULT_MAX_TOKENS
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the field and its range if a value is invalid.

        Runs on construction; the engine runs it again when a request is submitted, since a
        dataclass field can be changed after construction. Nothing is changed unless every
        field is valid (then a single stop string becomes a list, stop_token_ids a list).
        """

        def bad(field: str, value: object, rule: str) -> ValueError:
            return ValueError(f"SamplingParams.{field} must be {rule}, got {value!r}.")

        integer = _is_int

        def number(value: object) -> bool:
            return isinstance(value, (int, float)) and not isinstance(value, bool)

        def finite(value: object) -> bool:
            return number(value) and math.isfinite(value)  # type: ignore[arg-type]

        if not finite(self.temperature) or self.temperature < 0:
            raise bad("temperature", self.temperature, "a finite number >= 0 (0 means greedy)")
        if not integer(self.top_k) or not -1 <= self.top_k <= INT64_MAX:
            raise bad("top_k", self.top_k,
                      "an integer from -1 to 2**63 - 1 (0 or -1 means no top-k)")
        if not number(self.top_p) or not 0.0 < self.top_p <= 1.0:
            raise bad("top_p", self.top_p, "in (0, 1] (1.0 means no top-p)")
        if not integer(self.max_tokens) or not 0 <= self.max_tokens <= INT64_MAX:
            raise bad("max_tokens", self.max_tokens,
                      "an integer from 0 to 2**63 - 1 (max_new_tokens is the same setting)")
        if self.seed is not None and (not integer(self.seed)
                                      or not INT64_MIN <= self.seed <= INT64_MAX):
            raise bad("seed", self.seed, "None or an integer from -2**63 to 2**63 - 1")
        for name in ("ignore_eos", "skip_special_tokens", "include_stop_str_in_output"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, getattr(self, name), "True or False")
        if self.logprobs is not None and not isinstance(self.logprobs, bool) and not (
                integer(self.logprobs) and 0 <= self.logprobs <= INT64_MAX):
            raise bad("logprobs", self.logprobs,
                      "None (none), or an integer N >= 0: the chosen token's log-probability "
                      "and the N most likely tokens' (True means 0, False means None)")
        if not integer(self.min_tokens) or not 0 <= self.min_tokens <= self.max_tokens:
            raise bad("min_tokens", self.min_tokens,
                      f"an integer from 0 to max_tokens (= {self.max_tokens!r})")
        if not number(self.min_p) or not 0.0 <= self.min_p <= 1.0:
            raise bad("min_p", self.min_p, "in [0, 1] (0 means no min-p)")
        if not finite(self.repetition_penalty) or self.repetition_penalty <= 0:
            raise bad("repetition_penalty", self.repetition_penalty,
                      "a finite number > 0 (1.0 means no penalty, > 1 discourages repeats)")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not number(value) or not -PENALTY_LIMIT <= value <= PENALTY_LIMIT:
                raise bad(name, value, "a number in [-2, 2] (0 means no penalty)")
        stop = [self.stop] if isinstance(self.stop, str) else self.stop
        if stop is not None and (
            not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop)
        ):
            raise bad("stop", self.stop, "None, a non-empty string or a list of them")
        ids = self.stop_token_ids
        if ids is not None and (not isinstance(ids, (list, tuple)) or not all(
                integer(t) and 0 <= t <= INT64_MAX for t in ids)):
            raise bad("stop_token_ids", ids, "None or a list of token ids (integers >= 0)")
        # Every field is valid: normalise.
        self.stop = stop
        if ids is not None:
            self.stop_token_ids = list(ids)

    @property
    def greedy(self) -> bool:
        """The argmax: temperature 0, or one so small that logits / T would overflow."""
        return self.temperature < GREEDY_BELOW

    @property
    def num_logprobs(self) -> int | None:
        """`logprobs` as vLLM reads it: None (none wanted) or N alternatives (True is 0)."""
        if self.logprobs is None or self.logprobs is False:
            return None
        return 0 if self.logprobs is True else int(self.logprobs)

    @property
    def has_penalties(self) -> bool:
        return (self.repetition_penalty != 1.0 or self.presence_penalty != 0.0
                or self.frequency_penalty != 0.0)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _get_max_new_tokens(self: SamplingParams) -> int:
    return self.max_tokens  # type: ignore[return-value]


def _set_max_new_tokens(self: SamplingParams, value: int) -> None:
    self.max_tokens = value


# The alias as an attribute: reading or setting max_new_tokens reads or sets max_tokens. (Set
# after the class is built, so that the dataclass still takes max_new_tokens= as an argument.)
SamplingParams.max_new_tokens = property(  # type: ignore[assignment]
    _get_max_new_tokens, _set_max_new_tokens, doc="The older name of max_tokens.")


class History(Protocol):
    """What the sampler reads of a request for min_tokens and the penalties (a Sequence)."""

    token_ids: list[int]  # prompt + generated so far
    num_prompt_tokens: int


TopLogprobs = list[tuple[int, float]]  # (token id, log-probability), most likely first


ARGMAX_CHUNK = 1024  # columns per chunk of argmax's two-pass search
ARGMAX_TWO_PASS_FROM = 32 * 1024  # narrower rows: torch's argmax is as fast (measured)


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """torch.argmax(logits, dim=-1) of a 2-D tensor [B, V], the same indices (the first of
    equal maxima; a NaN counts as the largest, as in torch), found faster on a CPU.

    torch's CPU argmax walks a row one element at a time (about 0.15 ms over 151,936 logits,
    each step pays it per sampled row), while its max (amax) is vectorised. So: the max of each
    chunk of ARGMAX_CHUNK columns (the last chunk ends at the row's end and may overlap the one
    before it), the first chunk that holds the row's max, then torch's argmax inside that
    chunk only. The first chunk holding a maximum holds the first maximum: chunks before it
    cover only earlier columns."""
    if logits.dim() != 2 or logits.device.type != "cpu" or \
            logits.shape[-1] < ARGMAX_TWO_PASS_FROM:
        return logits.argmax(dim=-1)
    B, V = logits.shape
    L, n = ARGMAX_CHUNK, V // ARGMAX_CHUNK
    chunk_max = logits.unfold(-1, L, L).amax(dim=-1)  # [B, n]
    if V % L:
        chunk_max = torch.cat([chunk_max, logits[:, V - L:].amax(dim=-1, keepdim=True)], dim=-1)
    chunk = chunk_max.argmax(dim=-1)  # [B]
    start = torch.where(chunk < n, chunk * L, V - L)  # [B]
    cols = start[:, None] + torch.arange(L, device=logits.device)  # [B, L]
    return start + logits.gather(-1, cols).argmax(dim=-1)


def top_k_filter(logits: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """-inf where a logit is below its row's k-th largest (ties kept); k <= 0 keeps the row.

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


def min_p_filter(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """-inf where a token's probability is below min_p times its row's top probability.

    logits: [B, V] (after temperature), min_p: [B]; min_p = 0 keeps the row.
    """
    probs = logits.softmax(dim=-1)
    threshold = min_p[:, None] * probs.max(dim=-1, keepdim=True).values
    return logits.masked_fill(probs < threshold, float("-inf"))


def truncate(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """The logits [n, V] each row (one SamplingParams per row, none greedy) is drawn from:
    divided by its temperature, then min_p, top_k and top_p, in that order (-inf where a
    filter drops a token). The Sampler and speculative decoding's checks share it."""
    V = logits.shape[-1]

    def column(name: str) -> torch.Tensor:
        return torch.tensor([getattr(sp, name) for sp in params], device=logits.device,
                            dtype=torch.float32)

    sub = logits / column("temperature")[:, None]
    if any(sp.min_p > 0 for sp in params):
        sub = min_p_filter(sub, column("min_p"))
    top_k = [min(sp.top_k, V) for sp in params]  # k > V is V; <= 0 is off
    # Both filters sort the whole vocabulary: skip them when no row asks for them.
    if any(k > 0 for k in top_k):
        sub = top_k_filter(sub, torch.tensor(top_k, device=logits.device))
    if any(sp.top_p < 1.0 for sp in params):
        sub = top_p_filter(sub, column("top_p"))
    return sub


def apply_penalties(
    logits: torch.Tensor,
    seen: torch.Tensor,
    counts: torch.Tensor,
    repetition: torch.Tensor,
    frequency: torch.Tensor,
    presence: torch.Tensor,
) -> torch.Tensor:
    """vLLM's penalties on raw logits [B, V], one row per request.

    seen: bool [B, V], the token is in the prompt or the output; counts: [B, V], how often it
    is in the output. repetition [B]: a seen token's logit l becomes l / r if l > 0 else l * r.
    Then frequency and presence [B]: l - frequency * count - presence * (count > 0).
    """
    r = repetition[:, None]
    logits = torch.where(seen, torch.where(logits > 0, logits / r, logits * r), logits)
    logits = logits - frequency[:, None] * counts
    return logits - presence[:, None] * (counts > 0).to(logits.dtype)


class Sampler:
    """Samples one token per row of a [B, V] logits tensor with per-row parameters.

    min_tokens and the penalties need each request's tokens: pass `rows` (one History per row)
    or call inside `with sampler.batch(rows):`. `eos_token_ids` (set by the engine) are the
    tokens min_tokens holds back besides each request's stop_token_ids. After a call,
    `last_top_logprobs[i]` holds row i's most likely tokens when its params ask for logprobs.
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self._shared = torch.Generator(device=self.device)
        self._shared.seed()
        self.eos_token_ids: set[int] = set()
        self._rows: Sequence[History] | None = None
        self.last_top_logprobs: list[TopLogprobs | None] = []

    def make_generator(self, seed: int | None) -> torch.Generator | None:
        """A generator for one request's own stream, or None to use the shared one."""
        if seed is None:
            return None
        return torch.Generator(device=self.device).manual_seed(seed)

    @contextmanager
    def batch(self, rows: Sequence[History]) -> Iterator[None]:
        """Calls inside sample the rows of `rows`, in order (the engine's sampled requests)."""
        self._rows, self.last_top_logprobs = rows, []
        try:
            yield
        finally:
            self._rows = None

    def __call__(
        self,
        logits: torch.Tensor,
        params: list[SamplingParams],
        generators: list[torch.Generator | None] | None = None,
        rows: Sequence[History] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """logits [B, V] -> (tokens Long [B], logprobs float32 [B] of those tokens).

        logprobs are vLLM's default "raw_logprobs": those of the model's own distribution,
        log_softmax(logits), before min_tokens, penalties, temperature and truncation. The
        same distribution gives `last_top_logprobs`.
        """
        B, V = logits.shape
        generators = generators or [None] * B
        rows = rows if rows is not None else self._rows
        raw = logits.float()
        logits = self._mask_and_penalise(raw, params, rows)
        tokens = argmax(logits)
        sampled = [i for i, sp in enumerate(params) if not sp.greedy]
        if sampled:
            idx = torch.tensor(sampled, device=logits.device)
            probs = truncate(logits[idx], [params[i] for i in sampled]).softmax(dim=-1)
            # Exponential race: argmax(p / E) with E ~ Exp(1) draws from p. Each row's noise
            # comes from its own generator, so a seeded row ignores what else is in the batch.
            noise = torch.empty_like(probs)
            for j, i in enumerate(sampled):
                noise[j].exponential_(generator=generators[i] or self._shared)
            tokens[idx] = argmax(probs / noise)
        raw_logprobs = torch.log_softmax(raw, dim=-1)
        chosen = raw_logprobs.gather(-1, tokens[:, None])[:, 0]
        self.last_top_logprobs = [
            None if sp.num_logprobs is None
            else _top_logprobs(raw_logprobs[i], int(tokens[i]), float(chosen[i]), sp.num_logprobs)
            for i, sp in enumerate(params)
        ]
        return tokens, chosen

    def _mask_and_penalise(
        self, logits: torch.Tensor, params: list[SamplingParams],
        rows: Sequence[History] | None,
    ) -> torch.Tensor:
        """The logits after min_tokens' mask and the penalties (a copy when either applies)."""
        B, V = logits.shape
        early = [i for i, sp in enumerate(params) if sp.min_tokens > 0]
        penalised = [i for i, sp in enumerate(params) if sp.has_penalties]
        if not early and not penalised:
            return logits
        if rows is None or len(rows) != B:
            raise ValueError(
                "min_tokens and the penalties need each request's tokens: pass rows= (one per "
                f"row of logits, {B} rows) or sample inside `with sampler.batch(rows):`; got "
                f"{'none' if rows is None else len(rows)}.")
        logits = logits.clone()
        for i in early:
            sp, row = params[i], rows[i]
            if len(row.token_ids) - row.num_prompt_tokens < sp.min_tokens:
                stop = set(sp.stop_token_ids or ()) | (set() if sp.ignore_eos
                                                       else self.eos_token_ids)
                ids = [t for t in stop if 0 <= t < V]
                if ids:
                    logits[i, torch.tensor(ids, device=logits.device)] = float("-inf")
        if penalised:
            seen = torch.zeros(len(penalised), V, dtype=torch.bool, device=logits.device)
            counts = torch.zeros(len(penalised), V, dtype=logits.dtype, device=logits.device)
            for j, i in enumerate(penalised):
                ids = torch.tensor(rows[i].token_ids, dtype=torch.int64, device=logits.device)
                seen[j, ids] = True
                out = ids[rows[i].num_prompt_tokens:]
                counts[j].index_add_(0, out, torch.ones_like(out, dtype=logits.dtype))

            def column(name: str) -> torch.Tensor:
                return torch.tensor([getattr(params[i], name) for i in penalised],
                                    device=logits.device, dtype=logits.dtype)

            idx = torch.tensor(penalised, device=logits.device)
            logits[idx] = apply_penalties(
                logits[idx], seen, counts, column("repetition_penalty"),
                column("frequency_penalty"), column("presence_penalty"))
        return logits


def _top_logprobs(row: torch.Tensor, token: int, logprob: float, n: int) -> TopLogprobs:
    """The n most likely tokens of one row of log-probabilities, and the chosen one if it is
    not among them (vLLM and OpenAI: up to n + 1 entries); most likely first, ties by id."""
    top: dict[int, float] = {}
    if n > 0:
        values, ids = row.topk(min(n, row.shape[-1]))
        top = dict(zip(ids.tolist(), values.tolist(), strict=True))
    top.setdefault(token, logprob)
    return sorted(top.items(), key=lambda item: (-item[1], item[0]))
