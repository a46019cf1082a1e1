"""Checks of ch08.ttft_tpot: a request's time to first token and time per output token, by the
formulas of the engine's `RequestMetrics` (minimodel/engine/llm.py)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import torch

from minimodel.grading.ch08.common import _randint
from minimodel.grading.ch08.guard import own_work
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import Text, tr


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


def _ttft_hint(arrival: float, times: list[float], got: float, which: str) -> Text | str:
    """Name the mistake behind a wrong ttft (which="ttft") or tpot (which="tpot")."""
    n = len(times)
    ttft, tpot = reference_ttft_tpot(arrival, times)
    nan = math.nan
    guesses = {
        "ttft": [
            (tpot if n > 1 else nan, tr(" That is TPOT; return (ttft, tpot) in this order.")),
            (times[1] - times[0] if n > 1 else nan, tr(" TTFT is the wait from the request's "
                                                       "arrival to its first token, not the "
                                                       "first gap.")),
            (times[0], tr(" Subtract the arrival time: TTFT is a duration.")),
            (times[-1] - arrival if n > 1 else nan, tr(" TTFT ends at the first token, not the "
                                                       "last.")),
        ],
        "tpot": [
            ((times[-1] - arrival) / n, tr(" TPOT leaves out the first token: its latency is "
                                           "TTFT's job. Average the gaps after it.")),
            ((times[-1] - times[0]) / n if n > 1 else nan, tr(" n tokens have only n - 1 gaps "
                                                              "between them.")),
            (times[-1] - times[-2] if n > 2 else nan, tr(" TPOT is the mean of all gaps after "
                                                         "the first token, not the last gap.")),
            (1 / tpot if tpot else nan, tr(" That is tokens per second; TPOT is seconds per "
                                           "token.")),
            (tpot * 1000 if tpot else nan, tr(" Keep seconds: the times are in seconds.")),
            (ttft, tr(" That is TTFT; TPOT comes second in the tuple.")),
        ],
    }
    for wrong, hint in guesses[which]:
        if math.isclose(got, wrong, rel_tol=1e-6):
            return hint
    return ""


def _ttft_cases(fn: Callable, cases: list[tuple[float, list[float]]]) -> None:
    problems: list[tuple[Text, bool]] = []  # (message, whether it names the mistake)
    for arrival, times in cases:
        shown = [round(t, 4) for t in times[:4]] + (["..."] if len(times) > 4 else [])
        what = tr("ttft_tpot(arrival={arrival:.4f}, token_times={shown} ({n} tokens))",
                  arrival=arrival, shown=shown, n=len(times))
        before = list(times)
        with own_work(fn, "ttft_tpot"):
            got = fn(arrival, times)
        expect(times == before, tr("{what} changed token_times; leave it as it is", what=what))
        expect(isinstance(got, (tuple, list)) and len(got) == 2
               and all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in got),
               tr("{what} returned {got!r}; return a tuple of two floats (ttft, tpot) in seconds",
                  what=what, got=got))
        want = reference_ttft_tpot(arrival, before)
        for name, g, w in (("ttft", got[0], want[0]), ("tpot", got[1], want[1])):
            if not math.isclose(float(g), w, rel_tol=1e-6, abs_tol=1e-9):
                hint = _ttft_hint(arrival, before, float(g), name)
                problems.append((tr("{what}: {name} = {got:.6g}, expected {want:.6g}.{hint}",
                                    what=what, name=name, got=float(g), want=w, hint=hint),
                                 bool(hint)))
                break
    if problems:
        message, _ = max(problems, key=lambda p: p[1])
        raise CheckFailed(message)


@exercise("ch08.ttft_tpot", "TTFT = first token time - arrival, on 20 random requests")
def _ttft(fn: Callable) -> None:
    cases = [_random_times(_randint(2, 40), offset=float(_randint(0, 1000))) for _ in range(20)]
    problems: list[tuple[Text, bool]] = []
    for arrival, times in cases:
        with own_work(fn, "ttft_tpot"):
            got = fn(arrival, list(times))
        expect(isinstance(got, (tuple, list)) and len(got) == 2,
               tr("ttft_tpot returned {got!r}; return a tuple (ttft, tpot)", got=got))
        want = times[0] - arrival
        if not (isinstance(got[0], numbers.Real)
                and math.isclose(float(got[0]), want, rel_tol=1e-6, abs_tol=1e-9)):
            hint = (_ttft_hint(arrival, times, float(got[0]), "ttft")
                    if isinstance(got[0], numbers.Real) else "")
            problems.append((tr("ttft_tpot(arrival={arrival:.4f}, {n} tokens, first at "
                                "{first:.4f}): ttft = {got!r}, expected {want:.6g}.{hint}",
                                arrival=arrival, n=len(times), first=times[0], got=got[0],
                                want=want, hint=hint), bool(hint)))
    if problems:
        message, _ = max(problems, key=lambda p: p[1])
        raise CheckFailed(message)


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
               tr("ttft_tpot returned {got!r}; return a tuple (ttft, tpot)", got=got))
        expect(isinstance(got[1], numbers.Real) and not math.isnan(got[1]) and got[1] == 0.0,
               tr("ttft_tpot(arrival={arrival:.4f}, token_times=[{first:.4f}]) gave tpot "
                  "{got}; with one token there is no gap, and the engine reports 0.0",
                  arrival=arrival, first=times[0], got=_short(got[1])))
    _ttft_cases(fn, cases)


@exercise("ch08.ttft_tpot", "works on perf_counter-sized clocks (1e6 s) and leaves the input "
                            "unchanged")
def _ttft_big(fn: Callable) -> None:
    cases = [_random_times(_randint(1, 30), offset=1e6 + float(_randint(0, 10**5)))
             for _ in range(10)]
    _ttft_cases(fn, cases)
