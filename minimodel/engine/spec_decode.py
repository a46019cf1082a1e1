"""Speculative decoding in the engine: drafters, and the step that checks their guesses.

`LLM(..., speculative_model="ngram" | <a model>, num_speculative_tokens=k)`. Prefill steps run
as always (a draft model also prefills the same tokens, into its own pool). A decode step:

1. draft: each running request gets up to k draft tokens, where its params allow (no
   penalties, min_tokens reached) and free pages hold them; the n-gram drafter looks them up in
   the request's own tokens, a draft model proposes them one forward at a time;
2. verify: the target scores every request's last token and its drafts in one forward, a
   small prefill of 1 + k_i tokens per request over the paged cache;
3. accept: greedy verification or modified rejection sampling (engine/speculative.py) keeps a
   prefix of the drafts and adds one token of the target's, so what is emitted follows the
   target's distribution exactly; the tokens are appended one by one (EOS, stop tokens, stop
   strings and max_tokens may end the run early), and the pages that only hold rejected
   tokens' K/V go back to the pool (page-table truncation).

A draft model's pool mirrors the target's page for page: the same page ids, its own K/V. So
one page table serves both, a truncation gives back both, and a page in the prefix cache holds
both models' K/V of its tokens (`Sequence.num_shareable_tokens`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from minimodel.engine.attention import TorchBackend, build_metadata
from minimodel.engine.kv_cache import KVCache
from minimodel.engine.lean_decode import LeanDecoder
from minimodel.engine.runner import ModelRunner
from minimodel.engine.scheduler import ScheduledBatch, Scheduler
from minimodel.engine.sequence import Sequence
from minimodel.engine.speculative import (
    accept_greedy,
    load_language_model,
    ngram_propose,
    rejection_sample,
)
from minimodel.sampling import SamplingParams, _top_logprobs, argmax, truncate

if TYPE_CHECKING:
    from minimodel.engine.config import EngineConfig

NGRAM = "ngram"


def target_probs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """The distribution each row is sampled from, as the Sampler builds it (temperature, then
    min_p, top_k, top_p; no penalties or min_tokens: requests with those get no drafts):
    float64 [n, V]; a greedy row is one-hot at its argmax."""
    out = torch.empty(logits.shape, dtype=torch.float64, device=logits.device)
    greedy = [i for i, sp in enumerate(params) if sp.greedy]
    if greedy:
        idx = torch.tensor(greedy, device=logits.device)
        out[idx] = torch.nn.functional.one_hot(argmax(logits[idx]),
                                               logits.shape[-1]).double()
    sampled = [i for i, sp in enumerate(params) if not sp.greedy]
    if sampled:
        idx = torch.tensor(sampled, device=logits.device)
        sub = truncate(logits[idx].float(), [params[i] for i in sampled])
        out[idx] = sub.double().softmax(-1)
    return out


def can_draft(seq: Sequence) -> bool:
    """Can this request's next tokens be drafted and checked exactly? Not while min_tokens
    still holds EOS back, nor with penalties (both change the distribution token by token)."""
    return not seq.params.has_penalties and seq.num_output_tokens >= seq.params.min_tokens


class NgramDrafter:
    """Prompt lookup: the continuation of the latest earlier occurrence of the request's last
    1-3 tokens, in its own tokens. Proposes each token for sure (q = 1 at the draft)."""

    name = NGRAM

    def prefill(self, batch: ScheduledBatch, runner: ModelRunner) -> None:
        """Nothing to compute: the drafter reads the request's tokens."""

    def propose(self, seqs: list[Sequence], ks: list[int]
                ) -> tuple[list[list[int]], list[torch.Tensor | None]]:
        drafts = [ngram_propose(s.token_ids, k) if k > 0 else [] for s, k in zip(seqs, ks,
                                                                                  strict=True)]
        return drafts, [None] * len(seqs)

    def after_verify(self, seq: Sequence, num_written: int, num_kept: int) -> None:
        """Nothing cached."""


class ModelDrafter:
    """A smaller model with the target's tokenizer, over its own pool that mirrors the target's
    pages. It prefills with the target; in a decode step it first catches up on the tokens it
    has not seen (1 or 2, or more after steps without drafts), then proposes one token per
    forward, sampled from its own distribution under the request's sampling settings."""

    def __init__(self, config: EngineConfig) -> None:
        assert config.speculative_model is not None
        self.name = config.speculative_model
        self.model, self.vocab = load_language_model(
            config.speculative_model, config.dtype, config.device,
            max_positions=config.max_model_len)
        heads, kv_heads = self.model.num_local_heads
        self.kv_cache = KVCache(self.model.cfg, config.num_pages + config.reserved_pages,
                                config.page_size, config.dtype, config.device,
                                num_kv_heads=kv_heads)
        self.backend = TorchBackend(self.kv_cache, heads, config.dtype)
        self.page_size = config.page_size
        # A drafter whose file names its head rows scores only those: [C, K] instead of its
        # whole table, and K token ids to propose from (bard-draft: 4,096 of 24,587 rows).
        self.head: torch.Tensor | None = None
        self.head_ids: torch.Tensor | None = None
        if self.vocab is not None and self.vocab.head_rows is not None:
            rows = self.vocab.head_rows.to(config.device)
            self.head = self.model.lm_head.weight[rows].t().contiguous()  # [C, K]: x @ head
            self.head_ids = self.vocab.ids.to(config.device)[rows]
        # A decode forward (one token per request) runs the lean step (engine/lean_decode.py):
        # a draft model this small is bound by its count of tensor ops, run k times a step.
        self.lean = LeanDecoder(self.model, self.kv_cache)

    @torch.inference_mode()
    def _forward(self, seqs: list[Sequence], ids: list[list[int]], kv_lens: list[int],
                 logits: bool) -> torch.Tensor | None:
        """Write the K/V of ids[i] (ending at kv_lens[i]) into the pool; with `logits`, the
        draft's own logits [len(seqs), V'] of each request's last new token."""
        device = self.kv_cache.pools[0].device
        tables = [s.page_table for s in seqs]
        x = torch.tensor([t for i in ids for t in i], dtype=torch.int64, device=device)
        if self.vocab is not None:
            x = self.vocab.to_draft(x)
        if logits and (len(ids) == 1 or all(len(i) == 1 for i in ids)):
            last = self.lean.decode(x, tables, kv_lens)[-len(ids):]  # each request's last
        else:
            metadata = build_metadata(tables, kv_lens, [len(i) for i in ids], self.page_size,
                                      device)
            self.backend.plan(metadata)
            hidden = self.model(x, metadata.positions, self.backend)
            if not logits:
                return None
            last = hidden[metadata.qo_indptr[1:].long() - 1]
        if self.head is not None:
            return (last @ self.head).float()
        return self.model.compute_logits(last).float()

    def _greedy(self, logits: torch.Tensor) -> list[int]:
        """The draft's most likely token ids (never the shared class of a compact draft)."""
        if self.vocab is None:
            return argmax(logits).tolist()
        if self.head_ids is not None:
            return self.head_ids[argmax(logits)].tolist()
        return self.vocab.ids.to(logits.device)[argmax(logits[:, :-1])].tolist()

    def prefill(self, batch: ScheduledBatch, runner: ModelRunner) -> None:
        """The same tokens as the target's prefill step, into the same page slots."""
        ids, kv_lens = [], []
        for seq, q_len in zip(batch.seqs, batch.q_lens, strict=True):
            start = seq.num_cached_tokens
            ids.append(seq.token_ids[start:start + q_len])
            kv_lens.append(start + q_len)
            seq.num_draft_cached = start + q_len
        self._forward(batch.seqs, ids, kv_lens, logits=False)

    def propose(self, seqs: list[Sequence], ks: list[int]
                ) -> tuple[list[list[int]], list[torch.Tensor | None]]:
        drafts: list[list[int]] = [[] for _ in seqs]
        probs: list[list[torch.Tensor]] = [[] for _ in seqs]
        active = [i for i, k in enumerate(ks) if k > 0]
        feed = {i: seqs[i].token_ids[seqs[i].num_draft_cached:] for i in active}
        for j in range(max(ks, default=0)):
            active = [i for i in active if ks[i] > j]
            if not active:
                break
            batch = [seqs[i] for i in active]
            kv_lens = [seqs[i].num_tokens + j for i in active]
            logits = self._forward(batch, [feed[i] for i in active], kv_lens, logits=True)
            assert logits is not None
            greedy = self._greedy(logits)  # a greedy request's draft needs no distribution
            sampled = [row for row, i in enumerate(active) if not seqs[i].params.greedy]
            q = None
            if sampled:
                full = logits[sampled]
                if self.vocab is not None:
                    full = self.vocab.to_target(full, self.head_ids)
                q = target_probs(full, [seqs[active[row]].params for row in sampled])
            for row, i in enumerate(active):
                if seqs[i].params.greedy:
                    d = greedy[row]
                else:
                    q_row = q[sampled.index(row)]  # type: ignore[index]
                    d = int(torch.multinomial(q_row, 1, generator=seqs[i].generator))
                    probs[i].append(q_row)
                drafts[i].append(d)
                feed[i] = [d]
        return drafts, [torch.stack(p) if p else None for p in probs]

    def after_verify(self, seq: Sequence, num_written: int, num_kept: int) -> None:
        """The draft wrote the K/V of the first num_written tokens; the target keeps the
        first num_kept (its accepted run): the draft's valid K/V are the fewer of the two."""
        seq.num_draft_cached = min(num_written, num_kept)


class SpeculativeDecoder:
    """The engine's decode step with speculation (see the module's docstring)."""

    def __init__(self, config: EngineConfig, runner: ModelRunner, scheduler: Scheduler) -> None:
        self.k = config.num_speculative_tokens
        self.runner, self.scheduler = runner, scheduler
        self.max_model_len = config.max_model_len
        self.drafter: NgramDrafter | ModelDrafter = (
            NgramDrafter() if config.speculative_model == NGRAM else ModelDrafter(config))
        self.stats = {"draft_tokens": 0, "accepted_tokens": 0, "verify_rows": 0,
                      "emitted_tokens": 0, "draft_s": 0.0, "verify_s": 0.0, "accept_s": 0.0}

    def budget(self, seq: Sequence) -> int:
        """How many drafts seq may get this step: k, fewer near max_tokens or the context
        limit, 0 when its params cannot be checked exactly or no free page holds them."""
        if not can_draft(seq):
            return 0
        k = min(self.k, seq.params.max_tokens - seq.num_output_tokens - 1,
                self.max_model_len - seq.num_tokens)
        if k <= 0 or not self.scheduler.reserve(seq, seq.num_tokens + k):
            return 0
        return k

    def prefill(self, batch: ScheduledBatch, run: Callable[[ScheduledBatch], None]) -> None:
        """A prefill step: the drafter sees the same tokens, then the target runs as always."""
        self.drafter.prefill(batch, self.runner)
        run(batch)

    @torch.inference_mode()
    def decode(self, batch: ScheduledBatch) -> None:
        """Draft, verify in one forward, accept, roll back (see the module's docstring)."""
        t0 = time.perf_counter()
        seqs = batch.seqs
        ks = [self.budget(s) for s in seqs]
        drafts, draft_probs = self.drafter.propose(seqs, ks)
        t1 = time.perf_counter()
        q_lens = [1 + len(d) for d in drafts]
        device = self.runner.device
        ids = [t for s, d in zip(seqs, drafts, strict=True) for t in [s.token_ids[-1], *d]]
        metadata = build_metadata([s.page_table for s in seqs],
                                  [s.num_tokens + len(d) for s, d in zip(seqs, drafts,
                                                                         strict=True)],
                                  q_lens, self.runner.kv_cache.page_size, device)
        logits = self.runner.compute(torch.tensor(ids, dtype=torch.int64, device=device),
                                     metadata, list(range(len(ids))))
        assert logits is not None
        raw = logits.float()
        t2 = time.perf_counter()
        starts = metadata.qo_indptr.tolist()
        plain = [i for i, d in enumerate(drafts) if not d]
        results: dict[int, tuple[list[int], list[float], list]] = {}
        if plain:  # no drafts: the step is an ordinary decode step for these requests
            sampler = self.runner.sampler
            rows = [seqs[i] for i in plain]
            with sampler.batch(rows):
                tokens, lps = sampler(raw[[starts[i] for i in plain]],
                                      [s.params for s in rows], [s.generator for s in rows])
            for j, i in enumerate(plain):
                results[i] = ([int(tokens[j])], [float(lps[j])],
                              [sampler.last_top_logprobs[j]])
        # every row's argmax at once, for the greedy requests that were given drafts
        top = (argmax(raw).tolist() if any(d and s.params.greedy
                                           for s, d in zip(seqs, drafts, strict=True)) else [])
        for i, (seq, d) in enumerate(zip(seqs, drafts, strict=True)):
            if not d:
                continue
            rows_i = raw[starts[i]:starts[i + 1]]  # [k_i + 1, V]
            if seq.params.greedy:
                new = accept_greedy(d, top[starts[i]:starts[i + 1]])
            else:
                p = target_probs(rows_i, [seq.params] * len(rows_i))
                q = draft_probs[i]
                if q is None:  # a drafter that proposes each token for sure
                    q = torch.nn.functional.one_hot(torch.tensor(d, device=p.device),
                                                    p.shape[-1]).double()
                new = rejection_sample(d, q, p, seq.generator)
            logprobs = torch.log_softmax(rows_i[:len(new)], dim=-1)
            chosen = logprobs.gather(-1, torch.tensor(new, device=device)[:, None])[:, 0]
            n = seq.params.num_logprobs
            tops = [None if n is None else _top_logprobs(logprobs[j], t, float(chosen[j]), n)
                    for j, t in enumerate(new)]
            results[i] = (new, chosen.tolist(), tops)
            seq.num_draft_tokens += len(d)
            seq.num_accepted_tokens += len(new) - 1
            self.stats["draft_tokens"] += len(d)
            self.stats["accepted_tokens"] += len(new) - 1
            self.stats["verify_rows"] += 1
            self.stats["emitted_tokens"] += len(new)
        for i, seq in enumerate(seqs):
            new, lps, tops = results[i]
            if drafts[i]:  # before the tokens land: a finishing request caches its pages
                self.drafter.after_verify(seq, seq.num_tokens + len(drafts[i]) - 1,
                                          seq.num_tokens + len(new) - 1)
            appended = self.scheduler.accept(seq, new, lps)
            seq.num_steps += 1
            seq.top_logprobs += [t for t in tops[:appended] if t is not None]
        t3 = time.perf_counter()
        self.stats["draft_s"] += t1 - t0
        self.stats["verify_s"] += t2 - t1
        self.stats["accept_s"] += t3 - t2
