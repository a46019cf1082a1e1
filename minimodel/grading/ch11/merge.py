"""Checks of ch11.merge_stream: a stream's events -> the answer the same request gets without
streaming (`reference_merge`), on synthetic streams and on the real server's."""

from __future__ import annotations

import json
from collections.abc import Callable

from minimodel.grading.ch11.common import _randint, _synthetic_stream
from minimodel.grading.ch11.server import _on_server, _post, _post_stream
from minimodel.grading.ch11.sse import reference_events
from minimodel.grading.core import CheckFailed, exercise, expect


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
