"""What the capstone's runs are compared with: the capstone's settings, the engine's Scheduler on
requests of given lengths (`engine_schedule`), mm.LLM's greedy tokens (`reference_tokens`), and
the random cases drawn from real text (`_draw_case`)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from minimodel.engine.kv_cache import PageAllocator
from minimodel.engine.sequence import Sequence
from minimodel.grading.ch08.common import _randint, _scheduler
from minimodel.grading.i18n import tr
from minimodel.sampling import SamplingParams

CAPSTONE_MODEL = "bard"
# One engine for every case: pages of 4 tokens, 10 pages (40 token slots), at most 16 tokens a
# step, at most 4 requests running. Small enough that prompts are chunked and pages run out.
CAPSTONE_SETTINGS = dict(page_size=4, num_pages=10, max_num_batched_tokens=16, max_num_seqs=4)
_TEXT = ("ROMEO.\nBut soft, what light through yonder window breaks?\nIt is the east, and Juliet "
         "is the sun.\n\nJULIET.\nO Romeo, Romeo, wherefore art thou Romeo?\n\n床前明月光，疑是"
         "地上霜。\n举头望明月，低头思故乡。\n")


def engine_schedule(prompt_lens: list[int], max_new: list[int], page_size: int, num_pages: int,
                    max_num_batched_tokens: int, max_num_seqs: int
                    ) -> tuple[list[list[tuple[int, int]]], list[bool], int, int]:
    """The engine's Scheduler on greedy requests of these lengths, all queued before step 1:
    (request id, new tokens) of every step, which steps were prefill steps, the preemptions
    and the prompt chunks (prefills of part of what a request had left).
    No model is needed: with EOS ignored, what is scheduled depends on the lengths alone."""
    sched = _scheduler(PageAllocator(num_pages), page_size, max_num_seqs, max_num_batched_tokens)
    seqs = [Sequence(i, [0] * n, SamplingParams(temperature=0.0, max_new_tokens=m,
                                                ignore_eos=True))
            for i, (n, m) in enumerate(zip(prompt_lens, max_new, strict=True))]
    for s in seqs:
        sched.add(s)
    trace, kinds, chunks = [], [], 0
    while sched.has_unfinished() and len(trace) < 500:
        batch = sched.schedule()
        if batch is None:
            break
        chunks += sum(q < s.num_uncached_tokens for s, q in zip(batch.seqs, batch.q_lens))
        trace.append([(s.request_id, q) for s, q in zip(batch.seqs, batch.q_lens, strict=True)])
        kinds.append(batch.is_prefill)
        k = sum(batch.sample_mask)
        sched.postprocess(batch, [0] * k, [0.0] * k)
    if sched.has_unfinished() or any(s.num_output_tokens != m for s, m in zip(seqs, max_new)):
        raise ValueError("these requests do not all run to max_new_tokens in this pool")
    return trace, kinds, sum(s.num_preemptions for s in seqs), chunks


@functools.lru_cache(maxsize=1)
def _reference_llm():
    """mm.LLM on the course's model with the capstone's settings (loaded once), as chapter 08
    built it: without chapter 12's prefix cache, so that it runs the batches the Scheduler
    alone schedules (a preempted request recomputes all its tokens)."""
    from minimodel.engine.llm import LLM

    s = CAPSTONE_SETTINGS
    return LLM(CAPSTONE_MODEL, page_size=s["page_size"], num_pages=s["num_pages"],
               max_num_batched_tokens=s["max_num_batched_tokens"], max_num_seqs=s["max_num_seqs"],
               enable_prefix_caching=False)


@functools.lru_cache(maxsize=1)
def _text_ids() -> tuple[int, ...]:
    return tuple(_reference_llm().tokenizer.encode(_TEXT))


@functools.lru_cache(maxsize=8)
def reference_tokens(prompts: tuple[tuple[int, ...], ...], max_new: tuple[int, ...]):
    """What mm.LLM(...).generate gives these greedy requests (EOS ignored)."""
    params = [SamplingParams(temperature=0.0, max_new_tokens=m, ignore_eos=True)
              for m in max_new]
    outs = _reference_llm().generate([list(p) for p in prompts], params)
    return [o.token_ids for o in outs]


@dataclass
class CapstoneCase:
    """Requests for one run, and what the engine does with them."""

    name: str
    prompts: list[list[int]]
    max_new: list[int]
    trace: list[list[tuple[int, int]]]
    prefill: list[bool]
    preemptions: int


@contextmanager
def _engine_quiet() -> Iterator[None]:
    """The engine's warnings off while the grader tries random schedules of its own."""
    log = logging.getLogger("minimodel.engine")
    before, log.disabled = log.disabled, True
    try:
        yield
    finally:
        log.disabled = before


def _draw_case(tight: bool) -> CapstoneCase:
    """Random requests of real text whose schedule shows what the case is about: chunked
    prefill and several requests decoding together (roomy), or preemptions (tight)."""
    s, text = CAPSTONE_SETTINGS, _text_ids()
    for _ in range(500):
        n = _randint(3, 4) if tight else 3
        lens = [_randint(6, 20) if tight else _randint(4, 20) for _ in range(n)]
        new = [_randint(5, 10) if tight else _randint(3, 8) for _ in range(n)]
        try:
            with _engine_quiet():  # a drawn case that fills the pool is dropped, not reported
                trace, kinds, pre, chunks = engine_schedule(
                    lens, new, s["page_size"], s["num_pages"], s["max_num_batched_tokens"],
                    s["max_num_seqs"])
        except ValueError:
            continue
        together = max((len(step) for step, k in zip(trace, kinds) if not k), default=0) >= 2
        good = (pre >= 1 and len(trace) <= 40) if tight else (
            pre == 0 and chunks >= 1 and together and len(trace) <= 25)
        if good:
            starts = [_randint(0, len(text) - x) for x in lens]
            prompts = [list(text[a:a + x]) for a, x in zip(starts, lens, strict=True)]
            name = tr("tight pool") if tight else tr("roomy pool")
            return CapstoneCase(name, prompts, new, trace, kinds, pre)
    raise AssertionError("no case drawn")  # the ranges above always give one quickly
