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

import json
import os
from collections.abc import Sequence

import torch

from minimodel.engine.attention import TorchBackend, build_metadata
from minimodel.engine.kv_cache import KVCache, PageAllocator, pages_needed
from minimodel.engine.model import PackedQwen3ForCausalLM
from minimodel.hub import resolve_model

DRAFT_VOCAB = "draft_vocab.json"  # a drafter over a compact vocabulary: its rows' token ids


def ngram_propose(tokens: Sequence[int], k: int, max_n: int = 3, min_n: int = 1) -> list[int]:
    """Prompt lookup: the up to k tokens that followed the earliest earlier occurrence of the
    longest suffix of `tokens` (max_n down to min_n tokens) found in `tokens` itself; [] when
    no suffix occurs earlier (vLLM's prompt-lookup drafter). The earliest occurrence has the
    longest continuation: in a loop (a b a b a b) it proposes the whole loop again. The
    continuation stops where the tokens end, so it may be shorter than k."""
    if k < 1 or min_n < 1 or max_n < min_n:
        raise ValueError(f"need k >= 1 and 1 <= min_n <= max_n, got k={k}, min_n={min_n}, "
                         f"max_n={max_n}.")
    tokens = list(tokens)
    L = len(tokens)
    for n in range(min(max_n, L - 1), min_n - 1, -1):
        suffix = tokens[L - n:]
        for start in range(L - n):  # earliest occurrence first, ending before L
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


class VocabMap:
    """A drafter over a compact vocabulary (`bard-draft`): row i of its embedding and head is
    token ids[i]; its last row S stands for every other id of the target's vocabulary. A head
    over 151,936 ids would cost a draft token as much as a target token; the drafter proposes
    only the ids it has rows for (the others get probability 0, which exact rejection sampling
    allows: the target's own distribution decides what is emitted)."""

    def __init__(self, ids: Sequence[int], target_vocab_size: int,
                 head_rows: Sequence[int] | None = None) -> None:
        self.ids = torch.tensor(list(ids), dtype=torch.int64)  # [S]
        self.target_vocab_size = target_vocab_size
        self.lut = torch.full((target_vocab_size,), len(self.ids), dtype=torch.int64)
        self.lut[self.ids] = torch.arange(len(self.ids))
        # The rows the engine's drafter scores, when the file names them (bard-draft: the ids
        # bard itself writes most often): its head reads those rows only, and proposes only
        # their ids. Reading every embedded id stays possible.
        self.head_rows = (None if head_rows is None
                          else torch.tensor(list(head_rows), dtype=torch.int64))
        rows = [] if self.head_rows is None else self.head_rows.tolist()
        if self.head_rows is not None and not (rows and 0 <= min(rows) and max(rows) < len(ids)):
            raise ValueError(f"head_rows must be rows of the {len(self.ids)} ids (0 to "
                             f"{len(self.ids) - 1}), got {len(rows)} rows"
                             + (f" from {min(rows)} to {max(rows)}." if rows else "."))

    def to_draft(self, ids: torch.Tensor) -> torch.Tensor:
        """Target token ids -> the drafter's rows (unknown ids -> the shared row S)."""
        return self.lut.to(ids.device)[ids]

    def to_target(self, logits: torch.Tensor, ids: torch.Tensor | None = None) -> torch.Tensor:
        """The drafter's logits [b, S + 1] -> logits over the target's vocabulary [b, V]: -inf
        wherever the drafter has no row (the shared class is never proposed). With `ids`, the
        logits [b, len(ids)] are those of a head over those token ids only."""
        out = logits.new_full((logits.shape[0], self.target_vocab_size), float("-inf"))
        if ids is None:
            out[:, self.ids.to(logits.device)] = logits[:, :-1]
        else:
            out[:, ids.to(logits.device)] = logits
        return out


def load_language_model(model: str | os.PathLike[str], dtype: torch.dtype = torch.float32,
                        device: torch.device | str = "cpu", max_positions: int | None = None,
                        ) -> tuple[PackedQwen3ForCausalLM, VocabMap | None]:
    """The engine's model for a name or folder ("bard", "bard-draft", "tiny", a path), and its
    VocabMap when it is a drafter over a compact vocabulary (a `draft_vocab.json` beside it)."""
    folder = resolve_model(model)
    lm = PackedQwen3ForCausalLM.from_pretrained(folder, dtype, device, max_positions)
    vocab = folder / DRAFT_VOCAB
    if not vocab.is_file():
        return lm, None
    spec = json.loads(vocab.read_text())
    return lm, VocabMap(spec["ids"], spec["target_vocab_size"], spec.get("head_rows"))


class CachedLM:
    """One sequence on an engine model over its own paged KV cache: the pieces chapter 13's
    `speculative_step` composes. `tokens` are those whose K/V the cache holds.

        lm = CachedLM.load("bard")
        logits = lm.extend([1, 2, 3])   # [3, V]: the next-token logits after each new token
        lm.truncate(2)                  # forget token 3: its K/V slot goes back with its page
    """

    def __init__(self, model: PackedQwen3ForCausalLM, vocab: VocabMap | None = None,
                 page_size: int = 4, max_tokens: int = 1024) -> None:
        self.model, self.vocab = model, vocab
        device = model.model.embed_tokens.weight.device
        dtype = model.model.embed_tokens.weight.dtype
        self.page_size = page_size
        self.allocator = PageAllocator(pages_needed(max_tokens, page_size))
        self.kv_cache = KVCache(model.cfg, self.allocator.num_pages, page_size, dtype, device,
                                num_kv_heads=model.num_local_heads[1])
        self.backend = TorchBackend(self.kv_cache, model.num_local_heads[0], dtype)
        self.tokens: list[int] = []
        self.page_table: list[int] = []

    @classmethod
    def load(cls, model: str | os.PathLike[str], **kwargs: int) -> CachedLM:
        """The model by name or folder (float32, CPU) on a fresh cache."""
        return cls(*load_language_model(model), **kwargs)

    @property
    def num_cached(self) -> int:
        return len(self.tokens)

    @torch.inference_mode()
    def extend(self, ids: Sequence[int]) -> torch.Tensor:
        """Append `ids` to the cache (one forward) -> float32 logits [len(ids), V] over the
        target vocabulary: row i is the distribution of the token after ids[i]."""
        ids = [int(t) for t in ids]
        if not ids:
            raise ValueError("extend needs at least one token id.")
        total = self.num_cached + len(ids)
        extra = pages_needed(total, self.page_size) - len(self.page_table)
        if extra > self.allocator.num_free:
            raise ValueError(f"{total} tokens do not fit in this CachedLM's cache "
                             f"({self.allocator.num_pages} pages of {self.page_size}); make "
                             "it with a larger max_tokens.")
        if extra > 0:
            self.page_table += self.allocator.allocate(extra)
        device = self.kv_cache.pools[0].device
        metadata = build_metadata([self.page_table], [total], [len(ids)], self.page_size, device)
        x = torch.tensor(ids, dtype=torch.int64, device=device)
        if self.vocab is not None:
            x = self.vocab.to_draft(x)
        self.backend.plan(metadata)
        logits = self.model.compute_logits(self.model(x, metadata.positions, self.backend))
        self.tokens += ids
        logits = logits.float()
        return self.vocab.to_target(logits) if self.vocab is not None else logits

    def truncate(self, n: int) -> None:
        """Keep the K/V of the first n tokens only; pages past them go back to the pool."""
        if not 0 <= n <= self.num_cached:
            raise ValueError(f"truncate(n) needs 0 <= n <= num_cached ({self.num_cached}), "
                             f"got {n}.")
        keep = pages_needed(n, self.page_size)
        self.allocator.free(self.page_table[keep:])
        del self.page_table[keep:]
        del self.tokens[n:]


def probabilities(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(logits / temperature) per row, in float64; temperature 0: one-hot argmax."""
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).double()
    return (logits.double() / temperature).softmax(-1)


def speculative_step(target: CachedLM, draft: CachedLM, tokens: Sequence[int], k: int,
                     temperature: float = 0.0,
                     generator: torch.Generator | None = None) -> list[int]:
    """One round of speculative decoding for one sequence: the draft proposes k tokens after
    `tokens`, the target scores all k + 1 positions in one forward, and greedy verification
    (temperature 0) or rejection sampling keeps a prefix of the drafts plus one token of the
    target's. Returns the 1 .. k + 1 new tokens. Both caches then hold exactly the K/V of
    tokens + new[:-1] (or fewer, for the draft): a rejected draft's K/V is given back.

    Each cache must hold a prefix of `tokens` shorter than it (both empty at the start)."""
    tokens = list(tokens)
    for lm in (target, draft):
        if lm.num_cached >= len(tokens) or lm.tokens != tokens[:lm.num_cached]:
            raise ValueError("each cache must hold a prefix of tokens, shorter than tokens.")
    # 1. the draft catches up and proposes k tokens, one forward each
    drafts: list[int] = []
    q_rows = []
    feed = tokens[draft.num_cached:]
    for _ in range(k):
        q = probabilities(draft.extend(feed)[-1:], temperature)[0]
        d = int(q.argmax()) if temperature == 0 else int(
            torch.multinomial(q, 1, generator=generator))
        drafts.append(d)
        q_rows.append(q)
        feed = [d]
    # 2. the target checks every draft in one forward: k + 1 distributions
    p = probabilities(target.extend(tokens[target.num_cached:] + drafts)[-(k + 1):],
                      temperature)
    # 3. accept a prefix, add one token of the target's
    if temperature == 0:
        new = accept_greedy(drafts, p.argmax(-1).tolist())
    else:
        new = rejection_sample(drafts, torch.stack(q_rows), p, generator)
    # 4. roll back: keep the K/V of tokens + new[:-1] only
    keep = len(tokens) + len(new) - 1
    target.truncate(keep)
    draft.truncate(min(draft.num_cached, keep))
    return new
