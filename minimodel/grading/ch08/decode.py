"""Checks of ch08.decode_step: in a decode step, which running requests get a page for their
new token and which are preempted when pages run out.

The expected answer comes from the engine's own `Scheduler` (minimodel/engine/scheduler.py),
run on real `Sequence`s over a real `PageAllocator`.

Names: S page size, n a request's tokens, pages_needed(n) = ceil(n / S).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable

import torch

from minimodel.engine.kv_cache import PageAllocator, pages_needed
from minimodel.engine.sequence import Sequence, Status
from minimodel.grading.ch08.common import _NO_LIMIT, _randint, _scheduler
from minimodel.grading.ch08.guard import own_work
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import Text, tr
from minimodel.sampling import SamplingParams


def engine_decode_step(
    num_tokens: list[int], free_pages: int, page_size: int
) -> tuple[list[int], list[int]]:
    """What the engine's Scheduler does in a decode step for running requests with these token
    counts (oldest first; each holds pages for all its tokens but the last) -> (indices that
    decode, indices preempted in the order they were preempted)."""
    held = [pages_needed(n - 1, page_size) for n in num_tokens]
    allocator = PageAllocator(sum(held) + free_pages)
    sched = _scheduler(allocator, page_size, len(num_tokens) + 1, _NO_LIMIT)
    for i, (n, h) in enumerate(zip(num_tokens, held, strict=True)):
        seq = Sequence(i, [0] * n, SamplingParams())
        seq.num_cached_tokens = n - 1
        seq.page_table = allocator.allocate(h)
        seq.status = Status.RUNNING
        sched.running.append(seq)
    batch = sched.schedule()
    # None only when the oldest request alone needs more pages than the pool has; the cases
    # are drawn so that it never does
    assert batch is not None and not batch.is_prefill, "the pool is smaller than one request"
    return [s.request_id for s in batch.seqs], [s.request_id for s in batch.preempted]


_DecodeCase = tuple[list[int], int, int]


def _decode_hint(case: _DecodeCase, got: tuple[list[int], list[int]],
                 want: tuple[list[int], list[int]]) -> Text | str:
    num_tokens, free, S = case
    g_pre, w_pre = got[1], want[1]
    newly = [i for i, n in enumerate(num_tokens) if (n - 1) % S == 0]
    if not w_pre and g_pre:
        return tr(" There were enough pages: only requests whose new token starts a page need one "
                  "(here {newly}), and free_pages = {free}.", newly=newly, free=free)
    if set(g_pre) > set(w_pre):
        return tr(" Too many preemptions: a preempted request gives back every page it holds, and "
                  "the requests after it can use them.")
    if w_pre and g_pre and set(g_pre) != set(w_pre) and min(g_pre) < min(w_pre):
        return tr(" Preempt the newest request that has not got its page yet (the end of the "
                  "list), never an older one: the oldest have waited longest.")
    if w_pre and not g_pre:
        return tr(" Pages ran out: someone must be preempted, and nothing may be lost.")
    if sorted(g_pre) == sorted(w_pre) and g_pre != w_pre:
        return tr(" List the preempted requests in the order they were preempted (newest first).")
    return ""


def _decode_cases(fn: Callable, cases: list[_DecodeCase]) -> None:
    problems: list[tuple[Text, bool]] = []  # (message, whether it names the mistake)
    for case in cases:
        num_tokens, free, S = case
        what = f"decode_step(num_tokens={num_tokens}, free_pages={free}, page_size={S})"
        before = list(num_tokens)
        with own_work(fn, "decode_step"):
            got = fn(num_tokens, free, S)
        expect(num_tokens == before,
               tr("{what} changed `num_tokens`; leave it as it is", what=what))
        want = engine_decode_step(before, free, S)
        if not (isinstance(got, (tuple, list)) and len(got) == 2
                and all(isinstance(x, (list, tuple)) for x in got)
                and all(isinstance(i, numbers.Integral) and not isinstance(i, bool)
                        for x in got for i in x)):
            raise CheckFailed(tr("{what} returned {got!r}; return a tuple of two lists of ints "
                                 "(decoding, preempted), here {want}", what=what, got=got,
                                 want=want))
        g = ([int(i) for i in got[0]], [int(i) for i in got[1]])
        if sorted(g[0] + g[1]) != list(range(len(num_tokens))):
            problems.append((tr("{what} returned {got}: every request must be in exactly one of "
                                "the two lists (nothing is dropped); expected {want}.", what=what,
                                got=g, want=want), False))
        elif g != want:
            hint = _decode_hint(case, g, want)
            problems.append((tr("{what} returned {got}, expected {want}.{hint}", what=what, got=g,
                                want=want, hint=hint), bool(hint)))
    if problems:
        message, _ = max(problems, key=lambda p: p[1])
        raise CheckFailed(message)


def _random_decode_case(tight: bool) -> _DecodeCase:
    S = [1, 2, 3, 4, 16][_randint(0, 4)]
    B = _randint(2, 7) if tight else _randint(1, 7)  # one request always fits the pool alone
    num_tokens = [_randint(2, 5 * S + 2) for _ in range(B)]
    if tight and torch.rand(()) < 0.5:  # many requests at a page boundary
        num_tokens = [S * _randint(1, 4) + 1 if torch.rand(()) < 0.6 else n for n in num_tokens]
    newly = sum((n - 1) % S == 0 for n in num_tokens)
    free = _randint(0, max(0, newly - 1)) if tight else _randint(newly, newly + 3)
    return num_tokens, free, S


@exercise("ch08.decode_step", "returns (decoding, preempted), two lists that hold every request "
                              "once")
def _decode_types(fn: Callable) -> None:
    cases = [([5], 1, 4), ([2, 9], 1, 4), ([5, 5], 0, 4)]
    cases += [_random_decode_case(tight=bool(i % 2)) for i in range(8)]
    _decode_cases(fn, cases)


@exercise("ch08.decode_step", "a request needs a new page only when its new token starts one; "
                              "with enough pages nobody is preempted")
def _decode_no_preempt(fn: Callable) -> None:
    cases = [_random_decode_case(tight=False) for _ in range(20)]
    cases += [([S * k + 1 for k in (1, 2, 3)], 3, S) for S in (1, 4, 16)]  # exactly enough
    cases += [([S * k for k in (1, 2, 3)], 0, S) for S in (2, 4, 16)]  # no page needed
    _decode_cases(fn, cases)


@exercise("ch08.decode_step", "out of pages: preempts the newest request (itself, when it is "
                              "the newest left) and reuses its pages")
def _decode_preempt(fn: Callable) -> None:
    cases: list[_DecodeCase] = []
    for S in (1, 2, 4, 16):
        # everyone at a page boundary, one page short: the newest gives its pages to the others
        cases.append(([S * k + 1 for k in (3, 1, 2, 1)], 3, S))
        cases.append(([S * k + 1 for k in (2, 2)], 0, S))  # the older one takes the newer's page
        cases.append(([S * 2 + 1, S + 1], 0, S))
        cases.append(([S * 2, S * 3 + 1, S * 2 + 1], 0, S))  # only the last two need a page
    cases += [_random_decode_case(tight=True) for _ in range(16)]
    _decode_cases(fn, cases)


@exercise("ch08.decode_step", "equals the engine's Scheduler on 200 random batches")
def _decode_engine(fn: Callable) -> Text:
    cases = [_random_decode_case(tight=bool(i % 2)) for i in range(200)]
    _decode_cases(fn, cases)
    preempted = sum(len(engine_decode_step(*c)[1]) for c in cases)
    return tr("{preempted} preemptions over 200 batches, exactly as the scheduler does",
              preempted=preempted)
