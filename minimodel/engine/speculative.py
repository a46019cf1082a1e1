"""Speculative decoding's two pure pieces: proposing draft tokens from a request's own tokens
(prompt lookup, an n-gram drafter), and checking drafts against the target model exactly.

Guess, then check (Leviathan et al. 2023; Chen et al. 2023): a cheap drafter proposes k tokens
d_1..d_k, the target scores all k + 1 positions in one forward (its distributions p_1..p_{k+1}),
and modified rejection sampling keeps a prefix of the drafts and adds one token of its own:

- draft i is accepted with probability min(1, p_i(d_i) / q_i(d_i)), q_i being the drafter's
  distribution (a drafter that proposes one token for sure has q_i(d_i) = 1);
- at the first rejection, the token comes from the residual norm(max(0, p_i - q_i)), and the
  rest of the drafts are dropped;
- if all k are accepted, a bonus token is drawn from p_{k+1}.

Every emitted token then follows the target's distribution exactly, whatever the drafter
proposed; greedy decoding (temperature 0) reduces to "accept while d_i is the target's argmax,
then emit the argmax".
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def ngram_propose(tokens: Sequence[int], k: int, max_n: int = 3, min_n: int = 1) -> list[int]:
    """Prompt lookup: the up to k tokens that followed the latest earlier occurrence of the
    longest suffix of `tokens` (max_n down to min_n tokens) found in `tokens` itself; [] when
    no suffix occurs earlier (vLLM's prompt-lookup drafter). The continuation stops where the
    tokens end, so it may be shorter than k."""
    if k < 1 or min_n < 1 or max_n < min_n:
        raise ValueError(f"need k >= 1 and 1 <= min_n <= max_n, got k={k}, min_n={min_n}, "
                         f"max_n={max_n}.")
    tokens = list(tokens)
    L = len(tokens)
    for n in range(min(max_n, L - 1), min_n - 1, -1):
        suffix = tokens[L - n:]
        for start in range(L - n - 1, -1, -1):  # latest occurrence first, ending before L
            if tokens[start:start + n] == suffix:
                return tokens[start + n:start + n + k]
    return []


def accept_greedy(draft: Sequence[int], target_argmax: Sequence[int]) -> list[int]:
    """Greedy verification: target_argmax[i] is the target's greedy token after the context
    and draft[:i] (len(draft) + 1 entries). The drafts that agree with it, in order, then the
    target's own token where they stop agreeing (or the bonus token after all of them)."""
    if len(target_argmax) != len(draft) + 1:
        raise ValueError(f"target_argmax needs len(draft) + 1 = {len(draft) + 1} entries, got "
                         f"{len(target_argmax)}.")
    out: list[int] = []
    for d, t in zip(draft, target_argmax, strict=False):
        if d != t:
            break
        out.append(d)
    out.append(int(target_argmax[len(out)]))
    return out


def rejection_sample(draft: Sequence[int], draft_probs: torch.Tensor, target_probs: torch.Tensor,
                     generator: torch.Generator | None = None) -> list[int]:
    """Modified rejection sampling: draft [k] token ids, draft_probs [k, V] (the drafter's
    distribution at each draft position; a one-hot row for a drafter that proposes one token
    for sure), target_probs [k + 1, V] -> the accepted drafts and one corrected or bonus token
    (1 to k + 1 tokens), each distributed exactly as the target's."""
    k = len(draft)
    if draft_probs.shape[0] != k or target_probs.shape[0] != k + 1 or \
            draft_probs.shape[1:] != target_probs.shape[1:]:
        raise ValueError(f"draft_probs must be [k, V] and target_probs [k + 1, V] for k = {k} "
                         f"drafts; got {tuple(draft_probs.shape)} and "
                         f"{tuple(target_probs.shape)}.")
    p = target_probs.double()
    q = draft_probs.double()
    out: list[int] = []
    for i, d in enumerate(draft):
        u = torch.rand((), dtype=torch.float64, generator=generator)
        if q[i, d] > 0 and u * q[i, d] <= p[i, d]:  # accept with min(1, p / q)
            out.append(int(d))
            continue
        residual = (p[i] - q[i]).clamp_min(0)
        total = residual.sum()
        dist = residual / total if total > 0 else p[i]  # p == q: rejection cannot happen
        out.append(int(torch.multinomial(dist, 1, generator=generator)))
        return out
    out.append(int(torch.multinomial(p[k], 1, generator=generator)))  # the bonus token
    return out


def expected_tokens_per_step(acceptance: float, k: int) -> float:
    """Tokens a step emits when each draft is accepted independently with probability
    `acceptance`: 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)."""
    if not 0 <= acceptance <= 1 or k < 0:
        raise ValueError(f"need 0 <= acceptance <= 1 and k >= 0, got {acceptance}, {k}.")
    if acceptance == 1:
        return float(k + 1)
    return (1 - acceptance ** (k + 1)) / (1 - acceptance)
