"""Continuous batching: which requests run in the next step, and with how many tokens each.

Each step is either a prefill step or a decode step:
- prefill: requests from the waiting queue, oldest first, as long as pages, the token budget
  (max_num_batched_tokens) and max_num_seqs allow; a prompt larger than the budget is prefilled
  in chunks over several steps. Several requests are packed into one step.
- decode: when nothing can be prefilled, every running request brings its last token.
  If a request needs a new page and none is free, the newest running request is preempted:
  its pages are freed and it goes back to the front of the waiting queue, to be recomputed
  (prompt + what it generated so far) when pages are free again. Nothing is ever dropped.
Finished requests leave between steps and new ones join, so the batch never waits for its
slowest member.

With a prefix cache (engine/radix_cache.py), a request's full pages join the cache's tree as
soon as they are computed, and stay there when it finishes or is preempted; a request that
is admitted starts from the longest prefix the tree holds: those pages are shared, not
computed again, and only the rest counts against the token budget and the pool.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field

from minimodel.engine.kv_cache import PageAllocator, pages_needed
from minimodel.engine.radix_cache import RadixCache
from minimodel.engine.sequence import Sequence, Status

log = logging.getLogger("minimodel.engine")


@dataclass
class ScheduledBatch:
    """What one step runs: seqs[i] brings q_lens[i] new tokens (from num_cached_tokens on)."""

    seqs: list[Sequence]
    q_lens: list[int]
    is_prefill: bool
    preempted: list[Sequence] = field(default_factory=list)  # requests preempted to make room

    @property
    def num_tokens(self) -> int:
        return sum(self.q_lens)

    @property
    def sample_mask(self) -> list[bool]:
        """Whether each request gets a new token: only if this step reaches its last token."""
        pairs = zip(self.seqs, self.q_lens, strict=True)
        return [s.num_cached_tokens + q == s.num_tokens for s, q in pairs]

    def describe(self) -> str:
        """One line for tracing: the kind of step, and request id (new tokens) of each."""
        kind = "prefill" if self.is_prefill else "decode"
        pairs = zip(self.seqs, self.q_lens, strict=True)
        items = ", ".join(f"{s.request_id}({q})" for s, q in pairs)
        out = f"{kind:7s} {self.num_tokens:5d} tokens: {items}"
        if self.preempted:
            out += f"  | preempted: {', '.join(str(s.request_id) for s in self.preempted)}"
        return out


class Scheduler:
    """Owns the waiting and running queues and the page allocator (and the prefix cache, when
    there is one: `cache`, over a RefCountedAllocator)."""

    def __init__(
        self,
        allocator: PageAllocator,
        page_size: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
        cache: RadixCache | None = None,
    ) -> None:
        self.allocator = allocator
        self.cache = cache
        self.page_size = page_size
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.waiting: deque[Sequence] = deque()
        self.running: deque[Sequence] = deque()
        # Admitted prompts' tokens, how many of them the cache held, and prefill tokens run.
        self.num_queried_tokens = 0
        self.num_hit_tokens = 0
        self.num_prefill_tokens = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    # --- scheduling ----------------------------------------------------------------------

    def schedule(self) -> ScheduledBatch | None:
        """The next step's batch: prefill if any waiting request fits, else decode. A decode
        that ends the only running request for want of pages frees them: then try prefill."""
        return self._schedule_prefill() or self._schedule_decode() or self._schedule_prefill()

    def _schedule_prefill(self) -> ScheduledBatch | None:
        seqs: list[Sequence] = []
        q_lens: list[int] = []
        budget = self.max_num_batched_tokens
        while self.waiting and budget > 0:
            seq = self.waiting[0]
            if len(self.running) >= self.max_num_seqs:  # admitted ones joined running already
                break
            fresh = not seq.page_table  # not a prompt whose first chunks ran already
            if fresh and self.cache is not None:
                self._match(seq)
            q_len = min(seq.num_uncached_tokens, budget)
            if (fresh and self.cache is not None and self._computed_now(seq, seqs, q_lens)) \
                    or not self._grow(seq, seq.num_cached_tokens + q_len):
                if fresh:  # a waiting request holds no page
                    self._release(seq)
                    seq.num_cached_tokens = 0
                break
            if fresh:
                self.num_queried_tokens += seq.num_tokens
                self.num_hit_tokens += seq.num_cached_tokens
                if seq.num_cached_prompt_tokens is None:  # the first admission (metrics)
                    seq.num_cached_prompt_tokens = seq.num_cached_tokens
            seqs.append(seq)
            q_lens.append(q_len)
            budget -= q_len
            if q_len < seq.num_uncached_tokens:
                break  # a chunk: the rest of this prompt comes first in the next step
            self.waiting.popleft()
            seq.status = Status.RUNNING
            self.running.append(seq)
        self.num_prefill_tokens += sum(q_lens)
        return ScheduledBatch(seqs, q_lens, is_prefill=True) if seqs else None

    def _schedule_decode(self) -> ScheduledBatch | None:
        seqs: list[Sequence] = []
        preempted: list[Sequence] = []
        while self.running:
            seq = self.running.popleft()
            while not self._grow(seq, seq.num_tokens):
                if self.running:  # preempt the newest request
                    victim = self.running.pop()
                elif seqs:  # seq itself is the newest; it waits for the others to finish
                    victim = seq
                else:  # alone with every page and still out of room: the pool is full
                    log.warning(
                        "Request %d stopped after %d generated tokens (finish_reason "
                        "'length'): it holds every page of the KV cache (%d pages of %d tokens) "
                        "and needs another; raise num_pages or kv_cache_bytes.",
                        seq.request_id, seq.num_output_tokens, len(seq.page_table),
                        self.page_size)
                    self.finish(seq, "length")
                    break
                self._preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            else:
                seqs.append(seq)
        self.running.extend(seqs)
        if not seqs:
            return None
        return ScheduledBatch(seqs, [1] * len(seqs), is_prefill=False, preempted=preempted)

    def _grow(self, seq: Sequence, num_tokens: int) -> bool:
        """Give seq pages for num_tokens tokens if there are enough free; False if not."""
        extra = pages_needed(num_tokens, self.page_size) - len(seq.page_table)
        if extra > self.allocator.num_free:
            return False
        if extra > 0:
            seq.page_table += self.allocator.allocate(extra)
        return True

    def reserve(self, seq: Sequence, num_tokens: int) -> bool:
        """Room for num_tokens tokens in seq's pages, from the free pages only (never by
        preempting): a decode step's draft tokens (engine/spec_decode.py)."""
        return self._grow(seq, num_tokens)

    def _match(self, seq: Sequence) -> None:
        """Start seq from the longest prefix of its tokens that the cache holds: share those
        pages. At least its last token is computed again, so that it has logits to sample
        from (and a partly filled page is never shared): whole pages of the first
        num_tokens - 1 tokens at most."""
        assert self.cache is not None and not seq.page_table
        pages, node = self.cache.match(seq.token_ids, (seq.num_tokens - 1) // self.page_size)
        self.allocator.share(pages)
        seq.page_table = pages
        seq.num_cached_tokens = len(pages) * self.page_size
        seq.cache_node, seq.num_pages_in_cache = node, len(pages)

    def _computed_now(self, seq: Sequence, seqs: list[Sequence], q_lens: list[int]) -> bool:
        """Does a request already in this step compute the next page of seq's prompt (the same
        tokens after the same cached pages)? Then seq waits one step and finds that page in
        the cache, instead of computing it a second time in the same batch (SGLang's
        in-batch prefix check): a shared system prompt is computed once, not once per
        request of the first batch."""
        S, m = self.page_size, len(seq.page_table)
        if seq.num_tokens - 1 < (m + 1) * S:
            return False  # no whole page of seq's left to share
        page = seq.token_ids[m * S:(m + 1) * S]
        for other, q_len in zip(seqs, q_lens, strict=True):
            start = other.num_cached_tokens  # where other's tokens of this step begin
            if start <= m * S and start + q_len >= (m + 1) * S \
                    and other.page_table[:m] == seq.page_table \
                    and other.token_ids[m * S:(m + 1) * S] == page:
                return True
        return False

    def _cache_full_pages(self, seq: Sequence) -> None:
        """Put seq's computed full pages that are not in the cache yet into it. Where the cache
        held those tokens already (another request computed them too), seq uses the cache's
        page from now on and lets its own copy go."""
        assert self.cache is not None
        start, full = seq.num_pages_in_cache, seq.num_shareable_tokens // self.page_size
        if full <= start:
            return
        seq.cache_node = self.cache.cache_pages(seq.token_ids, seq.page_table, start, full,
                                                seq.cache_node)
        seq.num_pages_in_cache = full

    def _release(self, seq: Sequence) -> None:
        """seq lets go of its pages: its full computed pages stay in the cache (if any), the
        rest return to the pool."""
        if self.cache is not None:
            self._cache_full_pages(seq)
        self.allocator.free(seq.page_table)
        seq.page_table = []
        seq.cache_node, seq.num_pages_in_cache = None, 0

    def reset_cache(self) -> bool:
        """Empty the prefix cache of every page no request holds; True if it is empty now
        (False: no cache, or running requests still share some of its pages)."""
        return self.cache is not None and self.cache.reset()

    def _preempt(self, seq: Sequence) -> None:
        """Free seq's pages; it waits at the front and recomputes all its tokens later (those
        still in the prefix cache, if there is one, are shared again instead)."""
        self._release(seq)
        seq.num_cached_tokens = 0
        seq.num_preemptions += 1
        seq.status = Status.WAITING
        self.waiting.appendleft(seq)

    # --- after the model ran -------------------------------------------------------------

    def postprocess(
        self, batch: ScheduledBatch, tokens: list[int], logprobs: list[float]
    ) -> None:
        """Advance the cache, append the sampled tokens, finish what must stop (the LLM
        collects finished requests by their status).

        tokens/logprobs hold one entry per request of the batch that was sampled
        (batch.sample_mask).
        """
        sampled = iter(zip(tokens, logprobs, strict=True))
        for seq, q_len, sample in zip(batch.seqs, batch.q_lens, batch.sample_mask, strict=True):
            seq.num_cached_tokens += q_len
            if self.cache is not None:
                self._cache_full_pages(seq)
            if not sample:
                continue  # a prompt chunk: nothing to sample yet
            token, logprob = next(sampled)
            seq.append_token(token, logprob)
            reason = seq.stop_reason(self.max_model_len)
            if reason is not None:
                self.finish(seq, reason)

    def accept(self, seq: Sequence, tokens: list[int], logprobs: list[float]) -> int:
        """After a speculative decode step that fed seq's last token and drafts: append the
        verified tokens one by one, until one ends the request; returns how many landed.
        The cache then holds every token but the last (the last accepted draft's K/V and
        those before it); pages past the tokens, which hold only rejected drafts' K/V, go
        back to the pool."""
        appended = 0
        for token, logprob in zip(tokens, logprobs, strict=True):
            seq.append_token(token, logprob)
            appended += 1
            reason = seq.stop_reason(self.max_model_len)
            if reason is not None:
                seq.num_cached_tokens = seq.num_tokens - 1
                self.finish(seq, reason)
                return appended
        seq.num_cached_tokens = seq.num_tokens - 1
        if self.cache is not None:
            self._cache_full_pages(seq)
        keep = pages_needed(seq.num_tokens, self.page_size)
        self.allocator.free(seq.page_table[keep:])
        del seq.page_table[keep:]
        return appended

    def abort(self, seq: Sequence) -> None:
        """End an unfinished request now, wherever it is (waiting, mid-prefill, running):
        its pages return to the pool before the next step."""
        if seq in self.waiting:
            self.waiting.remove(seq)
        self.finish(seq, "abort")

    def finish(self, seq: Sequence, reason: str) -> None:
        """End a request: record why, return its pages, leave the queues."""
        seq.finish_reason = reason
        seq.status = Status.FINISHED
        seq.finish_time = time.perf_counter()
        self._release(seq)
        if seq in self.running:
            self.running.remove(seq)
