"""Checks of ch11.timed_stream: a request's text, tokens, TTFT and TPOT measured on the client's
side (`reference_timing`).

On synthetic streams the clock is the check's own (_FakeClock shows the arrival time of the
latest event); on the real server the check records every reading of the clock. Timings are
never compared: a check only checks which clock readings a number was computed from.
"""

from __future__ import annotations

import json
import math
import numbers
import time
from collections.abc import Callable, Iterator

import httpx
import torch

from minimodel.grading.ch11.common import _randint, _synthetic_stream
from minimodel.grading.ch11.server import _live_events, _on_server, _post
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import Text, tr


def _piece(choice: dict) -> str:
    """The text one choice of a stream event carries ('' for none)."""
    return (choice["text"] if "text" in choice else choice["delta"].get("content")) or ""


def reference_timing(stamped: list[tuple[float, dict]], start: float) -> dict:
    """What timed_stream returns for events that arrived at these times."""
    texts = [(t, "".join(_piece(c) for c in e["choices"])) for t, e in stamped]
    texts = [(t, x) for t, x in texts if x]
    tokens = next(e["usage"]["completion_tokens"] for _, e in stamped if e.get("usage"))
    first, last = texts[0][0], texts[-1][0]
    return {"text": "".join(x for _, x in texts), "completion_tokens": tokens,
            "ttft_s": first - start, "tpot_s": (last - first) / (tokens - 1) if tokens > 1 else 0.0}


class _FakeClock:
    """A clock that shows the arrival time of the latest event the stream handed out."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _timed_case(chat: bool, one_token: bool = False) -> tuple[float, list[tuple[float, dict]]]:
    events = _synthetic_stream(1, chat, usage=True)
    content = sum(bool(_piece(c)) for e in events for c in e["choices"])
    if one_token:
        keep = next(k for k, e in enumerate(events) if any(_piece(c) for c in e["choices"]))
        events = [e for k, e in enumerate(events) if k <= keep or not e["choices"]
                  or not any(_piece(c) for c in e["choices"])]
        content = 1
    tokens = 1 if one_token else content + _randint(0, 6)
    events[-1]["usage"] = {"prompt_tokens": 5, "completion_tokens": tokens,
                           "total_tokens": 5 + tokens}
    start = [0.0, 1e6][_randint(0, 1)] + float(torch.rand(())) * 100
    t, stamped = start + 0.02 + float(torch.rand(())) * 2, []
    for e in events:
        stamped.append((t, e))
        t += float(torch.rand(())) * 0.05 + 0.001 + (0.3 if torch.rand(()) < 0.15 else 0.0)
    return start, stamped


def _timed_call(fn: Callable, start: float, stamped: list[tuple[float, dict]]) -> dict:
    clock = _FakeClock(start)

    def events() -> Iterator[dict]:
        for t, e in stamped:
            clock.now = t  # the event has just arrived
            yield json.loads(json.dumps(e))

    got = fn(events(), start, clock)
    expect(isinstance(got, dict), tr("timed_stream returned {got!r}; return a dict with text, "
                                     "completion_tokens, ttft_s and tpot_s", got=got))
    missing = {"text", "completion_tokens", "ttft_s", "tpot_s"} - set(got)
    expect(not missing, tr("timed_stream's answer has no {missing}", missing=sorted(missing)))
    return got


def _timed_cases(fn: Callable, keys: tuple[str, ...], cases: list) -> None:
    for chat, start, stamped in cases:
        got = _timed_call(fn, start, stamped)
        want = reference_timing(stamped, start)
        arrivals = [round(t - start, 4) for t, _ in stamped]
        what = tr("a {kind} stream of {n} events arriving {arrivals}{more} s after start, "
                  "{tokens} tokens", kind="chat" if chat else "completions", n=len(stamped),
                  arrivals=arrivals[:6], more="..." if len(arrivals) > 6 else "",
                  tokens=want["completion_tokens"])
        for key in keys:
            g, w = got[key], want[key]
            if isinstance(w, float):
                ok = isinstance(g, numbers.Real) and math.isclose(g, w, rel_tol=1e-6,
                                                                  abs_tol=1e-9)
            else:
                ok = g == w
            if not ok:
                hint = ""
                if key == "ttft_s" and chat and isinstance(g, numbers.Real) and math.isclose(
                        g, stamped[0][0] - start, rel_tol=1e-6):
                    hint = tr(" The first event of a chat stream only says the role: the first "
                              "text comes later.")
                raise CheckFailed(tr("{what}: {key} = {got!r}, expected {want!r}.{hint}",
                                     what=what, key=key, got=g, want=w, hint=hint))


@exercise("ch11.timed_stream", "TTFT: from `start` to the first event that carries text (not "
                               "the chat role event, not an empty chunk)")
def _timed_ttft(fn: Callable) -> None:
    _timed_cases(fn, ("ttft_s",), [(c, *_timed_case(c)) for c in [False, True] * 6])


@exercise("ch11.timed_stream", "TPOT: (last text - first text) / (completion_tokens - 1), the "
                               "tokens from the usage chunk; 0.0 for one token")
def _timed_tpot(fn: Callable) -> None:
    cases = [(c, *_timed_case(c)) for c in [False, True] * 6]
    cases += [(c, *_timed_case(c, one_token=True)) for c in (False, True)]
    _timed_cases(fn, ("completion_tokens", "tpot_s"), cases)


@exercise("ch11.timed_stream", "the text joined; a stream without a usage chunk is a ValueError")
def _timed_text(fn: Callable) -> None:
    _timed_cases(fn, ("text",), [(c, *_timed_case(c)) for c in [False, True] * 3])
    start, stamped = _timed_case(False)
    stamped = [(t, e) for t, e in stamped if e["choices"]]
    try:
        _timed_call(fn, start, stamped)
    except ValueError:
        return
    raise CheckFailed(tr("a stream without a usage chunk gave an answer: without usage the "
                         "client cannot know how many tokens came (a chunk may hold several, or "
                         "none); raise ValueError saying to ask for stream_options.include_usage"))


@exercise("ch11.timed_stream", "the real server: the text and tokens of the answer without "
                               "streaming, and TTFT and TPOT read from the clock at the events")
@_on_server
def _timed_server(fn: Callable, server) -> Text:
    body = {"model": server.model_name, "prompt": "床前明月光，", "max_tokens": 10,
            "temperature": 0, "ignore_eos": True}
    whole = _post(server, "/v1/completions", body)
    readings: list[float] = []

    def clock() -> float:
        readings.append(time.perf_counter())
        return readings[-1]

    start = clock()
    with httpx.stream("POST", server.url + "/v1/completions", timeout=120, json={
            **body, "stream": True, "stream_options": {"include_usage": True}}) as response:
        got = fn(_live_events(response), start, clock)
    expect(isinstance(got, dict), tr("timed_stream returned {got!r}", got=got))
    expect(got.get("text") == whole["choices"][0]["text"],
           tr("timed_stream's text is {got!r}; without streaming the server answers {want!r}",
              got=got.get("text"), want=whole["choices"][0]["text"]))
    want_tokens = whole["usage"]["completion_tokens"]
    expect(got.get("completion_tokens") == want_tokens,
           tr("completion_tokens = {got!r}, the server generated {want}",
              got=got.get("completion_tokens"), want=want_tokens))
    ttft, tpot = got.get("ttft_s"), got.get("tpot_s")
    expect(isinstance(ttft, numbers.Real) and isinstance(tpot, numbers.Real),
           tr("ttft_s and tpot_s should be numbers of seconds, got {ttft!r} and {tpot!r}",
              ttft=ttft, tpot=tpot))
    first = [r for r in readings[1:] if math.isclose(r - start, ttft, rel_tol=1e-9,
                                                     abs_tol=1e-12)]
    expect(bool(first), tr("ttft_s is not the time between `start` and a reading of `clock`: "
                           "read the time with the clock you are given, when an event arrives"))
    last = first[0] + tpot * (want_tokens - 1)
    expect(any(math.isclose(r, last, rel_tol=1e-12, abs_tol=1e-9) for r in readings),
           tr("tpot_s * (completion_tokens - 1) does not lead from the first text to a reading "
              "of `clock`: measure from the first text to the last"))
    return tr("{n} tokens streamed and timed", n=want_tokens)
