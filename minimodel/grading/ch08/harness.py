"""The capstone's harness: the engine state a learner's step works on (`EngineState`), with a
pool of pages and an attention backend that check what the step hands them.

Both are built on the engine's public interface, by composition: `_CheckedAllocator` wraps a
real `PageAllocator` and keeps its own record of the pages it lent; `PageTableBackend` wraps a
real `TorchBackend`, checks each step's metadata the way FlashInfer would read it, and passes
everything else through.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import replace

import torch

from minimodel.engine.attention import AttentionMetadata, TorchBackend
from minimodel.engine.kv_cache import KVCache, PageAllocator
from minimodel.engine.sequence import Sequence
from minimodel.grading.ch08.common import _clip, _pages, _tokens
from minimodel.grading.ch08.guard import learner_interface, own_work
from minimodel.grading.core import CheckFailed, expect
from minimodel.grading.i18n import tr
from minimodel.sampling import SamplingParams


@learner_interface
class _CheckedAllocator:
    """The engine's free list, which says so when a step asks for pages it does not have, or
    gives back pages it does not hold.

    pool: a real PageAllocator with every page free; this wrapper lends from it and records
    which pages are out.
    """

    def __init__(self, pool: PageAllocator) -> None:
        assert pool.num_free == pool.num_pages, "the checked allocator starts from a full pool"
        self._pool = pool
        self._lent: set[int] = set()

    @property
    def num_pages(self) -> int:
        """Pages in the pool, lent or not."""
        return self._pool.num_pages

    @property
    def num_free(self) -> int:
        """Pages that can be lent right now."""
        return self._pool.num_free

    def allocate(self, n: int) -> list[int]:
        """Lend n pages, or fail with a sentence when n is not a count the pool can give."""
        if not isinstance(n, numbers.Integral) or n < 0:
            raise CheckFailed(tr("your step asked the pool for {n!r} pages; ask for a whole "
                                 "number >= 0 (0 when the request's pages already hold its "
                                 "tokens)", n=n))
        if n > self.num_free:
            raise CheckFailed(tr(
                "your step asked the pool for {pages} with {free} free. The scheduling decision "
                "comes first: admit only what fits in the free pages, and in a decode step "
                "preempt before a request takes a page that is not there.", pages=_pages(n),
                free=self.num_free))
        pages = self._pool.allocate(int(n))
        self._lent.update(pages)
        return pages

    def free(self, pages: list[int]) -> None:
        """Take pages back, or fail with a sentence (and take none) when one is not lent out."""
        lent = set(self._lent)
        for p in pages:
            if p not in lent:
                raise CheckFailed(tr("your step gave back page {page}, which is not lent out "
                                     "(given back twice?); return a request's pages once, then "
                                     "empty its page table", page=p))
            lent.discard(p)
        returned = list(pages)
        self._pool.free(returned)
        self._lent.difference_update(returned)


def _ints(t: object, what: str, n: int | None = None) -> list[int]:
    if isinstance(t, torch.Tensor):
        if t.dtype.is_floating_point or t.dim() != 1:
            raise CheckFailed(tr("{what} should be a 1-D integer tensor, got {dtype} of shape "
                                 "{shape}", what=what, dtype=t.dtype, shape=tuple(t.shape)))
        out = t.tolist()
    elif isinstance(t, (list, tuple)):
        out = list(t)
    else:
        raise CheckFailed(tr("{what} should be a tensor or a list of ints, got {got}", what=what,
                             got=type(t).__name__))
    if not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in out):
        raise CheckFailed(tr("{what} should hold ints, got {got}", what=what, got=out[:8]))
    if n is not None and len(out) != n:
        raise CheckFailed(tr("{what} should have {n} entries, got {got}", what=what, n=n,
                             got=len(out)))
    return [int(x) for x in out]


@learner_interface
class PageTableBackend:
    """The engine's torch paged attention, reading a step's metadata the way FlashInfer does.

    FlashInfer knows a request's length only from its page table (kv_indptr, kv_indices,
    kv_last_page_len), and writes each new K/V to its slot_mapping entry; the torch backend reads
    kv_lens. `plan` checks that the two descriptions agree, with a sentence when they do not,
    then plans the wrapped TorchBackend; `forward` (what the model calls in every layer) and any
    other attribute are the wrapped backend's.
    """

    def __init__(self, backend: TorchBackend) -> None:
        self._backend = backend

    @property
    def kv_cache(self) -> KVCache:
        """The pool of pages the wrapped backend reads and writes."""
        return self._backend.kv_cache

    def __getattr__(self, name: str) -> object:
        """Any other attribute (name, num_qo_heads, head_dim, ...) is the wrapped backend's."""
        if "_backend" not in self.__dict__:  # not built yet (copy, pickle)
            raise AttributeError(name)
        return getattr(self._backend, name)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                layer: int) -> torch.Tensor:
        """Store k, v [N, Hkv, D] in layer's pool and attend with q [N, Hq, D] -> [N, Hq, D]."""
        return self._backend.forward(q, k, v, layer)

    def plan(self, metadata: AttentionMetadata) -> None:
        """Check the step's metadata (a CheckFailed with a sentence when it is wrong), then
        plan the wrapped backend with it."""
        if not isinstance(metadata, AttentionMetadata):
            raise CheckFailed(tr("engine.backend.plan takes an AttentionMetadata "
                                 "(minimodel.engine.attention), got {got}",
                                 got=type(metadata).__name__))
        m, S = metadata, self.kv_cache.page_size
        if m.page_size != S:
            raise CheckFailed(tr("the metadata says page_size={got}; the pool's pages hold "
                                 "{S} tokens", got=m.page_size, S=S))
        q_lens, kv_lens = _ints(m.q_lens, "q_lens"), _ints(m.kv_lens, "kv_lens")
        B = len(q_lens)
        expect(B > 0 and len(kv_lens) == B,
               tr("q_lens {q_lens} and kv_lens {kv_lens} should have one entry for each request "
                  "of the step", q_lens=q_lens, kv_lens=kv_lens))
        qo = _ints(m.qo_indptr, "qo_indptr", B + 1)
        want_qo = [0, *(sum(q_lens[: i + 1]) for i in range(B))]
        expect(qo == want_qo, tr("qo_indptr is {got}; with q_lens {q_lens} request i's new "
                                 "tokens are rows qo_indptr[i]:qo_indptr[i+1] of the packed "
                                 "batch, so it should be {want}", got=qo, q_lens=q_lens,
                                 want=want_qo))
        kv_indptr = _ints(m.kv_indptr, "kv_indptr", B + 1)
        kv_indices = _ints(m.kv_indices, "kv_indices", kv_indptr[-1])
        last = _ints(m.kv_last_page_len, "kv_last_page_len", B)
        for i in range(B):
            expect(1 <= q_lens[i] <= kv_lens[i],
                   tr("request {i} of the step brings {q} new tokens and has kv_len {kv}: kv_len "
                      "counts every token cached after this step, the new ones included", i=i,
                      q=q_lens[i], kv=kv_lens[i]))
            n_pages = kv_indptr[i + 1] - kv_indptr[i]
            described = (n_pages - 1) * S + last[i]
            expect(n_pages >= 1 and 1 <= last[i] <= S and described == kv_lens[i],
                   tr("request {i} of the step: kv_indptr gives it {n_pages} pages and "
                      "kv_last_page_len says its last page holds {last}, {described} in all, but "
                      "it has {kv} after this step (kv_lens). FlashInfer reads only the page "
                      "table, so the two must agree.", i=i, n_pages=n_pages,
                      last=_tokens(last[i]), described=_tokens(described), kv=kv_lens[i]))
            bad = [p for p in kv_indices[kv_indptr[i]:kv_indptr[i + 1]]
                   if not 0 <= p < self.kv_cache.num_pages]
            expect(not bad, tr("request {i} of the step lists page {bad} in kv_indices; the "
                               "pool has pages 0..{top}", i=i, bad=bad[:1],
                               top=self.kv_cache.num_pages - 1))
        N = qo[-1]
        positions = _ints(m.positions, "positions", N)
        slots = _ints(m.slot_mapping, "slot_mapping", N)
        for i in range(B):
            want_pos = list(range(kv_lens[i] - q_lens[i], kv_lens[i]))
            got_pos = positions[qo[i]:qo[i + 1]]
            expect(got_pos == want_pos,
                   tr("positions of request {i} of the step are {got}; its new tokens come after "
                      "its {cached} cached ones: {want}", i=i, got=_clip(got_pos),
                      cached=kv_lens[i] - q_lens[i], want=_clip(want_pos)))
            pages = kv_indices[kv_indptr[i]:kv_indptr[i + 1]]
            for pos, got in zip(want_pos, slots[qo[i]:qo[i + 1]], strict=True):
                want = pages[pos // S] * S + pos % S
                expect(got == want,
                       tr("slot_mapping sends the K/V of request {i}'s token at position {pos} "
                          "to slot {got}, but its pages {pages} put position {pos} in slot "
                          "{want}: attention would not find it where it reads", i=i, pos=pos,
                          got=got, pages=pages, want=want))
        self._backend.plan(replace(
            m, qo_indptr=torch.tensor(qo, dtype=torch.int32),
            kv_indptr=torch.tensor(kv_indptr, dtype=torch.int32),
            kv_indices=torch.tensor(kv_indices, dtype=torch.int32),
            kv_last_page_len=torch.tensor(last, dtype=torch.int32),
            positions=torch.tensor(positions, dtype=torch.int64),
            slot_mapping=torch.tensor(slots, dtype=torch.int64), q_lens=q_lens, kv_lens=kv_lens))


@learner_interface
class EngineState:
    """Everything an engine step works on, between two steps.

    model: the engine's Qwen3 (minimodel/engine/model.py): model(input_ids [N], positions [N],
        backend) -> hidden [N, C]; model.compute_logits(hidden [b, C]) -> logits [b, V].
    backend: paged attention over the pool; backend.plan(metadata) once per step, before the
        model runs (the model calls it in every layer).
    allocator: the free pages: num_free, allocate(n) -> n page ids, free(pages).
    page_size, max_num_batched_tokens (tokens per step), max_num_seqs (requests running at once).
    waiting, running: lists of `Sequence` (minimodel/engine/sequence.py), oldest first.
    requests: every request added, by request_id.
    """

    def __init__(self, model: torch.nn.Module, page_size: int, num_pages: int,
                 max_num_batched_tokens: int, max_num_seqs: int) -> None:
        param = next(model.parameters())
        self.model = model
        self.kv_cache = KVCache(model.cfg, num_pages, page_size, param.dtype, param.device)
        self.backend = PageTableBackend(TorchBackend(self.kv_cache, model.cfg.num_attention_heads,
                                                     param.dtype))
        self.allocator = _CheckedAllocator(PageAllocator(num_pages))
        self.page_size = page_size
        self.max_num_batched_tokens, self.max_num_seqs = max_num_batched_tokens, max_num_seqs
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.requests: list[Sequence] = []

    def add_request(self, prompt: list[int], max_new_tokens: int) -> Sequence:
        """Queue a greedy request that stops after max_new_tokens tokens (EOS ignored)."""
        seq = Sequence(len(self.requests), list(prompt), SamplingParams(
            temperature=0.0, max_new_tokens=max_new_tokens, ignore_eos=True))
        self.requests.append(seq)
        self.waiting.append(seq)
        return seq

    def run(self, step: Callable, max_steps: int = 200) -> list[list[tuple[int, int]]]:
        """Call step(self) until no request is left -> what each step ran."""
        trace: list[list[tuple[int, int]]] = []
        while self.waiting or self.running:
            if len(trace) >= max_steps:
                raise CheckFailed(tr("after {steps} steps requests are still left (waiting "
                                     "{waiting}, running {running}); a request leaves `running` "
                                     "when it has its max_new_tokens", steps=max_steps,
                                     waiting=_ids(self.waiting), running=_ids(self.running)))
            with own_work(step, "my_engine_step"), torch.inference_mode():
                ran = step(self)
            if not (isinstance(ran, (list, tuple)) and all(
                    isinstance(x, (list, tuple)) and len(x) == 2
                    and all(isinstance(v, numbers.Integral) for v in x) for x in ran)):
                raise CheckFailed(tr("my_engine_step returned {ran!r}; return a list of "
                                     "(request_id, new tokens) pairs, one for each request it "
                                     "ran", ran=ran))
            trace.append([(int(r), int(q)) for r, q in ran])
        return trace


def _ids(seqs: list[Sequence]) -> list[int]:
    return [s.request_id for s in seqs]
