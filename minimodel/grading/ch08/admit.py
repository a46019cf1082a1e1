"""Checks of ch08.admit: which waiting requests start their prefill this step.

The expected answer comes from the engine itself (minimodel/engine/scheduler.py): each case
builds a real `Scheduler` over a real `PageAllocator`, queues `Sequence`s of the given lengths
and asks it for the next step.

Names: S page size, n a request's tokens, pages_needed(n) = ceil(n / S).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable

import torch

from minimodel.engine.kv_cache import PageAllocator, pages_needed
from minimodel.engine.sequence import Sequence
from minimodel.grading.ch08.common import _NO_LIMIT, _randint, _scheduler
from minimodel.grading.ch08.guard import own_work
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import Text, tr
from minimodel.sampling import SamplingParams


def engine_admit(
    waiting: list[int], cached: list[int], free_pages: int, page_size: int,
    max_num_batched_tokens: int, free_seqs: int,
) -> list[int]:
    """What the engine's Scheduler prefills in its next step, nothing running: request i (oldest
    first) still has waiting[i] tokens to prefill and holds the pages of its cached[i] tokens
    already cached -> the new tokens of each admitted request."""
    held = [pages_needed(c, page_size) for c in cached]
    allocator = PageAllocator(free_pages + sum(held))
    sched = _scheduler(allocator, page_size, free_seqs, max_num_batched_tokens)
    for i, (n, c, h) in enumerate(zip(waiting, cached, held, strict=True)):
        seq = Sequence(i, [0] * (c + n), SamplingParams())
        seq.num_cached_tokens = c
        seq.page_table = allocator.allocate(h)
        sched.add(seq)
    batch = sched.schedule()
    if batch is None or not batch.is_prefill:
        return []
    assert [s.request_id for s in batch.seqs] == list(range(len(batch.seqs)))
    return list(batch.q_lens)


_AdmitCase = tuple[list[int], list[int], int, int, int, int]


def _more_pages(cached: int, q: int, S: int) -> int:
    """Pages a request holding `cached` tokens needs besides its own to hold q tokens more."""
    return pages_needed(cached + q, S) - pages_needed(cached, S)


def _admit_call(fn: Callable, case: _AdmitCase) -> tuple[object, list[int], str]:
    """(what fn returned, what the engine does, a description of the call)."""
    waiting, cached, free_pages, S, budget, free_seqs = case
    what = (f"admit(waiting={waiting}, cached={cached}, free_pages={free_pages}, page_size={S}, "
            f"max_num_batched_tokens={budget}, free_seqs={free_seqs})")
    before, cached_before = list(waiting), list(cached)
    with own_work(fn, "admit"):
        got = fn(waiting, cached, free_pages, S, budget, free_seqs)
    expect(waiting == before and cached == cached_before,
           tr("{what} changed its `waiting` or `cached` list; leave the queue as it is (the "
              "scheduler removes requests itself)", what=what))
    return got, engine_admit(before, cached_before, free_pages, S, budget, free_seqs), what


def _admit_hint(case: _AdmitCase, got: list[int], want: list[int]) -> Text | str:
    """Name the classic mistake behind a wrong answer, when it is recognisable."""
    waiting, cached, free_pages, S, budget, free_seqs = case
    if want and got == list(range(len(got))) and got != want:
        return tr(" Return how many tokens each admitted request prefills (its q_len), not its "
                  "index in the queue.")
    if len(got) > len(want) and got[: len(want)] == want[: len(got)]:
        nxt = len(want)
        if len(got) > len(waiting):
            return tr(" It returned {n} numbers for {w} waiting requests: one q_len per admitted "
                      "request, in queue order.", n=len(got), w=len(waiting))
        if nxt >= free_seqs:
            return tr(" Only free_seqs = {free_seqs} requests may start.", free_seqs=free_seqs)
        if want and want[-1] < waiting[len(want) - 1]:
            return tr(" The last admitted request was cut to a chunk by the token budget; nothing "
                      "after a chunk is admitted in the same step.")
        if sum(want) >= budget:
            return tr(" The token budget is used up: no more requests this step.")
        free_left = free_pages - sum(_more_pages(c, q, S) for c, q in zip(cached, want))
        q = got[nxt]
        if q > 0 and _more_pages(cached[nxt], q, S) > free_left >= q // S:
            return tr(" Request {i} does not fit: bringing {q} tokens takes {more} new pages and "
                      "{free} are free; a partly filled page is still a whole page.",
                      i=nxt, q=q, more=_more_pages(cached[nxt], q, S), free=free_left)
        return tr(" Request {i} does not fit in the free pages, so the queue stops there: first "
                  "come, first served, no skipping ahead.", i=nxt)
    if len(got) < len(want) and got == want[: len(got)]:
        i = len(got)
        if cached[i]:
            room = pages_needed(cached[i], S) * S - cached[i]
            return tr(" Request {i} fits: it already holds {cached} cached tokens in {held} pages, "
                      "with room for {room} more in its last page, so bringing {q} tokens takes "
                      "only {more} new pages.", i=i, cached=cached[i],
                      held=pages_needed(cached[i], S), room=room, q=want[i],
                      more=_more_pages(cached[i], want[i], S))
        if want[i] < waiting[i]:
            return tr(" Request {i} crosses the token budget: admit a chunk of {q} tokens of it "
                      "(the rest comes next step).", i=i, q=want[i])
        return tr(" Request {i} fits: its {n} tokens need {pages} pages (no page is reserved for "
                  "its first new token yet; decode asks for that one).", i=i, n=waiting[i],
                  pages=pages_needed(waiting[i], S))
    if len(got) == len(want) and got[:-1] == want[:-1] and got and got[-1] != want[-1]:
        return tr(" The last request brings {q} tokens: the rest of the token budget ({rest}) or "
                  "all it still has to prefill, whichever is smaller.", q=want[-1],
                  rest=budget - sum(want[:-1]))
    return ""


def _admit_cases(fn: Callable, cases: list[_AdmitCase]) -> None:
    """Fail on the first wrong case, preferring one whose mistake can be named."""
    problems: list[tuple[Text, bool]] = []  # (message, whether it names the mistake)
    for case in cases:
        got, want, what = _admit_call(fn, case)
        ok_type = isinstance(got, (list, tuple)) and all(
            isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in got)
        if not ok_type:
            raise CheckFailed(tr("{what} returned {got!r}; return a list of ints: the tokens each "
                                 "admitted request prefills, here {want}", what=what, got=got,
                                 want=want))
        if [int(x) for x in got] != want:
            hint = _admit_hint(case, [int(x) for x in got], want)
            problems.append((tr("{what} returned {got}, expected {want}.{hint}", what=what,
                                got=list(got), want=want, hint=hint), bool(hint)))
    if problems:
        message, _ = max(problems, key=lambda p: p[1])  # the first with a hint
        raise CheckFailed(message)


def _new(waiting: list[int], free: int, S: int, budget: int, free_seqs: int) -> _AdmitCase:
    """A case where nothing is cached yet (new or preempted requests only)."""
    return waiting, [0] * len(waiting), free, S, budget, free_seqs


def _random_admit_case(partial: bool = False) -> _AdmitCase:
    S = [1, 2, 4, 16][_randint(0, 3)]
    waiting = [_randint(1, 6 * S + 3) for _ in range(_randint(1 if partial else 0, 7))]
    cached = [0] * len(waiting)
    if partial or (waiting and torch.rand(()) < 0.3):  # a prompt being chunked, near the head
        cached[_randint(0, min(1, len(waiting) - 1))] = _randint(1, 3 * S)
    need = sum(_more_pages(c, n, S) for c, n in zip(cached, waiting))
    free_pages = _randint(0, need + 2)
    budget = _randint(1, max(1, sum(waiting) + 4))
    free_seqs = _randint(1, 8)
    return waiting, cached, free_pages, S, budget, free_seqs


@exercise("ch08.admit", "returns a list of ints; [] when the queue is empty or nothing fits")
def _admit_types(fn: Callable) -> None:
    cases: list[_AdmitCase] = [_new([], 10, 4, 64, 4), _new([9], 0, 4, 64, 4),
                               _new([9, 3], 2, 4, 64, 4)]
    cases += [_random_admit_case() for _ in range(6)]
    _admit_cases(fn, cases)


@exercise("ch08.admit", "needs ceil(n / page_size) pages per prompt, and takes them from the "
                        "free pages one request after another")
def _admit_pages(fn: Callable) -> None:
    cases: list[_AdmitCase] = []
    for S in (1, 3, 4, 16):
        for _ in range(4):
            waiting = [_randint(1, 4) * S + _randint(-1, 1) for _ in range(_randint(1, 5))]
            waiting = [max(1, n) for n in waiting]
            k = _randint(1, len(waiting))  # exactly the first k fit, or one page short
            free = sum(pages_needed(n, S) for n in waiting[:k]) - _randint(0, 1)
            cases.append(_new(waiting, free, S, _NO_LIMIT, 16))
    _admit_cases(fn, cases)


@exercise("ch08.admit", "first come, first served: stops at the first request whose pages do "
                        "not fit, even if a later one would")
def _admit_fcfs(fn: Callable) -> None:
    cases: list[_AdmitCase] = []
    for _ in range(12):
        S = [2, 4, 16][_randint(0, 2)]
        head = [_randint(1, 3 * S) for _ in range(_randint(0, 2))]
        big = _randint(4, 8) * S  # does not fit
        small = [_randint(1, S) for _ in range(_randint(1, 3))]  # would fit
        free = sum(pages_needed(n, S) for n in head) + _randint(1, 3)
        cases.append(_new(head + [big] + small, free, S, _NO_LIMIT, 16))
    _admit_cases(fn, cases)


@exercise("ch08.admit", "token budget: whole prompts while they fit, then one chunk of the "
                        "prompt that crosses it, and nothing after that")
def _admit_budget(fn: Callable) -> None:
    cases: list[_AdmitCase] = []
    for _ in range(12):
        S = [1, 4, 16][_randint(0, 2)]
        waiting = [_randint(1, 40) for _ in range(_randint(1, 6))]
        budget = _randint(1, sum(waiting))
        cases.append(_new(waiting, 1000, S, budget, 16))
    # a chunk needs pages for its own tokens only
    cases.append(_new([100, 3], 2, 16, 20, 16))
    cases.append(_new([5, 64, 2], 3, 16, 30, 16))
    _admit_cases(fn, cases)


@exercise("ch08.admit", "a request with tokens already cached (a prompt being chunked) fills "
                        "the room left in its last page before it takes new pages")
def _admit_cached(fn: Callable) -> None:
    cases: list[_AdmitCase] = []
    for S in (2, 4, 16):
        for _ in range(3):
            c = _randint(1, 3 * S - 1)  # its last page has room unless c % S == 0
            n = _randint(1, 3 * S)
            rest = [_randint(1, 2 * S) for _ in range(_randint(0, 2))]
            free = _more_pages(c, n, S) + _randint(0, 1)  # exactly enough, or one more
            front = [[], [_randint(1, S)]][_randint(0, 1)]  # a preempted request before it
            free += sum(pages_needed(x, S) for x in front)
            waiting = front + [n] + rest
            cached = [0] * len(front) + [c] + [0] * len(rest)
            cases.append((waiting, cached, free, S, _NO_LIMIT, 16))
    cases += [_random_admit_case(partial=True) for _ in range(12)]
    _admit_cases(fn, cases)


@exercise("ch08.admit", "admits at most free_seqs requests")
def _admit_free_seqs(fn: Callable) -> None:
    cases: list[_AdmitCase] = []
    for free_seqs in (0, 1, 2, 3, 5):
        waiting = [_randint(1, 8) for _ in range(free_seqs + _randint(1, 3))]
        cases.append(_new(waiting, 1000, 4, _NO_LIMIT, free_seqs))
    _admit_cases(fn, cases)


@exercise("ch08.admit", "equals the engine's Scheduler on 200 random queues")
def _admit_engine(fn: Callable) -> Text:
    cases = [_random_admit_case() for _ in range(200)]
    _admit_cases(fn, cases)
    admitted = sum(len(engine_admit(*c)) for c in cases)
    return tr("{admitted} requests admitted over 200 queues, exactly as the scheduler does",
              admitted=admitted)
