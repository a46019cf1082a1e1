"""Checks of chapter 08 (the engine): admit, decode_step, ttft_tpot, and the capstone
my_engine_step (the learner's engine step, built from their own pieces, on the engine's model).

`admit` and `decode_step` are the two decisions of the engine's scheduler
(minimodel/engine/scheduler.py): which waiting requests start their prefill this step, and, in a
decode step, which running requests get a page for their new token and which are preempted when
pages run out. The expected answers come from the engine itself: each case builds a real
`Scheduler` over a real `PageAllocator`, queues `Sequence`s of the given lengths and asks it for
the next step. `ttft_tpot` follows the formulas of the engine's `RequestMetrics` (llm.py).

Every call of the learner's functions runs under `own_work`: a function that hands the decision
to the engine's Scheduler, ModelRunner, LLM or Sampler, to `build_metadata`, or to this grader's
own answers (`engine_admit` and the like) fails, however it is wrapped.

Names: S page size, n a request's tokens, pages_needed(n) = ceil(n / S).
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import numbers
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from minimodel.engine.attention import AttentionMetadata, TorchBackend, build_metadata
from minimodel.engine.kv_cache import KVCache, PageAllocator, pages_needed
from minimodel.engine.scheduler import Scheduler
from minimodel.engine.sequence import Sequence, Status
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.learner import _LIBRARY_DIRS, spy_calls
from minimodel.sampling import Sampler, SamplingParams

_NO_LIMIT = 1 << 30  # a max_model_len / budget / max_num_seqs that never binds


def _randint(low: int, high: int) -> int:
    """A random int in [low, high] (inclusive), from torch's seeded generator."""
    return int(torch.randint(low, high + 1, ()))


def _scheduler(
    allocator: PageAllocator, page_size: int, max_seqs: int, token_budget: int
) -> Scheduler:
    return Scheduler(allocator, page_size, max_num_seqs=max_seqs,
                     max_num_batched_tokens=token_budget, max_model_len=_NO_LIMIT,
                     eos_token_ids=set())


# --- own work: the learner's functions may not hand their job to the engine or the grader ----

_PACKAGE = str(Path(__file__).resolve().parents[1])  # minimodel/
_GRADERS = re.compile(re.escape(str(Path(__file__).resolve().parent)) + r"[/\\]ch\d\d\.py$")


def _codes(*owners: object) -> dict:
    """code object -> readable name, for functions and for every method of classes."""
    out = {}
    for owner in owners:
        members = list(vars(owner).values()) if inspect.isclass(owner) else [owner]
        for m in members:
            m = m.fget if isinstance(m, property) else getattr(m, "__func__", m)
            m = inspect.unwrap(m) if callable(m) else m
            if inspect.isfunction(m):
                out[m.__code__] = f"{m.__module__}.{m.__qualname__}"
    return out


@functools.cache
def _engine_decisions() -> dict:
    """What the exercises ask the learner to write, as the engine writes it."""
    from minimodel.engine.llm import LLM
    from minimodel.engine.runner import ModelRunner

    return _codes(Scheduler, ModelRunner, LLM, Sampler, build_metadata)


@functools.cache
def _interface() -> dict:
    """The grader's code a learner's step is meant to call: the EngineState it is handed."""
    return _codes(EngineState, PageTableBackend, _CheckedAllocator)


_VERDICT: dict = {}  # code object -> the name of the job it does for the learner, or None


def _forbidden(code) -> str | None:
    if code not in _VERDICT:
        name = _engine_decisions().get(code)
        if name is None and _GRADERS.search(str(Path(code.co_filename).resolve())) \
                and code not in _interface():
            name = f"the grader's {Path(code.co_filename).stem}.{code.co_name}"
        _VERDICT[code] = name
    return _VERDICT[code]


def _called_by_learner(frame) -> bool:
    """Whether the nearest caller outside the standard library and installed packages is the
    learner's code (a notebook, a learner_module, a test file) rather than minimodel's."""
    f = frame.f_back
    while f is not None:
        name = str(Path(f.f_code.co_filename).resolve())
        if name.startswith(_PACKAGE):
            return False
        if not name.startswith(_LIBRARY_DIRS):
            return True
        f = f.f_back
    return False


@contextmanager
def own_work(fn: Callable, what: str) -> Iterator[None]:
    """Run the block (a call of the learner's `fn`) and fail if the learner's code called the
    engine's own decisions or the grader's answers, directly or through a wrapper."""
    target = fn
    while isinstance(target, functools.partial):
        target = target.func
    target = inspect.unwrap(target)
    if not inspect.isfunction(target):  # a callable object: its __call__
        target = inspect.unwrap(type(target).__call__) if callable(target) else target
    found = [_forbidden(target.__code__)] if inspect.isfunction(target) else []
    found = [f for f in found if f]  # the learner's function *is* one of the engine's or ours

    def watch(frame, event, arg):
        if event == "call" and not found:
            name = _forbidden(frame.f_code)
            if name and _called_by_learner(frame):
                found.append(name)

    previous = sys.getprofile()
    sys.setprofile(watch)
    try:
        yield
    finally:
        sys.setprofile(previous)
    if found:
        raise CheckFailed(f"{what} hands its work to {found[0]}: the exercise is to write that "
                          "decision yourself, from the rules of chapter 08, not to call the "
                          "engine's (or this grader's) own answer")


# --- admit -------------------------------------------------------------------------------------


def engine_admit(
    waiting: list[int], cached: list[int], free_pages: int, page_size: int, token_budget: int,
    max_seqs: int,
) -> list[int]:
    """What the engine's Scheduler prefills in its next step, nothing running: request i (oldest
    first) still has waiting[i] tokens to prefill and holds the pages of its cached[i] tokens
    already cached -> the new tokens of each admitted request."""
    held = [pages_needed(c, page_size) for c in cached]
    allocator = PageAllocator(free_pages + sum(held))
    sched = _scheduler(allocator, page_size, max_seqs, token_budget)
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
    waiting, cached, free_pages, S, budget, max_seqs = case
    what = (f"admit(waiting={waiting}, cached={cached}, free_pages={free_pages}, page_size={S}, "
            f"token_budget={budget}, max_seqs={max_seqs})")
    before, cached_before = list(waiting), list(cached)
    with own_work(fn, "admit"):
        got = fn(waiting, cached, free_pages, S, budget, max_seqs)
    expect(waiting == before and cached == cached_before,
           f"{what} changed its `waiting` or `cached` list; leave the queue as it is (the "
           "scheduler removes requests itself)")
    return got, engine_admit(before, cached_before, free_pages, S, budget, max_seqs), what


def _admit_hint(case: _AdmitCase, got: list[int], want: list[int]) -> str:
    """Name the classic mistake behind a wrong answer, when it is recognisable."""
    waiting, cached, free_pages, S, budget, max_seqs = case
    if want and got == list(range(len(got))) and got != want:
        return (" Return how many tokens each admitted request prefills (its q_len), not its "
                "index in the queue.")
    if len(got) > len(want) and got[: len(want)] == want[: len(got)]:
        nxt = len(want)
        if nxt >= max_seqs:
            return f" Only max_seqs = {max_seqs} requests may start."
        if want and want[-1] < waiting[len(want) - 1]:
            return (" The last admitted request was cut to a chunk by the token budget; nothing "
                    "after a chunk is admitted in the same step.")
        if sum(want) >= budget:
            return " The token budget is used up: no more requests this step."
        free_left = free_pages - sum(_more_pages(c, q, S) for c, q in zip(cached, want))
        q = got[nxt]
        if q > 0 and _more_pages(cached[nxt], q, S) > free_left >= q // S:
            return (f" Request {nxt} does not fit: bringing {q} tokens takes "
                    f"{_more_pages(cached[nxt], q, S)} new pages and {free_left} are free; a "
                    "partly filled page is still a whole page.")
        return (f" Request {nxt} does not fit in the free pages, so the queue stops there: "
                "first come, first served, no skipping ahead.")
    if len(got) < len(want) and got == want[: len(got)]:
        i = len(got)
        if cached[i]:
            room = pages_needed(cached[i], S) * S - cached[i]
            return (f" Request {i} fits: it already holds {cached[i]} cached tokens in "
                    f"{pages_needed(cached[i], S)} pages, with room for {room} more in its last "
                    f"page, so bringing {want[i]} tokens takes only "
                    f"{_more_pages(cached[i], want[i], S)} new pages.")
        if want[i] < waiting[i]:
            return (f" Request {i} crosses the token budget: admit a chunk of "
                    f"{want[i]} tokens of it (the rest comes next step).")
        return (f" Request {i} fits: its {waiting[i]} tokens need "
                f"{pages_needed(waiting[i], S)} pages (no page is reserved for its first new "
                "token yet; decode asks for that one).")
    if len(got) == len(want) and got[:-1] == want[:-1] and got and got[-1] != want[-1]:
        return (f" The last request brings {want[-1]} tokens: the rest of the token budget "
                f"({budget - sum(want[:-1])}) or all it still has to prefill, whichever is "
                "smaller.")
    return ""


def _admit_cases(fn: Callable, cases: list[_AdmitCase]) -> None:
    """Fail on the first wrong case, preferring one whose mistake can be named."""
    problems: list[tuple[str, str]] = []
    for case in cases:
        got, want, what = _admit_call(fn, case)
        ok_type = isinstance(got, (list, tuple)) and all(
            isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in got)
        if not ok_type:
            raise CheckFailed(f"{what} returned {got!r}; return a list of ints: the tokens each "
                              f"admitted request prefills, here {want}")
        if [int(x) for x in got] != want:
            problems.append((f"{what} returned {list(got)}, expected {want}.",
                             _admit_hint(case, [int(x) for x in got], want)))
    if problems:
        message, hint = max(problems, key=lambda p: bool(p[1]))  # the first with a hint
        raise CheckFailed(message + hint)


def _new(waiting: list[int], free: int, S: int, budget: int, max_seqs: int) -> _AdmitCase:
    """A case where nothing is cached yet (new or preempted requests only)."""
    return waiting, [0] * len(waiting), free, S, budget, max_seqs


def _random_admit_case(partial: bool = False) -> _AdmitCase:
    S = [1, 2, 4, 16][_randint(0, 3)]
    waiting = [_randint(1, 6 * S + 3) for _ in range(_randint(1 if partial else 0, 7))]
    cached = [0] * len(waiting)
    if partial or (waiting and torch.rand(()) < 0.3):  # a prompt being chunked, near the head
        cached[_randint(0, min(1, len(waiting) - 1))] = _randint(1, 3 * S)
    need = sum(_more_pages(c, n, S) for c, n in zip(cached, waiting))
    free_pages = _randint(0, need + 2)
    budget = _randint(1, max(1, sum(waiting) + 4))
    max_seqs = _randint(1, 8)
    return waiting, cached, free_pages, S, budget, max_seqs


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


@exercise("ch08.admit", "admits at most max_seqs requests")
def _admit_max_seqs(fn: Callable) -> None:
    cases: list[_AdmitCase] = []
    for max_seqs in (0, 1, 2, 3, 5):
        waiting = [_randint(1, 8) for _ in range(max_seqs + _randint(1, 3))]
        cases.append(_new(waiting, 1000, 4, _NO_LIMIT, max_seqs))
    _admit_cases(fn, cases)


@exercise("ch08.admit", "equals the engine's Scheduler on 200 random queues")
def _admit_engine(fn: Callable) -> str:
    cases = [_random_admit_case() for _ in range(200)]
    _admit_cases(fn, cases)
    admitted = sum(len(engine_admit(*c)) for c in cases)
    return f"{admitted} requests admitted over 200 queues, exactly as the scheduler does"


# --- decode_step ------------------------------------------------------------------------------


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
                 want: tuple[list[int], list[int]]) -> str:
    num_tokens, free, S = case
    g_pre, w_pre = got[1], want[1]
    newly = [i for i, n in enumerate(num_tokens) if (n - 1) % S == 0]
    if not w_pre and g_pre:
        return (f" There were enough pages: only requests whose new token starts a page need "
                f"one (here {newly}), and free_pages = {free}.")
    if set(g_pre) > set(w_pre):
        return (" Too many preemptions: a preempted request gives back every page it holds, "
                "and the requests after it can use them.")
    if w_pre and g_pre and set(g_pre) != set(w_pre) and min(g_pre) < min(w_pre):
        return (" Preempt the newest request that has not got its page yet (the end of the "
                "list), never an older one: the oldest have waited longest.")
    if w_pre and not g_pre:
        return " Pages ran out: someone must be preempted, and nothing may be lost."
    if sorted(g_pre) == sorted(w_pre) and g_pre != w_pre:
        return " List the preempted requests in the order they were preempted (newest first)."
    return ""


def _decode_cases(fn: Callable, cases: list[_DecodeCase]) -> None:
    problems: list[tuple[str, str]] = []
    for case in cases:
        num_tokens, free, S = case
        what = f"decode_step(num_tokens={num_tokens}, free_pages={free}, page_size={S})"
        before = list(num_tokens)
        with own_work(fn, "decode_step"):
            got = fn(num_tokens, free, S)
        expect(num_tokens == before, f"{what} changed `num_tokens`; leave it as it is")
        want = engine_decode_step(before, free, S)
        if not (isinstance(got, (tuple, list)) and len(got) == 2
                and all(isinstance(x, (list, tuple)) for x in got)
                and all(isinstance(i, numbers.Integral) and not isinstance(i, bool)
                        for x in got for i in x)):
            raise CheckFailed(f"{what} returned {got!r}; return a tuple of two lists of ints "
                              f"(decoding, preempted), here {want}")
        g = ([int(i) for i in got[0]], [int(i) for i in got[1]])
        if sorted(g[0] + g[1]) != list(range(len(num_tokens))):
            problems.append((f"{what} returned {g}: every request must be in exactly one of the "
                             f"two lists (nothing is dropped); expected {want}.", ""))
        elif g != want:
            problems.append((f"{what} returned {g}, expected {want}.", _decode_hint(case, g, want)))
    if problems:
        message, hint = max(problems, key=lambda p: bool(p[1]))
        raise CheckFailed(message + hint)


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
def _decode_engine(fn: Callable) -> str:
    cases = [_random_decode_case(tight=bool(i % 2)) for i in range(200)]
    _decode_cases(fn, cases)
    preempted = sum(len(engine_decode_step(*c)[1]) for c in cases)
    return f"{preempted} preemptions over 200 batches, exactly as the scheduler does"


# --- ttft_tpot -------------------------------------------------------------------------------


def _short(x: object) -> str:
    return f"{x:.6g}" if isinstance(x, float) else repr(x)


def reference_ttft_tpot(arrival: float, token_times: list[float]) -> tuple[float, float]:
    """TTFT = first token - arrival; TPOT = mean gap between consecutive tokens after the first,
    (last - first) / (n - 1), and 0.0 for a single token (as RequestMetrics in llm.py)."""
    n = len(token_times)
    tpot = (token_times[-1] - token_times[0]) / (n - 1) if n > 1 else 0.0
    return token_times[0] - arrival, tpot


def _random_times(n: int, offset: float) -> tuple[float, list[float]]:
    """An arrival time and n increasing token times: a long, variable wait, then uneven gaps."""
    arrival = offset + float(torch.rand(())) * 10
    t = arrival + 0.05 + float(torch.rand(())) * 2  # queueing + prefill
    times = [t]
    for _ in range(n - 1):
        gap = float(torch.rand(())) * 0.05 + 0.001
        if torch.rand(()) < 0.15:
            gap += 0.3  # a stall: a prefill step of another request ran in between
        t += gap
        times.append(t)
    return arrival, times


def _ttft_hint(arrival: float, times: list[float], got: float, which: str) -> str:
    """Name the mistake behind a wrong ttft (which="ttft") or tpot (which="tpot")."""
    n = len(times)
    ttft, tpot = reference_ttft_tpot(arrival, times)
    nan = math.nan
    guesses = {
        "ttft": [
            (tpot if n > 1 else nan, " That is TPOT; return (ttft, tpot) in this order."),
            (times[1] - times[0] if n > 1 else nan, " TTFT is the wait from the request's "
             "arrival to its first token, not the first gap."),
            (times[0], " Subtract the arrival time: TTFT is a duration."),
            (times[-1] - arrival if n > 1 else nan, " TTFT ends at the first token, not the "
             "last."),
        ],
        "tpot": [
            ((times[-1] - arrival) / n, " TPOT leaves out the first token: its latency is "
             "TTFT's job. Average the gaps after it."),
            ((times[-1] - times[0]) / n if n > 1 else nan, " n tokens have only n - 1 gaps "
             "between them."),
            (times[-1] - times[-2] if n > 2 else nan, " TPOT is the mean of all gaps after the "
             "first token, not the last gap."),
            (1 / tpot if tpot else nan, " That is tokens per second; TPOT is seconds per token."),
            (tpot * 1000 if tpot else nan, " Keep seconds: the times are in seconds."),
            (ttft, " That is TTFT; TPOT comes second in the tuple."),
        ],
    }
    for wrong, hint in guesses[which]:
        if math.isclose(got, wrong, rel_tol=1e-6):
            return hint
    return ""


def _ttft_cases(fn: Callable, cases: list[tuple[float, list[float]]]) -> None:
    problems = []
    for arrival, times in cases:
        shown = [round(t, 4) for t in times[:4]] + (["..."] if len(times) > 4 else [])
        what = f"ttft_tpot(arrival={arrival:.4f}, token_times={shown} ({len(times)} tokens))"
        before = list(times)
        with own_work(fn, "ttft_tpot"):
            got = fn(arrival, times)
        expect(times == before, f"{what} changed token_times; leave it as it is")
        expect(isinstance(got, (tuple, list)) and len(got) == 2
               and all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in got),
               f"{what} returned {got!r}; return a tuple of two floats (ttft, tpot) in seconds")
        want = reference_ttft_tpot(arrival, before)
        for name, g, w in (("ttft", got[0], want[0]), ("tpot", got[1], want[1])):
            if not math.isclose(float(g), w, rel_tol=1e-6, abs_tol=1e-9):
                problems.append((f"{what}: {name} = {float(g):.6g}, expected {w:.6g}.",
                                 _ttft_hint(arrival, before, float(g), name)))
                break
    if problems:
        message, hint = max(problems, key=lambda p: bool(p[1]))
        raise CheckFailed(message + hint)


@exercise("ch08.ttft_tpot", "TTFT = first token time - arrival, on 20 random requests")
def _ttft(fn: Callable) -> None:
    cases = [_random_times(_randint(2, 40), offset=float(_randint(0, 1000))) for _ in range(20)]
    problems = []
    for arrival, times in cases:
        with own_work(fn, "ttft_tpot"):
            got = fn(arrival, list(times))
        expect(isinstance(got, (tuple, list)) and len(got) == 2,
               f"ttft_tpot returned {got!r}; return a tuple (ttft, tpot)")
        want = times[0] - arrival
        if not (isinstance(got[0], numbers.Real)
                and math.isclose(float(got[0]), want, rel_tol=1e-6, abs_tol=1e-9)):
            problems.append((f"ttft_tpot(arrival={arrival:.4f}, {len(times)} tokens, first at "
                             f"{times[0]:.4f}): ttft = {got[0]!r}, expected {want:.6g}.",
                             _ttft_hint(arrival, times, float(got[0]), "ttft")
                             if isinstance(got[0], numbers.Real) else ""))
    if problems:
        message, hint = max(problems, key=lambda p: bool(p[1]))
        raise CheckFailed(message + hint)


@exercise("ch08.ttft_tpot", "TPOT = mean gap between consecutive tokens after the first, on "
                            "uneven gaps and stalls")
def _tpot(fn: Callable) -> None:
    cases = [_random_times(_randint(2, 60), offset=float(_randint(0, 1000))) for _ in range(20)]
    cases.append((0.25, [1.0, 1.5]))
    _ttft_cases(fn, cases)


@exercise("ch08.ttft_tpot", "one token: TPOT is 0.0 (there is no gap)")
def _tpot_one(fn: Callable) -> None:
    cases = [_random_times(1, offset=float(_randint(0, 1000))) for _ in range(5)]
    for arrival, times in cases:
        with own_work(fn, "ttft_tpot"):
            got = fn(arrival, list(times))
        expect(isinstance(got, (tuple, list)) and len(got) == 2,
               f"ttft_tpot returned {got!r}; return a tuple (ttft, tpot)")
        expect(isinstance(got[1], numbers.Real) and not math.isnan(got[1]) and got[1] == 0.0,
               f"ttft_tpot(arrival={arrival:.4f}, token_times=[{times[0]:.4f}]) gave tpot "
               f"{_short(got[1])}; with one token there is no gap, and the engine reports 0.0")
    _ttft_cases(fn, cases)


@exercise("ch08.ttft_tpot", "works on perf_counter-sized clocks (1e6 s) and leaves the input "
                            "unchanged")
def _ttft_big(fn: Callable) -> None:
    cases = [_random_times(_randint(1, 30), offset=1e6 + float(_randint(0, 10**5)))
             for _ in range(10)]
    _ttft_cases(fn, cases)


# --- my_engine_step: the capstone -------------------------------------------------------------
#
# The learner's step drives the engine's own model (minimodel/engine/model.py) over a pool of
# pages, with their admit and decode_step (this chapter), paged_metadata and slot_mapping
# (chapter 07) and sample (chapter 05). It must give the same greedy tokens as mm.LLM.generate
# and run the same batches as the engine's Scheduler, step by step.

CAPSTONE_MODEL = "bard"
# One engine for every case: pages of 4 tokens, 10 pages (40 token slots), at most 16 tokens a
# step, at most 4 requests running. Small enough that prompts are chunked and pages run out.
CAPSTONE_SETTINGS = dict(page_size=4, num_pages=10, token_budget=16, max_seqs=4)
_TEXT = ("ROMEO.\nBut soft, what light through yonder window breaks?\nIt is the east, and Juliet "
         "is the sun.\n\nJULIET.\nO Romeo, Romeo, wherefore art thou Romeo?\n\n床前明月光，疑是"
         "地上霜。\n举头望明月，低头思故乡。\n")

# The learner's pieces the step must call: (how the learner knows it, its function's name)
_STEP_PIECES = (("admit (this notebook)", "admit"), ("decode_step (this notebook)", "decode_step"),
                ("ch07.paged_metadata", "paged_metadata"), ("ch07.slot_mapping", "slot_mapping"),
                ("ch05.sample", "sample"))


class _CheckedAllocator(PageAllocator):
    """The engine's free list, which says so when a step asks for pages it does not have."""

    def allocate(self, n: int) -> list[int]:
        if not isinstance(n, numbers.Integral) or n < 0:
            raise CheckFailed(f"your step asked the pool for {n!r} pages; ask for a whole number "
                              ">= 0 (0 when the request's pages already hold its tokens)")
        if n > self.num_free:
            raise CheckFailed(
                f"your step asked the pool for {_n(n, 'page')} with {self.num_free} free. The "
                "scheduling decision comes first: admit only what fits in the free pages, and "
                "in a decode step preempt before a request takes a page that is not there.")
        return super().allocate(int(n))

    def free(self, pages: list[int]) -> None:
        lent = set(range(self.num_pages)) - set(self._free)
        for p in pages:
            if p not in lent:
                raise CheckFailed(f"your step gave back page {p}, which is not lent out (given "
                                  "back twice?); return a request's pages once, then empty its "
                                  "page table")
            lent.discard(p)
        super().free(list(pages))


def _ints(t: object, what: str, n: int | None = None) -> list[int]:
    if isinstance(t, torch.Tensor):
        if t.dtype.is_floating_point or t.dim() != 1:
            raise CheckFailed(f"{what} should be a 1-D integer tensor, got {t.dtype} of shape "
                              f"{tuple(t.shape)}")
        out = t.tolist()
    elif isinstance(t, (list, tuple)):
        out = list(t)
    else:
        raise CheckFailed(f"{what} should be a tensor or a list of ints, got {type(t).__name__}")
    if not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in out):
        raise CheckFailed(f"{what} should hold ints, got {out[:8]}")
    if n is not None and len(out) != n:
        raise CheckFailed(f"{what} should have {n} entries, got {len(out)}")
    return [int(x) for x in out]


class PageTableBackend(TorchBackend):
    """The engine's torch paged attention, reading a step's metadata the way FlashInfer does.

    FlashInfer knows a request's length only from its page table (kv_indptr, kv_indices,
    kv_last_page_len), and writes each new K/V to its slot_mapping entry; the torch backend reads
    kv_lens. `plan` checks that the two descriptions agree, with a sentence when they do not.
    """

    def plan(self, metadata: AttentionMetadata) -> None:
        if not isinstance(metadata, AttentionMetadata):
            raise CheckFailed("engine.backend.plan takes an AttentionMetadata "
                              f"(minimodel.engine.attention), got {type(metadata).__name__}")
        m, S = metadata, self.kv_cache.page_size
        if m.page_size != S:
            raise CheckFailed(f"the metadata says page_size={m.page_size}; the pool's pages hold "
                              f"{S} tokens")
        q_lens, kv_lens = _ints(m.q_lens, "q_lens"), _ints(m.kv_lens, "kv_lens")
        B = len(q_lens)
        expect(B > 0 and len(kv_lens) == B, f"q_lens {q_lens} and kv_lens {kv_lens} should "
                                            "have one entry for each request of the step")
        qo = _ints(m.qo_indptr, "qo_indptr", B + 1)
        want_qo = [0, *(sum(q_lens[: i + 1]) for i in range(B))]
        expect(qo == want_qo, f"qo_indptr is {qo}; with q_lens {q_lens} request i's new tokens "
                              f"are rows qo_indptr[i]:qo_indptr[i+1] of the packed batch, so it "
                              f"should be {want_qo}")
        kv_indptr = _ints(m.kv_indptr, "kv_indptr", B + 1)
        kv_indices = _ints(m.kv_indices, "kv_indices", kv_indptr[-1])
        last = _ints(m.kv_last_page_len, "kv_last_page_len", B)
        for i in range(B):
            expect(1 <= q_lens[i] <= kv_lens[i], f"request {i} of the step brings {q_lens[i]} "
                   f"new tokens and has kv_len {kv_lens[i]}: kv_len counts every token cached "
                   "after this step, the new ones included")
            n_pages = kv_indptr[i + 1] - kv_indptr[i]
            described = (n_pages - 1) * S + last[i]
            expect(n_pages >= 1 and 1 <= last[i] <= S and described == kv_lens[i],
                   f"request {i} of the step: kv_indptr gives it {n_pages} pages and "
                   f"kv_last_page_len says its last page holds {_n(last[i], 'token')}, "
                   f"{_n(described, 'token')} in all, but it has {kv_lens[i]} after this step "
                   "(kv_lens). FlashInfer reads only the page table, so the two must agree.")
            bad = [p for p in kv_indices[kv_indptr[i]:kv_indptr[i + 1]]
                   if not 0 <= p < self.kv_cache.num_pages]
            expect(not bad, f"request {i} of the step lists page {bad[:1]} in kv_indices; the "
                            f"pool has pages 0..{self.kv_cache.num_pages - 1}")
        N = qo[-1]
        positions = _ints(m.positions, "positions", N)
        slots = _ints(m.slot_mapping, "slot_mapping", N)
        for i in range(B):
            want_pos = list(range(kv_lens[i] - q_lens[i], kv_lens[i]))
            got_pos = positions[qo[i]:qo[i + 1]]
            expect(got_pos == want_pos, f"positions of request {i} of the step are "
                   f"{_clip(got_pos)}; its new tokens come after its "
                   f"{kv_lens[i] - q_lens[i]} cached ones: {_clip(want_pos)}")
            pages = kv_indices[kv_indptr[i]:kv_indptr[i + 1]]
            for pos, got in zip(want_pos, slots[qo[i]:qo[i + 1]], strict=True):
                want = pages[pos // S] * S + pos % S
                expect(got == want,
                       f"slot_mapping sends the K/V of request {i}'s token at position {pos} to "
                       f"slot {got}, but its pages {pages} put position {pos} in slot {want}: "
                       "attention would not find it where it reads")
        super().plan(replace(
            m, qo_indptr=torch.tensor(qo, dtype=torch.int32),
            kv_indptr=torch.tensor(kv_indptr, dtype=torch.int32),
            kv_indices=torch.tensor(kv_indices, dtype=torch.int32),
            kv_last_page_len=torch.tensor(last, dtype=torch.int32),
            positions=torch.tensor(positions, dtype=torch.int64),
            slot_mapping=torch.tensor(slots, dtype=torch.int64), q_lens=q_lens, kv_lens=kv_lens))


def _n(k: int, noun: str) -> str:
    return f"{k} {noun}" + ("" if k == 1 else "s")


def _clip(xs: list[int], n: int = 8) -> str:
    return str(xs) if len(xs) <= n else f"[{', '.join(map(str, xs[:n]))}, ...]"


class EngineState:
    """Everything an engine step works on, between two steps.

    model: the engine's Qwen3 (minimodel/engine/model.py): model(input_ids [N], positions [N],
        backend) -> hidden [N, C]; model.compute_logits(hidden [b, C]) -> logits [b, V].
    backend: paged attention over the pool; backend.plan(metadata) once per step, before the
        model runs (the model calls it in every layer).
    allocator: the free pages: num_free, allocate(n) -> n page ids, free(pages).
    page_size, token_budget (tokens per step), max_seqs (requests running at once).
    waiting, running: lists of `Sequence` (minimodel/engine/sequence.py), oldest first.
    requests: every request added, by request_id.
    """

    def __init__(self, model: torch.nn.Module, page_size: int, num_pages: int,
                 token_budget: int, max_seqs: int) -> None:
        param = next(model.parameters())
        self.model = model
        self.kv_cache = KVCache(model.cfg, num_pages, page_size, param.dtype, param.device)
        self.backend = PageTableBackend(self.kv_cache, model.cfg.num_attention_heads,
                                        param.dtype)
        self.allocator: PageAllocator = _CheckedAllocator(num_pages)
        self.page_size, self.token_budget, self.max_seqs = page_size, token_budget, max_seqs
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
                raise CheckFailed(f"after {max_steps} steps requests are still left (waiting "
                                  f"{_ids(self.waiting)}, running {_ids(self.running)}); a "
                                  "request leaves `running` when it has its max_new_tokens")
            with own_work(step, "my_engine_step"), torch.inference_mode():
                ran = step(self)
            if not (isinstance(ran, (list, tuple)) and all(
                    isinstance(x, (list, tuple)) and len(x) == 2
                    and all(isinstance(v, numbers.Integral) for v in x) for x in ran)):
                raise CheckFailed(f"my_engine_step returned {ran!r}; return a list of "
                                  "(request_id, new tokens) pairs, one for each request it ran")
            trace.append([(int(r), int(q)) for r, q in ran])
        return trace


def _ids(seqs: list[Sequence]) -> list[int]:
    return [s.request_id for s in seqs]


def engine_schedule(prompt_lens: list[int], max_new: list[int], page_size: int, num_pages: int,
                    token_budget: int, max_seqs: int
                    ) -> tuple[list[list[tuple[int, int]]], list[bool], int, int]:
    """The engine's Scheduler on greedy requests of these lengths, all queued before step 1:
    (request id, new tokens) of every step, which steps were prefill steps, the preemptions
    and the prompt chunks (prefills of part of what a request had left).
    No model is needed: with EOS ignored, what is scheduled depends on the lengths alone."""
    sched = _scheduler(PageAllocator(num_pages), page_size, max_seqs, token_budget)
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
    """mm.LLM on the course's model with the capstone's settings (loaded once)."""
    from minimodel.engine.llm import LLM

    s = CAPSTONE_SETTINGS
    return LLM(CAPSTONE_MODEL, page_size=s["page_size"], num_pages=s["num_pages"],
               max_num_batched_tokens=s["token_budget"], max_num_seqs=s["max_seqs"])


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
                    lens, new, s["page_size"], s["num_pages"], s["token_budget"], s["max_seqs"])
        except ValueError:
            continue
        together = max((len(step) for step, k in zip(trace, kinds) if not k), default=0) >= 2
        good = (pre >= 1 and len(trace) <= 40) if tight else (
            pre == 0 and chunks >= 1 and together and len(trace) <= 25)
        if good:
            starts = [_randint(0, len(text) - x) for x in lens]
            prompts = [list(text[a:a + x]) for a, x in zip(starts, lens, strict=True)]
            name = "tight pool" if tight else "roomy pool"
            return CapstoneCase(name, prompts, new, trace, kinds, pre)
    raise AssertionError("no case drawn")  # the ranges above always give one quickly


_RUNS: dict[str, object] = {}  # the latest step function's runs, shared by its checks


def _run_case(fn: Callable, case: CapstoneCase) -> dict:
    s = CAPSTONE_SETTINGS
    engine = EngineState(_reference_llm().model, s["page_size"], s["num_pages"],
                         s["token_budget"], s["max_seqs"])
    for p, m in zip(case.prompts, case.max_new, strict=True):
        engine.add_request(p, m)
    out: dict = {"case": case, "engine": engine}
    try:
        out["trace"] = engine.run(fn, max_steps=2 * len(case.trace) + 10)
    except Exception as e:  # kept, and raised again by every check that needs this run
        out["error"] = e
    return out


def _capstone_runs(fn: Callable, fresh: bool = False) -> dict:
    """Both runs of `fn` (roomy, tight) under spy_calls; computed by the first check of a
    check() call and reused by the others."""
    if fresh or _RUNS.get("fn") is not fn:
        cases = [_draw_case(tight=False), _draw_case(tight=True)]
        with spy_calls(fn) as calls:
            runs = [_run_case(fn, c) for c in cases]
        _RUNS.clear()
        _RUNS.update(fn=fn, runs=runs, calls=dict(calls))
    return _RUNS


def _fmt(step: list[tuple[int, int]]) -> str:
    return ", ".join(f"r{r}({q})" for r, q in step) or "nothing"


def _compare_tokens(run: dict) -> str:
    if "error" in run:
        raise run["error"]
    case, engine = run["case"], run["engine"]
    want = reference_tokens(tuple(map(tuple, case.prompts)), tuple(case.max_new))
    for seq, w in zip(engine.requests, want, strict=True):
        got = seq.output_token_ids
        if got != w:
            k = next((i for i, (a, b) in enumerate(zip(got, w)) if a != b), min(len(got), len(w)))
            why = (" The first token is already wrong: it comes from the logits of the row of "
                   "the prompt's last token, once the whole prompt is in the cache." if k == 0
                   else " The first tokens agree, then they part: look at what a decode step "
                   "feeds the model (the last sampled token, at its position) and at what a "
                   "recomputed request brings.")
            raise CheckFailed(
                f"{case.name}, request r{seq.request_id} (prompt of {seq.num_prompt_tokens} "
                f"tokens): your engine generated {_clip(got, 10)}, mm.LLM.generate "
                f"{_clip(w, 10)}; they part at token {k}.{why if len(got) == len(w) else ''}"
                + ("" if len(got) == len(w) else
                   f" It should generate exactly max_new_tokens = {len(w)} tokens."))
    free = engine.allocator.num_free
    expect(free == engine.allocator.num_pages,
           f"{case.name}: every request is done but only {free} of the "
           f"{engine.allocator.num_pages} pages are back in the pool; a finished request "
           "gives back its pages")
    return (f"{len(want)} requests, {sum(map(len, want))} tokens, {len(case.trace)} steps"
            + (f", {_n(case.preemptions, 'preemption')}" if case.preemptions else ""))


@exercise("ch08.my_engine_step", "a roomy pool (chunked prefill, several requests decoding "
                                 "together): the same greedy tokens as mm.LLM.generate")
def _step_roomy(fn: Callable) -> str:
    return _compare_tokens(_capstone_runs(fn, fresh=True)["runs"][0])


@exercise("ch08.my_engine_step", "a tight pool (preemption and recompute): the same tokens, and "
                                 "every page back in the pool at the end")
def _step_tight(fn: Callable) -> str:
    return _compare_tokens(_capstone_runs(fn)["runs"][1])


@exercise("ch08.my_engine_step", "step by step, the same batches as the engine's scheduler")
def _step_trace(fn: Callable) -> None:
    for run in _capstone_runs(fn)["runs"]:
        if "error" in run:
            raise run["error"]
        case, got = run["case"], run["trace"]
        for k, want in enumerate(case.trace):
            mine = got[k] if k < len(got) else []
            if mine == want:
                continue
            kind = "prefill" if case.prefill[k] else "decode"
            why = (" A waiting request fits, so this is a prefill step: prefill comes first."
                   if case.prefill[k] and all(q == 1 for _, q in mine) and mine else
                   " No waiting request fits the free pages, so this is a decode step for "
                   "every running request." if not case.prefill[k] and any(q > 1 for _, q in mine)
                   else "")
            raise CheckFailed(f"{case.name}, step {k + 1}: your step ran {_fmt(mine)}; the "
                              f"engine's scheduler runs a {kind} step of {_fmt(want)}.{why}")
        expect(len(got) == len(case.trace), f"{case.name}: your engine took {len(got)} steps, "
                                            f"the engine's scheduler {len(case.trace)}")


@exercise("ch08.my_engine_step", "is built from your own admit, decode_step, ch07.paged_metadata, "
                                 "ch07.slot_mapping and ch05.sample")
def _step_pieces(fn: Callable) -> None:
    runs = _capstone_runs(fn)
    errors = [run["error"] for run in runs["runs"] if "error" in run]
    for e in errors:
        if isinstance(e, NotImplementedError):
            raise e
    missing = [what for what, name in _STEP_PIECES if not runs["calls"].get(name)]
    expect(not (missing and errors), "your step stopped before its runs were over (see the "
                                     "checks above), so it is not known yet whether it uses "
                                     f"your own {', '.join(missing)}")
    expect(not missing, f"your step never called your own {', '.join(missing)}: the capstone "
                        "composes your pieces, so a step built on the package's scheduler or "
                        "metadata does not count")
