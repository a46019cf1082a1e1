"""Checks of chapter 08 (the engine): admit, decode_step, ttft_tpot.

`admit` and `decode_step` are the two decisions of the engine's scheduler
(minimodel/engine/scheduler.py): which waiting requests start their prefill this step, and, in a
decode step, which running requests get a page for their new token and which are preempted when
pages run out. The expected answers come from the engine itself: each case builds a real
`Scheduler` over a real `PageAllocator`, queues `Sequence`s of the given lengths and asks it for
the next step. `ttft_tpot` follows the formulas of the engine's `RequestMetrics` (llm.py).

Names: S page size, n a request's tokens, pages_needed(n) = ceil(n / S).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import torch

from minimodel.engine.kv_cache import PageAllocator, pages_needed
from minimodel.engine.scheduler import Scheduler
from minimodel.engine.sequence import Sequence, Status
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.sampling import SamplingParams

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


# --- admit -------------------------------------------------------------------------------------


def engine_admit(
    waiting: list[int], free_pages: int, page_size: int, token_budget: int, max_seqs: int
) -> list[int]:
    """What the engine's Scheduler prefills in its next step, for new requests of these prompt
    lengths (oldest first) and nothing running: the new tokens of each admitted request."""
    sched = _scheduler(PageAllocator(free_pages), page_size, max_seqs, token_budget)
    for i, n in enumerate(waiting):
        sched.add(Sequence(i, [0] * n, SamplingParams()))
    batch = sched.schedule()
    if batch is None or not batch.is_prefill:
        return []
    assert [s.request_id for s in batch.seqs] == list(range(len(batch.seqs)))
    return list(batch.q_lens)


_AdmitCase = tuple[list[int], int, int, int, int]


def _admit_call(fn: Callable, case: _AdmitCase) -> tuple[object, list[int], str]:
    """(what fn returned, what the engine does, a description of the call)."""
    waiting, free_pages, S, budget, max_seqs = case
    what = (f"admit(waiting={waiting}, free_pages={free_pages}, page_size={S}, "
            f"token_budget={budget}, max_seqs={max_seqs})")
    before = list(waiting)
    got = fn(waiting, free_pages, S, budget, max_seqs)
    expect(waiting == before, f"{what} changed the `waiting` list to {waiting}; leave the queue "
                              "as it is (the scheduler removes requests itself)")
    return got, engine_admit(before, free_pages, S, budget, max_seqs), what


def _admit_hint(case: _AdmitCase, got: list[int], want: list[int]) -> str:
    """Name the classic mistake behind a wrong answer, when it is recognisable."""
    waiting, free_pages, S, budget, max_seqs = case
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
        return (f" Request {nxt} does not fit in the free pages, so the queue stops there: "
                "first come, first served, no skipping ahead.")
    if len(got) == len(want) + 1 and got[:-1] == want:
        return " Admitting one request more than fits: count pages with ceil, not floor."
    if len(got) < len(want) and got == want[: len(got)]:
        i = len(got)
        if want[i] < waiting[i]:
            return (f" Request {i} crosses the token budget: admit a chunk of "
                    f"{want[i]} tokens of it (the rest comes next step).")
        return (f" Request {i} fits: it needs ceil({waiting[i]} / {S}) = "
                f"{pages_needed(waiting[i], S)} pages (no page is reserved for its first new "
                "token yet; decode asks for that one).")
    if len(got) == len(want) and got[:-1] == want[:-1] and got and got[-1] != want[-1]:
        return (f" The last request brings {want[-1]} tokens: the rest of the token budget "
                f"({budget - sum(want[:-1])}) or its whole prompt, whichever is smaller.")
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


def _random_admit_case() -> _AdmitCase:
    S = [1, 2, 4, 16][_randint(0, 3)]
    waiting = [_randint(1, 6 * S + 3) for _ in range(_randint(0, 7))]
    need = sum(pages_needed(n, S) for n in waiting)
    free_pages = _randint(0, need + 2)
    budget = _randint(1, max(1, sum(waiting) + 4))
    max_seqs = _randint(1, 8)
    return waiting, free_pages, S, budget, max_seqs


@exercise("ch08.admit", "returns a list of ints; [] when the queue is empty or nothing fits")
def _admit_types(fn: Callable) -> None:
    cases: list[_AdmitCase] = [([], 10, 4, 64, 4), ([9], 0, 4, 64, 4), ([9, 3], 2, 4, 64, 4)]
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
            cases.append((waiting, free, S, _NO_LIMIT, 16))
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
        cases.append((head + [big] + small, free, S, _NO_LIMIT, 16))
    _admit_cases(fn, cases)


@exercise("ch08.admit", "token budget: whole prompts while they fit, then one chunk of the "
                        "prompt that crosses it, and nothing after that")
def _admit_budget(fn: Callable) -> None:
    cases: list[_AdmitCase] = []
    for _ in range(12):
        S = [1, 4, 16][_randint(0, 2)]
        waiting = [_randint(1, 40) for _ in range(_randint(1, 6))]
        budget = _randint(1, sum(waiting))
        cases.append((waiting, 1000, S, budget, 16))
    # a chunk needs pages for its own tokens only
    cases.append(([100, 3], 2, 16, 20, 16))
    cases.append(([5, 64, 2], 3, 16, 30, 16))
    _admit_cases(fn, cases)


@exercise("ch08.admit", "admits at most max_seqs requests")
def _admit_max_seqs(fn: Callable) -> None:
    cases: list[_AdmitCase] = []
    for max_seqs in (1, 2, 3, 5):
        waiting = [_randint(1, 8) for _ in range(max_seqs + _randint(0, 3))]
        cases.append((waiting, 1000, 4, _NO_LIMIT, max_seqs))
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
                f"one (here {newly}: token n-1 starts a page when (n-1) % page_size == 0), and "
                f"free_pages = {free}.")
    if set(g_pre) > set(w_pre):
        return (" Too many preemptions: a preempted request gives back all its pages "
                "(ceil((n-1) / page_size)), and the others can use them.")
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
            ((times[-1] - times[0]) / n if n > 1 else nan, " n tokens have n - 1 gaps between "
             "them: divide by n - 1."),
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
