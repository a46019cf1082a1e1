"""Checks of chapter 11 (serving): sse_events, merge_stream, timed_stream and sweep.

`sse_events` parses the server's `text/event-stream` bytes as they arrive, `merge_stream` turns a
stream's events back into the answer the same request gets without streaming, `timed_stream`
measures a request's TTFT and TPOT on the client's side, and `sweep` runs a fair concurrency
sweep. The checks try them on synthetic streams (cut into chunks at random, with a clock the check
controls) and on the real server of minimodel.serve, on the tiny model, 127.0.0.1 and a free port
(`served`: one server for each check that needs one, closed when it is done). Timings are never
compared: a check that measures time only checks which clock readings a number was computed from.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import numbers
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import torch

from minimodel.grading.core import CheckFailed, exercise, expect


@functools.lru_cache(maxsize=1)
def _tiny_llm():
    from minimodel.engine.llm import LLM

    return LLM("tiny", device="cpu", num_pages=512, max_num_seqs=32)


@contextlib.contextmanager
def served() -> Iterator[object]:
    """A server of the tiny model (real tokenizer, random weights) on 127.0.0.1 and a free
    port, for one check; closed when the check is done, so that nothing is left running."""
    from minimodel.serve import Server

    with Server(_tiny_llm(), model_name="tiny") as server:
        yield server


def _randint(low: int, high: int) -> int:
    return int(torch.randint(low, high + 1, ()))


def _on_server(check: Callable) -> Callable[[Callable], str]:
    """A check that runs against its own server: check(fn, server)."""

    @functools.wraps(check)
    def run(fn: Callable) -> str:
        with served() as server:
            return check(fn, server)

    return run


def _post_stream(server, path: str, body: dict) -> list[bytes]:
    """The raw bytes of a streamed answer of `server`, in the chunks httpx gave."""
    body = {"model": server.model_name, "stream": True, **body}
    with httpx.stream("POST", server.url + path, json=body, timeout=120) as response:
        expect(response.status_code == 200, f"the server answered {response.status_code}")
        return list(response.iter_raw())


def _post(server, path: str, body: dict) -> dict:
    r = httpx.post(server.url + path, json={"model": server.model_name, **body}, timeout=120)
    expect(r.status_code == 200, f"the server answered {r.status_code}: {r.text[:200]}")
    return r.json()


# --- sse_events -------------------------------------------------------------------------------


def reference_events(raw: bytes) -> list[dict]:
    """The JSON events of a whole event stream, up to `data: [DONE]` (for these checks)."""
    out, data = [], None
    for line in raw.decode("utf-8").replace("\r\n", "\n").split("\n"):
        if line == "":
            if data is not None:
                if data == "[DONE]":
                    return out
                out.append(json.loads(data))
            data = None
        elif line[0] != ":":
            name, colon, value = line.partition(":")
            if name == "data":
                value = value[1:] if value[:1] == " " else value
                data = value if data is None else data + "\n" + value
    return out


def _cut(raw: bytes, how: str) -> list[bytes]:
    """raw cut into chunks: 'one' byte each, 'random' sizes, or 'events' (one per event)."""
    if how == "one":
        return [raw[i:i + 1] for i in range(len(raw))]
    if how == "events":
        parts = raw.split(b"\n\n")
        return [p + b"\n\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    chunks, i = [], 0
    while i < len(raw):
        n = _randint(1, 40)
        chunks.append(raw[i:i + n])
        i += n
    return chunks


class _Chunks:
    """An iterator over chunks that records how many were read, and refuses to go past `stop`."""

    def __init__(self, chunks: list[bytes], stop: int | None = None) -> None:
        self.chunks, self.stop, self.read = chunks, stop, 0

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        if self.read >= len(self.chunks):
            raise StopIteration
        if self.stop is not None and self.read >= self.stop:
            raise CheckFailed("your parser read on after `data: [DONE]`: the stream is over "
                              "there, and a real connection would have nothing more to give")
        self.read += 1
        return self.chunks[self.read - 1]


_WORDS = ["I", " am", " not", "床前", "明月光", "，", "\n", " \"quoted\"", "\\", "é", "😀", ""]


def _chunk_json(i: int, text: str, chat: bool = False, finish: str | None = None) -> dict:
    choice = ({"index": i, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
              if chat else {"index": i, "text": text, "logprobs": None, "finish_reason": finish})
    return {"id": "cmpl-test", "created": 1700000000, "model": "tiny",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "choices": [choice]}


def _random_stream(decorate: bool) -> tuple[bytes, list[dict]]:
    """A random event stream (bytes) and its events; `decorate` adds comments, other fields,
    blank lines, CRLF line ends, data without its space and JSON spread over data lines."""
    events = [_chunk_json(_randint(0, 2), "".join(_WORDS[_randint(0, len(_WORDS) - 1)]
                                                 for _ in range(_randint(0, 3))),
                          chat=bool(_randint(0, 1)))
              for _ in range(_randint(1, 8))]
    parts = []
    for e in events:
        text = json.dumps(e, ensure_ascii=bool(_randint(0, 1)), separators=(",", ":"))
        nl = "\r\n" if decorate and _randint(0, 2) == 0 else "\n"
        lines = []
        if decorate and _randint(0, 2) == 0:
            lines.append(": keep-alive")
        if decorate and _randint(0, 2) == 0:
            lines.append("event: message" if _randint(0, 1) else "id: 7")
        if decorate and _randint(0, 1):  # the JSON over several data lines, cut between tokens
            cuts = [m + 1 for m in range(len(text)) if text[m] in ",:"][: _randint(1, 3)]
            bounds = [0, *cuts, len(text)]
            for a, b in itertools.pairwise(bounds):
                lines.append(("data:" if _randint(0, 1) else "data: ") + text[a:b])
        else:
            lines.append(("data:" if decorate and _randint(0, 1) else "data: ") + text)
        parts.append(nl.join(lines) + nl + nl)
        if decorate and _randint(0, 3) == 0:
            parts.append(nl)  # a blank line more: no event
    parts.append("data: [DONE]\n\n")
    return "".join(parts).encode("utf-8"), events


def _run_parser(fn: Callable, chunks: list[bytes], what: str,
                stop: int | None = None) -> list[dict]:
    source = _Chunks(chunks, stop)
    got = fn(source)
    expect(got is not None and hasattr(got, "__iter__") and not isinstance(got, (str, bytes)),
           f"sse_events returned {got!r}; yield the events (a generator)")
    out = []
    for event in got:
        expect(isinstance(event, dict), f"{what}: sse_events yielded {event!r}; yield each "
               "event's JSON as a dict (json.loads of its data)")
        out.append(event)
    return out


def _compare_events(got: list[dict], want: list[dict], what: str) -> None:
    if got == want:
        return
    k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    if len(got) != len(want) and got[:k] == want[:k] and k == min(len(got), len(want)):
        raise CheckFailed(f"{what}: {len(got)} events, expected {len(want)}"
                          + (" (the events after the first missing one never came)"
                             if len(got) < len(want) else ""))
    raise CheckFailed(f"{what}: event {k} is {str(got[k])[:160]}, expected {str(want[k])[:160]}")


def _sse_cases(fn: Callable, decorate: bool, cuts: tuple[str, ...]) -> None:
    for _ in range(6):
        raw, events = _random_stream(decorate)
        expect(reference_events(raw) == events, "the check's own stream is wrong")
        for how in cuts:
            chunks = _cut(raw, how)
            what = (f"a stream of {len(events)} events "
                    + {"one": "one byte per chunk", "random": "cut into chunks at random",
                       "events": "one event per chunk"}[how])
            _compare_events(_run_parser(fn, chunks, what), events, what)



@exercise("ch11.sse_events", "one event per chunk: every JSON event, in order, up to "
                             "`data: [DONE]`")
def _sse_whole(fn: Callable) -> None:
    _sse_cases(fn, decorate=False, cuts=("events",))


@exercise("ch11.sse_events", "events cut anywhere: one byte per chunk, and chunks of random "
                             "sizes that split lines and UTF-8 characters")
def _sse_split(fn: Callable) -> None:
    _sse_cases(fn, decorate=False, cuts=("one", "random"))


@exercise("ch11.sse_events", "comments, other fields, extra blank lines, `data:` without its "
                             "space, CRLF line ends and one JSON over several data lines")
def _sse_spec(fn: Callable) -> None:
    raw = (b": a comment\n\nevent: message\nid: 1\ndata:{\"a\":\n"
           b"data: [1,\r\ndata:  2]}\r\n\r\n\n\ndata: [DONE]\n\n")
    _compare_events(_run_parser(fn, _cut(raw, "one"), "a stream with two data lines and CRLF"),
                    [{"a": [1, 2]}], "a stream with one event over three data lines and CRLF")
    _sse_cases(fn, decorate=True, cuts=("events", "one", "random"))


@exercise("ch11.sse_events", "yields each event as soon as its blank line has come, reads nothing "
                             "after `data: [DONE]`, and just ends if the stream ends without it")
def _sse_lazy(fn: Callable) -> None:
    raw, events = _random_stream(decorate=False)
    chunks = _cut(raw, "events")  # the last chunk is data: [DONE]
    chunks.append(b'data: {"after": "[DONE]"}\n\n')
    source = _Chunks(chunks, stop=len(chunks) - 1)
    got = fn(source)
    for k, want in enumerate(events):
        event = next(got, None)
        expect(event == want, f"event {k} of a stream is {event!r}, expected {want!r}")
        expect(source.read == k + 1, f"sse_events read {source.read} chunks before it yielded "
               f"event {k}, which was complete after chunk {k + 1}: yield each event at its "
               "blank line, so that the client sees the text while the rest is generated")
    expect(next(got, None) is None, "after `data: [DONE]` sse_events yielded more events")
    # the connection drops: complete events come, the unfinished last one does not
    raw, events = _random_stream(decorate=False)
    cut = raw[:raw.index(b"data: [DONE]")] + b'data: {"half": '
    got = _run_parser(fn, _cut(cut, "random"), "a stream cut off before [DONE]")
    _compare_events(got, events, "a stream that ends without `data: [DONE]` (the connection "
                    "dropped; its last, unfinished event is no event)")


@exercise("ch11.sse_events", "the real server's bytes (completions and chat, several choices, "
                             "usage) in httpx's chunks and cut again at random")
@_on_server
def _sse_server(fn: Callable, server) -> str:
    bodies = [("/v1/completions", {"prompt": "床前明月光，", "max_tokens": 8, "n": 2,
                                   "temperature": 0.8, "seed": 3,
                                   "stream_options": {"include_usage": True}}),
              ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi!"}],
                                        "max_tokens": 6, "n": 2, "seed": 1})]
    count = 0
    for path, body in bodies:
        chunks = _post_stream(server, path, body)
        raw = b"".join(chunks)
        want = reference_events(raw)
        for how, cut in (("in httpx's chunks", chunks), ("one byte per chunk", _cut(raw, "one")),
                         ("cut at random", _cut(raw, "random"))):
            what = f"the stream of {path} {how}"
            _compare_events(_run_parser(fn, cut, what), want, what)
        count += len(want)
    return f"{count} events of the real server"


# --- merge_stream -----------------------------------------------------------------------------


def reference_merge(events: list[dict]) -> dict:
    """The non-streamed answer that a stream's events add up to (without logprobs)."""
    head = events[0]
    chat = head["object"].endswith(".chunk")
    answer = {"id": head["id"], "object": "chat.completion" if chat else "text_completion",
              "created": head["created"], "model": head["model"]}
    texts: dict[int, list[str]] = {}
    finish: dict[int, str | None] = {}
    for event in events:
        if "error" in event:
            raise RuntimeError(event["error"]["message"])
        for c in event.get("choices") or []:
            piece = (c["delta"].get("content") if chat else c["text"]) or ""
            texts.setdefault(c["index"], []).append(piece)
            finish[c["index"]] = c["finish_reason"] or finish.get(c["index"])
        if event.get("usage"):
            answer["usage"] = event["usage"]
    choices = []
    for i in sorted(texts):
        text = "".join(texts[i])
        body = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        choices.append({"index": i, **body, "finish_reason": finish.get(i)})
    answer["choices"] = choices
    return answer


def _synthetic_stream(n: int, chat: bool, usage: bool) -> list[dict]:
    """The events of a stream of n choices, interleaved at random, each ending with a finish."""
    pieces = {i: ["".join(_WORDS[_randint(0, len(_WORDS) - 2)] for _ in range(_randint(1, 2)))
                  for _ in range(_randint(1, 5))] for i in range(n)}
    for i in range(n):
        if _randint(0, 2) == 0:
            pieces[i].append("")  # a last chunk with its finish_reason and no text
    order = [i for i in range(n) for _ in pieces[i]]
    order = [order[k] for k in torch.randperm(len(order)).tolist()]
    meta = {"id": f"id-{_randint(0, 9999)}", "created": 1700000000 + _randint(0, 99),
            "model": ["tiny", "bard"][_randint(0, 1)]}
    events = []
    if chat:
        events.append({**meta, "object": "chat.completion.chunk", "choices": [
            {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
             "finish_reason": None} for i in range(n)]})
    seen = dict.fromkeys(range(n), 0)
    for i in order:
        seen[i] += 1
        last = seen[i] == len(pieces[i])
        finish = ["length", "stop"][_randint(0, 1)] if last else None
        text = pieces[i][seen[i] - 1]
        if chat:
            delta = {"content": text} if text or not last or _randint(0, 1) else {}
            choice = {"index": i, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": i, "text": text, "logprobs": None, "finish_reason": finish}
        event = {**meta, "object": "chat.completion.chunk" if chat else "text_completion",
                 "choices": [choice]}
        if usage:
            event["usage"] = None
        events.append(event)
    if usage:
        tokens = _randint(n, 40)
        events.append({**meta, "object": events[-1]["object"], "choices": [],
                       "usage": {"prompt_tokens": 5, "completion_tokens": tokens,
                                 "total_tokens": 5 + tokens}})
    return events


def _merge_diff(got: object, want: dict) -> str:
    if not isinstance(got, dict):
        return f"returned {type(got).__name__}; return a dict shaped as the non-streamed answer"
    for key in ("object", "id", "created", "model"):
        if got.get(key) != want[key]:
            return f"{key} is {got.get(key)!r}, expected {want[key]!r}"
    if ("usage" in got) != ("usage" in want) or got.get("usage") != want.get("usage"):
        return (f"usage is {got.get('usage', 'missing')!r}, expected "
                f"{want.get('usage', 'no usage key (the stream carried none)')!r}")
    choices = got.get("choices")
    if not isinstance(choices, list) or len(choices) != len(want["choices"]):
        n = len(choices) if isinstance(choices, list) else choices
        return (f"choices holds {n!r}, expected {len(want['choices'])} choices, one per index, "
                "in index order")
    for g, w in zip(choices, want["choices"]):
        if g != w:
            return f"choice {w['index']} is {str(g)[:200]}, expected {str(w)[:200]}"
    extra = set(got) - set(want)
    if extra:
        return f"it has keys {sorted(extra)} the non-streamed answer does not have"
    return ""


def _merge_cases(fn: Callable, streams: list[tuple[str, list[dict]]]) -> None:
    for what, events in streams:
        want = reference_merge(events)
        copy = json.loads(json.dumps(events))
        diff = _merge_diff(fn(iter(copy)), want)
        expect(copy == events, f"merge_stream changed the events of {what}; leave them as they "
                               "are")
        expect(not diff, f"merge_stream of {what}: {diff}")


@exercise("ch11.merge_stream", "completions, one choice: its texts joined, the finish_reason of "
                               "its last chunk, id, created, model and object text_completion")
def _merge_one(fn: Callable) -> None:
    _merge_cases(fn, [(f"a completions stream of {len(e)} events", e)
                      for e in (_synthetic_stream(1, False, False) for _ in range(8))])


@exercise("ch11.merge_stream", "several choices interleaved in any order; chat: the role of the "
                               "first delta, the content joined, object chat.completion")
def _merge_many(fn: Callable) -> None:
    streams = []
    for _ in range(10):
        n, chat = _randint(2, 4), bool(_randint(0, 1))
        kind = "chat" if chat else "completions"
        streams.append((f"a {kind} stream of {n} interleaved choices",
                        _synthetic_stream(n, chat, False)))
    _merge_cases(fn, streams)


@exercise("ch11.merge_stream", "usage from the stream's last chunk (no usage key when it has "
                               "none); an error event raises RuntimeError with its message")
def _merge_usage(fn: Callable) -> None:
    _merge_cases(fn, [("a stream with a usage chunk", _synthetic_stream(_randint(1, 3),
                                                                        bool(i % 2), True))
                      for i in range(6)])
    events = _synthetic_stream(2, False, False)[:2]
    message = f"Internal error: step {_randint(1, 99)} failed"
    events.append({"error": {"message": message, "type": "server_error", "param": None,
                             "code": None}})
    try:
        fn(iter(events))
    except RuntimeError as err:
        expect(message in str(err), f"merge_stream raised RuntimeError({str(err)!r}); give it "
                                    f"the error's message, {message!r}")
        return
    raise CheckFailed("a stream that ends with an error event (a failed step) merged into an "
                      "answer; raise RuntimeError with the error's message instead")


def _no_logprobs(answer: dict) -> dict:
    out = {k: v for k, v in answer.items() if k not in ("id", "created")}
    out["choices"] = [{k: v for k, v in c.items() if k != "logprobs"} for c in answer["choices"]]
    return out


@exercise("ch11.merge_stream", "the real server: streams of completions and chat with n = 3, "
                               "seeds and stop strings merge to the non-streamed answer")
@_on_server
def _merge_server(fn: Callable, server) -> str:
    free = _post(server, "/v1/completions", {"prompt": "ROMEO.\n", "max_tokens": 16,
                                             "temperature": 0, "ignore_eos": True})
    free = free["choices"][0]["text"]
    stop = free[3:6] or "e"
    cases = [("/v1/completions", {"prompt": ["ROMEO.\n", "床前明月光，"], "max_tokens": 10,
                                  "n": 3, "temperature": 0.9, "seed": _randint(0, 999),
                                  "stream_options": {"include_usage": True}}),
             ("/v1/completions", {"prompt": "ROMEO.\n", "max_tokens": 16, "temperature": 0,
                                  "ignore_eos": True, "stop": [stop, "\n\n"]}),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi!"}],
                                       "max_tokens": 8, "n": 3, "seed": _randint(0, 999),
                                       "stop": ["。", "\n"]})]
    stops = 0
    for path, body in cases:
        whole = _no_logprobs(_post(server, path, body))
        events = reference_events(b"".join(_post_stream(server, path, body)))
        got = fn(iter(events))
        expect(isinstance(got, dict) and isinstance(got.get("choices"), list),
               f"merge_stream of the server's stream of {path} returned {str(got)[:120]}")
        if not body.get("stream_options"):
            whole.pop("usage")  # a stream carries usage only when asked to
        mine = {k: v for k, v in got.items() if k not in ("id", "created")}
        expect(mine == whole, f"the stream of {path} ({json.dumps(body, ensure_ascii=False)}) "
                              f"merged to {str(mine)[:300]}; without streaming the server "
                              f"answers {str(whole)[:300]}")
        stops += sum(c["finish_reason"] == "stop" for c in whole["choices"])
    return f"{len(cases)} streams merged, {stops} of their choices cut at a stop string"


# --- timed_stream -----------------------------------------------------------------------------


def _piece(choice: dict) -> str:
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
    expect(isinstance(got, dict), f"timed_stream returned {got!r}; return a dict with text, "
                                  "completion_tokens, ttft_s and tpot_s")
    missing = {"text", "completion_tokens", "ttft_s", "tpot_s"} - set(got)
    expect(not missing, f"timed_stream's answer has no {sorted(missing)}")
    return got


def _timed_cases(fn: Callable, keys: tuple[str, ...], cases: list) -> None:
    for chat, start, stamped in cases:
        got = _timed_call(fn, start, stamped)
        want = reference_timing(stamped, start)
        arrivals = [round(t - start, 4) for t, _ in stamped]
        what = (f"a {'chat' if chat else 'completions'} stream of {len(stamped)} events "
                f"arriving {arrivals[:6]}{'...' if len(arrivals) > 6 else ''} s after start, "
                f"{want['completion_tokens']} tokens")
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
                    hint = (" The first event of a chat stream only says the role: the first "
                            "text comes later.")
                raise CheckFailed(f"{what}: {key} = {g!r}, expected {w!r}.{hint}")


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
    raise CheckFailed("a stream without a usage chunk gave an answer: without usage the "
                      "client cannot know how many tokens came (a chunk may hold several, or "
                      "none); raise ValueError saying to ask for stream_options.include_usage")


def _live_events(response: httpx.Response) -> Iterator[dict]:
    """The events of a live response, each handed out as soon as it has come."""
    for line in response.iter_lines():
        if line.startswith("data: "):
            if line == "data: [DONE]":
                return
            yield json.loads(line[len("data: "):])


@exercise("ch11.timed_stream", "the real server: the text and tokens of the answer without "
                               "streaming, and TTFT and TPOT read from the clock at the events")
@_on_server
def _timed_server(fn: Callable, server) -> str:
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
    expect(isinstance(got, dict), f"timed_stream returned {got!r}")
    expect(got.get("text") == whole["choices"][0]["text"],
           f"timed_stream's text is {got.get('text')!r}; without streaming the server answers "
           f"{whole['choices'][0]['text']!r}")
    want_tokens = whole["usage"]["completion_tokens"]
    expect(got.get("completion_tokens") == want_tokens,
           f"completion_tokens = {got.get('completion_tokens')!r}, the server generated "
           f"{want_tokens}")
    ttft, tpot = got.get("ttft_s"), got.get("tpot_s")
    expect(isinstance(ttft, numbers.Real) and isinstance(tpot, numbers.Real),
           f"ttft_s and tpot_s should be numbers of seconds, got {ttft!r} and {tpot!r}")
    first = [r for r in readings[1:] if math.isclose(r - start, ttft, rel_tol=1e-9,
                                                     abs_tol=1e-12)]
    expect(bool(first), "ttft_s is not the time between `start` and a reading of `clock`: read "
                        "the time with the clock you are given, when an event arrives")
    last = first[0] + tpot * (want_tokens - 1)
    expect(any(math.isclose(r, last, rel_tol=1e-12, abs_tol=1e-9) for r in readings),
           "tpot_s * (completion_tokens - 1) does not lead from the first text to a reading of "
           "`clock`: measure from the first text to the last")
    return f"{want_tokens} tokens streamed and timed"


# --- sweep ------------------------------------------------------------------------------------

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


_SWEEPS: dict[str, object] = {}


def _sweep_run(fn: Callable, fresh: bool = False) -> tuple[_SweepServer, object]:
    """The learner's sweep over the stand-in (run by the first check of a check() call)."""
    if fresh or _SWEEPS.get("fn") is not fn:
        server = _SweepServer(list(SWEEP_PROMPTS), list(SWEEP_LEVELS))
        rows = fn(server.run_one, list(SWEEP_PROMPTS), list(SWEEP_LEVELS), server.clock)
        _SWEEPS.clear()
        _SWEEPS.update(fn=fn, server=server, rows=rows)
    return _SWEEPS["server"], _SWEEPS["rows"]


def _rows(rows: object, levels: list[int]) -> list[dict]:
    expect(isinstance(rows, list) and all(isinstance(r, dict) for r in rows),
           f"sweep returned {str(rows)[:100]}; return a list of dicts, one row per level")
    expect(len(rows) == len(levels), f"sweep returned {len(rows)} rows for {len(levels)} levels")
    for row in rows:
        missing = [k for k in _ROW_KEYS if k not in row]
        expect(not missing, f"a row has no {missing}; each row has {', '.join(_ROW_KEYS)}")
    got = [r["concurrency"] for r in rows]
    expect(got == levels, f"the rows are for concurrency {got}; expected {levels}, in order")
    return rows


def _calls_by_level(server: _SweepServer) -> list[list[dict]]:
    P, L = len(server.prompts), len(server.levels)
    total = len(server.calls)
    expect(total == 1 + L * P, f"run_one was called {total} times; a sweep of {L} levels over "
                               f"{P} prompts makes {1 + L * P} calls: one warm-up, then every "
                               "prompt once at every level")
    return [[c for c in server.calls if c["level"] == i] for i in range(L)]


@exercise("ch11.sweep", "one row per level; each level sends every prompt once: the same "
                        "requests and tokens at every level")
def _sweep_same(fn: Callable) -> str:
    server, rows = _sweep_run(fn, fresh=True)
    rows = _rows(rows, server.levels)
    by_level = _calls_by_level(server)
    tokens = sum(_tokens_of(p) for p in server.prompts)
    for n, calls, row in zip(server.levels, by_level, rows):
        sent = sorted(c["prompt"] for c in calls)
        expect(sent == sorted(server.prompts), f"at concurrency {n} the sweep sent "
               f"{len(set(sent))} different prompts ({len(sent)} requests); send each of the "
               f"{len(server.prompts)} prompts once at every level, so that the levels compare "
               "the same work")
        expect(row["requests"] == len(server.prompts) and row["tokens"] == tokens,
               f"the row of concurrency {n} says {row['requests']} requests and {row['tokens']} "
               f"tokens; its requests were {len(calls)}, their completion_tokens add up to "
               f"{tokens}")
    return f"{len(server.levels)} levels of {len(server.prompts)} requests, {tokens} tokens each"


def _bracketing(server: _SweepServer, after: int, before: int) -> list[tuple[int, float]]:
    return [(s, v) for s, v in server.readings if after < s < before]


@exercise("ch11.sweep", "a warm-up request runs alone before the first level, and is counted in "
                        "no row and in no wall_s")
def _sweep_warmup(fn: Callable) -> None:
    server, rows = _sweep_run(fn)
    rows = _rows(rows, server.levels)
    by_level = _calls_by_level(server)
    warm = server.calls[0]
    expect(all(c["start"] > warm["end"] for c in server.calls[1:]),
           "the first request ran together with others: warm up with one request alone, before "
           "the first level starts")
    for row in rows:
        expect(row["ttft_p90"] < 30.0, f"the row of concurrency {row['concurrency']} has a TTFT "
               "p90 of 30 s or more: the warm-up's cold start is counted; leave it out")
    first = by_level[0]
    readings = _bracketing(server, warm["end"], min(c["start"] for c in first))
    expect(bool(readings), "no clock reading lies between the end of the warm-up and the first "
                           "request of the first level: start the level's clock after the warm-up")


def _peak(calls: list[dict]) -> int:
    return max(sum(d["start"] <= c["start"] < d["end"] for d in calls) for c in calls)


@exercise("ch11.sweep", "level n has n requests in flight at once, started together, never "
                        "more; one level after another")
def _sweep_concurrency(fn: Callable) -> None:
    server, rows = _sweep_run(fn)
    _rows(rows, server.levels)
    by_level = _calls_by_level(server)
    for i, (n, calls) in enumerate(zip(server.levels, by_level)):
        peak = _peak(calls)
        expect(peak <= n, f"at concurrency {n}, {peak} requests were in flight at once")
        threads = len({c["thread"] for c in calls})
        expect(threads <= n, f"at concurrency {n}, {threads} threads sent requests: {n} clients")
        expect(peak >= n,
               f"at concurrency {n} at most {peak} requests were in flight at once (the first "
               f"ones waited {_WAVE_DEADLINE_S:g} s for the others): start {n} clients together, "
               "each taking the next prompt when its request is done")
        if i + 1 < len(by_level):
            expect(max(c["end"] for c in calls) < min(c["start"] for c in by_level[i + 1]),
                   f"requests of concurrency {server.levels[i + 1]} started while those of "
                   f"concurrency {n} were still in flight: run the levels one after another")


@exercise("ch11.sweep", "p50 and p90 (nearest rank) of the level's own TTFTs and TPOTs; "
                        "throughput = tokens / wall_s, with wall_s read from `clock` around the "
                        "level")
def _sweep_numbers(fn: Callable) -> None:
    server, rows = _sweep_run(fn)
    rows = _rows(rows, server.levels)
    by_level = _calls_by_level(server)
    ends = [server.calls[0]["end"]] + [max(c["end"] for c in calls) for calls in by_level]
    starts = [min(c["start"] for c in calls) for calls in by_level] + [next(server.seq)]
    for i, (n, calls, row) in enumerate(zip(server.levels, by_level, rows)):
        for key in ("ttft", "tpot"):
            for p in (50, 90):
                want = nearest_rank([c[f"{key}_s"] for c in calls], p)
                got = row[f"{key}_p{p}"]
                expect(isinstance(got, numbers.Real) and math.isclose(got, want, rel_tol=1e-9),
                       f"concurrency {n}: {key}_p{p} = {got!r}, expected {want!r}, the "
                       f"nearest-rank p{p} of the {len(calls)} {key.upper()}s of this level: "
                       f"sorted(values)[ceil({p / 100:g} * {len(calls)}) - 1]")
        wall = row["wall_s"]
        before = _bracketing(server, ends[i], starts[i])
        after = _bracketing(server, ends[i + 1], starts[i + 1])
        expect(isinstance(wall, numbers.Real) and any(
            math.isclose(b - a, wall, rel_tol=1e-9, abs_tol=1e-12)
            for _, a in before for _, b in after),
            f"concurrency {n}: wall_s = {wall!r} is not the time between a reading of `clock` "
            "before the level's first request and one after its last: time the whole level, "
            "and only it, with the clock you are given")
        expect(isinstance(row["throughput"], numbers.Real)
               and math.isclose(row["throughput"], row["tokens"] / wall, rel_tol=1e-9),
               f"concurrency {n}: throughput = {row['throughput']!r}; it is tokens / wall_s = "
               f"{row['tokens'] / wall!r} (tokens per second, all clients together)")


@exercise("ch11.sweep", "the real server: levels 1, 2 and 4 over 4 prompts, the same tokens at "
                        "every level")
@_on_server
def _sweep_server(fn: Callable, server) -> str:
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
    expect(len(calls) == 1 + 3 * len(prompts), f"run_one was called {len(calls)} times")
    for row in rows:
        expect(row["tokens"] == 6 * len(prompts) and row["requests"] == len(prompts),
               f"the row of concurrency {row['concurrency']} says {row['requests']} requests, "
               f"{row['tokens']} tokens; each level sent {len(prompts)} requests of 6 tokens")
        numbers_ok = all(isinstance(row[k], numbers.Real) and math.isfinite(row[k]) and row[k] >= 0
                         for k in _ROW_KEYS)
        expect(numbers_ok, f"the row of concurrency {row['concurrency']} holds {row}")
    return f"{len(rows)} levels of {len(prompts)} requests on the real server"
