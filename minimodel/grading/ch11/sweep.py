"""Checks of ch11.sweep: a fair concurrency sweep (a warm-up alone, then every prompt once at
every level, n clients at level n, one level after another) and its rows (nearest-rank
percentiles, wall_s and throughput).

A stand-in server (_SweepServer) writes down when each call starts and ends, in one sequence with
the clock's readings, so that the checks see the order of events without comparing timings; the
last check runs the sweep against the real server.
"""

from __future__ import annotations

import itertools
import math
import numbers
import threading
import time
from collections.abc import Callable

import httpx
import torch

from minimodel.grading.ch11.server import _live_events, _on_server
from minimodel.grading.ch11.timed import reference_timing
from minimodel.grading.core import exercise, expect
from minimodel.grading.i18n import Text, tr

SWEEP_PROMPTS = [f"prompt {i}: " + "word " * i for i in range(10)]
SWEEP_LEVELS = [1, 3, 4, 2]
_WAVE_DEADLINE_S = 10.0  # how long the first requests of a level wait for the others
_ROW_KEYS = ("concurrency", "requests", "tokens", "wall_s", "throughput", "ttft_p50", "ttft_p90",
             "tpot_p50", "tpot_p90")


def nearest_rank(values: list[float], p: float) -> float:
    """The p-th percentile, nearest rank: the smallest value with p % of the values <= it."""
    ordered = sorted(values)
    return ordered[max(math.ceil(p / 100 * len(ordered)), 1) - 1]


def _tokens_of(prompt: str) -> int:
    return 3 + len(prompt) % 7


class _SweepServer:
    """A stand-in for one streamed request, which writes down when each call starts and ends
    (in one sequence with the clock's readings) and how many calls are in flight.

    The first calls of a level wait (up to a deadline) until as many calls of the level have
    started as the level claims, so that 'started together' does not depend on the machine's
    speed; later calls return at once."""

    def __init__(self, prompts: list[str], levels: list[int]) -> None:
        self.prompts, self.levels = prompts, levels
        self.cond = threading.Condition()
        self.seq = itertools.count()
        self.calls: list[dict] = []
        self.readings: list[tuple[int, float]] = []
        self.in_flight = 0
        self.gave_up = False

    def clock(self) -> float:
        with self.cond:
            value = time.perf_counter()
            self.readings.append((next(self.seq), value))
            return value

    def level_of(self, k: int) -> int:
        """The level of the k-th call (-1: the warm-up)."""
        return -1 if k == 0 else (k - 1) // len(self.prompts)

    def run_one(self, prompt: str) -> dict:
        with self.cond:
            k = len(self.calls)
            level = self.level_of(k)
            cold = k == 0
            call = {"prompt": prompt, "level": level, "start": next(self.seq),
                    "thread": threading.get_ident(),
                    "ttft_s": 30.0 + float(torch.rand(())) if cold else
                    0.01 + float(torch.rand(())), "tpot_s": 1.0 if cold else
                    0.001 + float(torch.rand(())) / 10, "completion_tokens": _tokens_of(prompt)}
            self.calls.append(call)
            self.in_flight += 1
            self.cond.notify_all()
            if 0 <= level < len(self.levels) and (k - 1) % len(self.prompts) < self.levels[level]:
                need = min(self.levels[level], len(self.prompts))
                deadline = time.monotonic() + _WAVE_DEADLINE_S
                while not self.gave_up and sum(c["level"] == level for c in self.calls) < need:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self.gave_up = True
                        break
                    self.cond.wait(left)
            self.in_flight -= 1
            call["end"] = next(self.seq)
            return {key: call[key] for key in ("ttft_s", "tpot_s", "completion_tokens")}


def _rows(rows: object, levels: list[int]) -> list[dict]:
    expect(isinstance(rows, list) and all(isinstance(r, dict) for r in rows),
           tr("sweep returned {got}; return a list of dicts, one row per level",
              got=str(rows)[:100]))
    expect(len(rows) == len(levels), tr("sweep returned {n} rows for {levels} levels",
                                        n=len(rows), levels=len(levels)))
    for row in rows:
        missing = [k for k in _ROW_KEYS if k not in row]
        expect(not missing, tr("a row has no {missing}; each row has {keys}", missing=missing,
                               keys=", ".join(_ROW_KEYS)))
    got = [r["concurrency"] for r in rows]
    expect(got == levels, tr("the rows are for concurrency {got}; expected {levels}, in order",
                             got=got, levels=levels))
    return rows


def _calls_by_level(server: _SweepServer) -> list[list[dict]]:
    P, L = len(server.prompts), len(server.levels)
    total = len(server.calls)
    expect(total == 1 + L * P, tr("run_one was called {total} times; a sweep of {L} levels over "
                                  "{P} prompts makes {calls} calls: one warm-up, then every "
                                  "prompt once at every level", total=total, L=L, P=P,
                                  calls=1 + L * P))
    return [[c for c in server.calls if c["level"] == i] for i in range(L)]


_SWEEPS: dict[str, object] = {}


def _sweep_run(
    fn: Callable, fresh: bool = False,
) -> tuple[_SweepServer, list[dict], list[list[dict]]]:
    """The learner's sweep over the stand-in (run by the first check of a check() call): the
    stand-in, the rows and the calls of each level, once their form is checked."""
    if fresh or _SWEEPS.get("fn") is not fn:
        server = _SweepServer(list(SWEEP_PROMPTS), list(SWEEP_LEVELS))
        rows = fn(server.run_one, list(SWEEP_PROMPTS), list(SWEEP_LEVELS), server.clock)
        _SWEEPS.clear()
        _SWEEPS.update(fn=fn, server=server, rows=rows)
    server = _SWEEPS["server"]
    return server, _rows(_SWEEPS["rows"], server.levels), _calls_by_level(server)


@exercise("ch11.sweep", "one row per level; each level sends every prompt once: the same "
                        "requests and tokens at every level")
def _sweep_same(fn: Callable) -> Text:
    server, rows, by_level = _sweep_run(fn, fresh=True)
    tokens = sum(_tokens_of(p) for p in server.prompts)
    for n, calls, row in zip(server.levels, by_level, rows):
        sent = sorted(c["prompt"] for c in calls)
        expect(sent == sorted(server.prompts), tr(
            "at concurrency {n} the sweep sent {different} different prompts ({sent} requests); "
            "send each of the {prompts} prompts once at every level, so that the levels compare "
            "the same work", n=n, different=len(set(sent)), sent=len(sent),
            prompts=len(server.prompts)))
        expect(row["requests"] == len(server.prompts) and row["tokens"] == tokens, tr(
            "the row of concurrency {n} says {requests} requests and {tokens} tokens; its "
            "requests were {calls}, their completion_tokens add up to {want}", n=n,
            requests=row["requests"], tokens=row["tokens"], calls=len(calls), want=tokens))
    return tr("{levels} levels of {n} requests, {tokens} tokens each", levels=len(server.levels),
              n=len(server.prompts), tokens=tokens)


def _bracketing(server: _SweepServer, after: int, before: int) -> list[tuple[int, float]]:
    return [(s, v) for s, v in server.readings if after < s < before]


@exercise("ch11.sweep", "a warm-up request runs alone before the first level, and is counted in "
                        "no row and in no wall_s")
def _sweep_warmup(fn: Callable) -> None:
    server, rows, by_level = _sweep_run(fn)
    warm = server.calls[0]
    expect(all(c["start"] > warm["end"] for c in server.calls[1:]),
           tr("the first request ran together with others: warm up with one request alone, "
              "before the first level starts"))
    for row in rows:
        expect(row["ttft_p90"] < 30.0, tr(
            "the row of concurrency {n} has a TTFT p90 of 30 s or more: the warm-up's cold start "
            "is counted; leave it out", n=row["concurrency"]))
    first = by_level[0]
    readings = _bracketing(server, warm["end"], min(c["start"] for c in first))
    expect(bool(readings), tr("no clock reading lies between the end of the warm-up and the "
                              "first request of the first level: start the level's clock after "
                              "the warm-up"))


def _peak(calls: list[dict]) -> int:
    return max(sum(d["start"] <= c["start"] < d["end"] for d in calls) for c in calls)


@exercise("ch11.sweep", "level n has n requests in flight at once, started together, never "
                        "more; one level after another")
def _sweep_concurrency(fn: Callable) -> None:
    server, _, by_level = _sweep_run(fn)
    for i, (n, calls) in enumerate(zip(server.levels, by_level)):
        peak = _peak(calls)
        expect(peak <= n, tr("at concurrency {n}, {peak} requests were in flight at once", n=n,
                             peak=peak))
        threads = len({c["thread"] for c in calls})
        expect(threads <= n, tr("at concurrency {n}, {threads} threads sent requests: {n} "
                                "clients", n=n, threads=threads))
        expect(peak >= n, tr(
            "at concurrency {n} at most {peak} requests were in flight at once (the first ones "
            "waited {wait:g} s for the others): start {n} clients together, each taking the next "
            "prompt when its request is done", n=n, peak=peak, wait=_WAVE_DEADLINE_S))
        if i + 1 < len(by_level):
            expect(max(c["end"] for c in calls) < min(c["start"] for c in by_level[i + 1]), tr(
                "requests of concurrency {next} started while those of concurrency {n} were "
                "still in flight: run the levels one after another", next=server.levels[i + 1],
                n=n))


@exercise("ch11.sweep", "p50 and p90 (nearest rank) of the level's own TTFTs and TPOTs; "
                        "throughput = tokens / wall_s, with wall_s read from `clock` around the "
                        "level")
def _sweep_numbers(fn: Callable) -> None:
    server, rows, by_level = _sweep_run(fn)
    ends = [server.calls[0]["end"]] + [max(c["end"] for c in calls) for calls in by_level]
    starts = [min(c["start"] for c in calls) for calls in by_level] + [next(server.seq)]
    for i, (n, calls, row) in enumerate(zip(server.levels, by_level, rows)):
        for key in ("ttft", "tpot"):
            for p in (50, 90):
                want = nearest_rank([c[f"{key}_s"] for c in calls], p)
                got = row[f"{key}_p{p}"]
                expect(isinstance(got, numbers.Real) and math.isclose(got, want, rel_tol=1e-9),
                       tr("concurrency {n}: {key}_p{p} = {got!r}, expected {want!r}, the "
                          "nearest-rank p{p} of the {k} {name}s of this level: "
                          "sorted(values)[ceil({frac:g} * {k}) - 1]", n=n, key=key, p=p,
                          got=got, want=want, k=len(calls), name=key.upper(), frac=p / 100))
        wall = row["wall_s"]
        before = _bracketing(server, ends[i], starts[i])
        after = _bracketing(server, ends[i + 1], starts[i + 1])
        expect(isinstance(wall, numbers.Real) and any(
            math.isclose(b - a, wall, rel_tol=1e-9, abs_tol=1e-12)
            for _, a in before for _, b in after),
            tr("concurrency {n}: wall_s = {wall!r} is not the time between a reading of `clock` "
               "before the level's first request and one after its last: time the whole level, "
               "and only it, with the clock you are given", n=n, wall=wall))
        expect(isinstance(row["throughput"], numbers.Real)
               and math.isclose(row["throughput"], row["tokens"] / wall, rel_tol=1e-9),
               tr("concurrency {n}: throughput = {got!r}; it is tokens / wall_s = {want!r} "
                  "(tokens per second, all clients together)", n=n, got=row["throughput"],
                  want=row["tokens"] / wall))


@exercise("ch11.sweep", "the real server: levels 1, 2 and 4 over 4 prompts, the same tokens at "
                        "every level")
@_on_server
def _sweep_server(fn: Callable, server) -> Text:
    prompts = ["ROMEO.\n", "JULIET.\n", "床前明月光，", "春眠不觉晓，"]
    calls = []
    lock = threading.Lock()

    def run_one(prompt: str) -> dict:
        start = time.perf_counter()
        with httpx.stream("POST", server.url + "/v1/completions", timeout=120, json={
                "model": server.model_name, "prompt": prompt, "max_tokens": 6, "temperature": 0,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}
        }) as response:
            stamped = [(time.perf_counter(), e) for e in _live_events(response)]
        with lock:
            calls.append(prompt)
        return reference_timing(stamped, start)

    rows = _rows(fn(run_one, prompts, [1, 2, 4], time.perf_counter), [1, 2, 4])
    expect(len(calls) == 1 + 3 * len(prompts), tr("run_one was called {n} times", n=len(calls)))
    for row in rows:
        expect(row["tokens"] == 6 * len(prompts) and row["requests"] == len(prompts), tr(
            "the row of concurrency {n} says {requests} requests, {tokens} tokens; each level "
            "sent {sent} requests of 6 tokens", n=row["concurrency"], requests=row["requests"],
            tokens=row["tokens"], sent=len(prompts)))
        numbers_ok = all(isinstance(row[k], numbers.Real) and math.isfinite(row[k]) and row[k] >= 0
                         for k in _ROW_KEYS)
        expect(numbers_ok, tr("the row of concurrency {n} holds {row}", n=row["concurrency"],
                              row=row))
    return tr("{levels} levels of {n} requests on the real server", levels=len(rows),
              n=len(prompts))
