"""Checks of ch11.sse_events: parse a `text/event-stream` as its bytes arrive, in chunks cut
anywhere, and yield each event's JSON as soon as its blank line has come.

The streams are synthetic (random events, cut at random, with the corners of the format) and the
real server's; `reference_events` is what a whole stream holds.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator

from minimodel.grading.ch11.common import _WORDS, _randint
from minimodel.grading.ch11.server import _on_server, _post_stream
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import Text, tr


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
            raise CheckFailed(tr("your parser read on after `data: [DONE]`: the stream is over "
                                 "there, and a real connection would have nothing more to "
                                 "give"))
        self.read += 1
        return self.chunks[self.read - 1]


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


def _run_parser(fn: Callable, chunks: list[bytes], what: Text,
                stop: int | None = None) -> list[dict]:
    source = _Chunks(chunks, stop)
    got = fn(source)
    expect(got is not None and hasattr(got, "__iter__") and not isinstance(got, (str, bytes)),
           tr("sse_events returned {got!r}; yield the events (a generator)", got=got))
    out = []
    for event in got:
        expect(isinstance(event, dict), tr("{what}: sse_events yielded {event!r}; yield each "
                                           "event's JSON as a dict (json.loads of its data)",
                                           what=what, event=event))
        out.append(event)
    return out


def _compare_events(got: list[dict], want: list[dict], what: Text) -> None:
    if got == want:
        return
    k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    if len(got) != len(want) and got[:k] == want[:k] and k == min(len(got), len(want)):
        hint = (tr(" (the events after the first missing one never came)")
                if len(got) < len(want) else "")
        raise CheckFailed(tr("{what}: {n} events, expected {want}{hint}", what=what, n=len(got),
                             want=len(want), hint=hint))
    raise CheckFailed(tr("{what}: event {k} is {got}, expected {want}", what=what, k=k,
                         got=str(got[k])[:160], want=str(want[k])[:160]))


def _sse_cases(fn: Callable, decorate: bool, cuts: tuple[str, ...]) -> None:
    for _ in range(6):
        raw, events = _random_stream(decorate)
        expect(reference_events(raw) == events, tr("the check's own stream is wrong"))
        for how in cuts:
            chunks = _cut(raw, how)
            cut = {"one": tr("one byte per chunk"), "random": tr("cut into chunks at random"),
                   "events": tr("one event per chunk")}[how]
            what = tr("a stream of {n} events {cut}", n=len(events), cut=cut)
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
    _compare_events(_run_parser(fn, _cut(raw, "one"),
                                tr("a stream with two data lines and CRLF")),
                    [{"a": [1, 2]}], tr("a stream with one event over three data lines and CRLF"))
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
        expect(event == want, tr("event {k} of a stream is {event!r}, expected {want!r}", k=k,
                                 event=event, want=want))
        expect(source.read == k + 1, tr(
            "sse_events read {read} chunks before it yielded event {k}, which was complete after "
            "chunk {after}: yield each event at its blank line, so that the client sees the text "
            "while the rest is generated", read=source.read, k=k, after=k + 1))
    expect(next(got, None) is None, tr("after `data: [DONE]` sse_events yielded more events"))
    # the connection drops: complete events come, the unfinished last one does not
    raw, events = _random_stream(decorate=False)
    cut = raw[:raw.index(b"data: [DONE]")] + b'data: {"half": '
    got = _run_parser(fn, _cut(cut, "random"), tr("a stream cut off before [DONE]"))
    _compare_events(got, events, tr("a stream that ends without `data: [DONE]` (the connection "
                                    "dropped; its last, unfinished event is no event)"))


@exercise("ch11.sse_events", "the real server's bytes (completions and chat, several choices, "
                             "usage) in httpx's chunks and cut again at random")
@_on_server
def _sse_server(fn: Callable, server) -> Text:
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
        for how, cut in ((tr("in httpx's chunks"), chunks),
                         (tr("one byte per chunk"), _cut(raw, "one")),
                         (tr("cut at random"), _cut(raw, "random"))):
            what = tr("the stream of {path} {how}", path=path, how=how)
            _compare_events(_run_parser(fn, cut, what), want, what)
        count += len(want)
    return tr("{count} events of the real server", count=count)
