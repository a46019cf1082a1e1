"""Checks of ch11.merge_stream: a stream's events -> the answer the same request gets without
streaming (`reference_merge`), on synthetic streams and on the real server's."""

from __future__ import annotations

import json
from collections.abc import Callable

from minimodel.grading.ch11.common import _randint, _synthetic_stream
from minimodel.grading.ch11.server import _on_server, _post, _post_stream
from minimodel.grading.ch11.sse import reference_events
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import Text, tr


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


def _merge_diff(got: object, want: dict) -> Text | str:
    if not isinstance(got, dict):
        return tr("returned {got}; return a dict shaped as the non-streamed answer",
                  got=type(got).__name__)
    for key in ("object", "id", "created", "model"):
        if got.get(key) != want[key]:
            return tr("{key} is {got!r}, expected {want!r}", key=key, got=got.get(key),
                      want=want[key])
    if ("usage" in got) != ("usage" in want) or got.get("usage") != want.get("usage"):
        if "usage" not in got:
            return tr("usage is 'missing', expected {want!r}", want=want["usage"])
        if "usage" not in want:
            return tr("usage is {got!r}, expected 'no usage key (the stream carried none)'",
                      got=got["usage"])
        return tr("usage is {got!r}, expected {want!r}", got=got["usage"], want=want["usage"])
    choices = got.get("choices")
    if not isinstance(choices, list) or len(choices) != len(want["choices"]):
        n = len(choices) if isinstance(choices, list) else choices
        return tr("choices holds {n!r}, expected {want} choices, one per index, in index order",
                  n=n, want=len(want["choices"]))
    for g, w in zip(choices, want["choices"]):
        if g != w:
            return tr("choice {index} is {got}, expected {want}", index=w["index"],
                      got=str(g)[:200], want=str(w)[:200])
    extra = set(got) - set(want)
    if extra:
        return tr("it has keys {keys} the non-streamed answer does not have", keys=sorted(extra))
    return ""


def _merge_cases(fn: Callable, streams: list[tuple[Text, list[dict]]]) -> None:
    for what, events in streams:
        want = reference_merge(events)
        copy = json.loads(json.dumps(events))
        diff = _merge_diff(fn(iter(copy)), want)
        expect(copy == events, tr("merge_stream changed the events of {what}; leave them as "
                                  "they are", what=what))
        expect(not diff, tr("merge_stream of {what}: {diff}", what=what, diff=diff))


@exercise("ch11.merge_stream", "completions, one choice: its texts joined, the finish_reason of "
                               "its last chunk, id, created, model and object text_completion")
def _merge_one(fn: Callable) -> None:
    _merge_cases(fn, [(tr("a completions stream of {n} events", n=len(e)), e)
                      for e in (_synthetic_stream(1, False, False) for _ in range(8))])


@exercise("ch11.merge_stream", "several choices interleaved in any order; chat: the role of the "
                               "first delta, the content joined, object chat.completion")
def _merge_many(fn: Callable) -> None:
    streams = []
    for _ in range(10):
        n, chat = _randint(2, 4), bool(_randint(0, 1))
        kind = "chat" if chat else "completions"
        streams.append((tr("a {kind} stream of {n} interleaved choices", kind=kind, n=n),
                        _synthetic_stream(n, chat, False)))
    _merge_cases(fn, streams)


@exercise("ch11.merge_stream", "usage from the stream's last chunk (no usage key when it has "
                               "none); an error event raises RuntimeError with its message")
def _merge_usage(fn: Callable) -> None:
    _merge_cases(fn, [(tr("a stream with a usage chunk"), _synthetic_stream(_randint(1, 3),
                                                                            bool(i % 2), True))
                      for i in range(6)])
    events = _synthetic_stream(2, False, False)[:2]
    message = f"Internal error: step {_randint(1, 99)} failed"
    events.append({"error": {"message": message, "type": "server_error", "param": None,
                             "code": None}})
    try:
        fn(iter(events))
    except RuntimeError as err:
        expect(message in str(err), tr("merge_stream raised RuntimeError({got!r}); give it the "
                                       "error's message, {message!r}", got=str(err),
                                       message=message))
        return
    raise CheckFailed(tr("a stream that ends with an error event (a failed step) merged into an "
                         "answer; raise RuntimeError with the error's message instead"))


def _no_logprobs(answer: dict) -> dict:
    out = {k: v for k, v in answer.items() if k not in ("id", "created")}
    out["choices"] = [{k: v for k, v in c.items() if k != "logprobs"} for c in answer["choices"]]
    return out


@exercise("ch11.merge_stream", "the real server: streams of completions and chat with n = 3, "
                               "seeds and stop strings merge to the non-streamed answer")
@_on_server
def _merge_server(fn: Callable, server) -> Text:
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
               tr("merge_stream of the server's stream of {path} returned {got}", path=path,
                  got=str(got)[:120]))
        if not body.get("stream_options"):
            whole.pop("usage")  # a stream carries usage only when asked to
        mine = {k: v for k, v in got.items() if k not in ("id", "created")}
        expect(mine == whole, tr("the stream of {path} ({body}) merged to {got}; without "
                                 "streaming the server answers {whole}", path=path,
                                 body=json.dumps(body, ensure_ascii=False), got=str(mine)[:300],
                                 whole=str(whole)[:300]))
        stops += sum(c["finish_reason"] == "stop" for c in whole["choices"])
    return tr("{n} streams merged, {stops} of their choices cut at a stop string", n=len(cases),
              stops=stops)
