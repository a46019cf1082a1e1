"""Chapter 11's checks: every wrong client learners write fails, every right one passes.

Each check() of these exercises starts a server of the tiny model on 127.0.0.1 for its live
checks, and the sweep's checks run threads: the whole file is a stress test.
"""

from __future__ import annotations

import codecs
import json
import math
import queue
import re
import threading
import time
from collections import defaultdict

import pytest

from minimodel.grading import check

pytestmark = pytest.mark.stress  # sockets, threads, a server per check() call

# --- ch11.sse_events ----------------------------------------------------------------------------


def sse_solution(chunks):
    decoder = codecs.getincrementaldecoder("utf-8")()
    pending, data = "", []
    for chunk in chunks:
        pending += decoder.decode(chunk)
        *lines, pending = pending.split("\n")
        for line in lines:
            line = line.removesuffix("\r")
            if line == "":
                if data:
                    payload, data = "\n".join(data), []
                    if payload == "[DONE]":
                        return
                    yield json.loads(payload)
            elif not line.startswith(":"):
                field, _, value = line.partition(":")
                if field == "data":
                    data.append(value.removeprefix(" "))


def sse_bytes_lines(chunks):
    """Splits bytes at b'\\n' (never inside a UTF-8 character) and decodes whole lines."""
    buf, lines = b"", []
    for chunk in chunks:
        buf += chunk
        while b"\n" in buf:
            raw, buf = buf.split(b"\n", 1)
            line = raw.rstrip(b"\r").decode("utf-8")
            if not line:
                if lines:
                    text = "\n".join(lines)
                    lines = []
                    if text == "[DONE]":
                        return
                    yield json.loads(text)
                continue
            m = re.match(r"data:(?: ?)(.*)$", line, re.S)
            if m and not line.startswith(":"):
                lines.append(m.group(1))


def _sse_mutant(per_chunk_decode=False, space_required=False, last_line_only=False,
                strip_cr=True, stop_at_done=True, lazy=True):
    def gen(chunks):
        pending, data = "", []
        decoder = codecs.getincrementaldecoder("utf-8")()
        for chunk in chunks:
            pending += chunk.decode("utf-8") if per_chunk_decode else decoder.decode(chunk)
            *lines, pending = pending.split("\n")
            for line in lines:
                if strip_cr:
                    line = line.removesuffix("\r")
                if line == "":
                    if data:
                        payload = data[-1] if last_line_only else "\n".join(data)
                        data = []
                        if payload == "[DONE]":
                            if stop_at_done:
                                return
                            continue
                        yield json.loads(payload)
                elif space_required:
                    if line.startswith("data: "):
                        data.append(line[6:])
                elif not line.startswith(":"):
                    field, _, value = line.partition(":")
                    if field == "data":
                        data.append(value.removeprefix(" "))

    if lazy:
        return gen
    return lambda chunks: iter(list(gen(chunks)))


def sse_split_per_chunk(chunks):
    """Treats every chunk as whole events."""
    for chunk in chunks:
        for block in chunk.decode("utf-8", errors="replace").split("\n\n"):
            data = [ln[5:].lstrip() for ln in block.splitlines() if ln.startswith("data:")]
            if not data:
                continue
            if data == ["[DONE]"]:
                return
            try:
                yield json.loads("\n".join(data))
            except json.JSONDecodeError:
                continue


SSE_MUTANTS = {
    "parses each chunk as whole events (drops split ones)": sse_split_per_chunk,
    "decodes each chunk alone (a character cut in two)": _sse_mutant(per_chunk_decode=True),
    "needs the space after data:": _sse_mutant(space_required=True),
    "keeps only the last data line of an event": _sse_mutant(last_line_only=True),
    "does not strip the \\r of CRLF": _sse_mutant(strip_cr=False),
    "reads on past [DONE]": _sse_mutant(stop_at_done=False),
    "yields only once the stream has ended": _sse_mutant(lazy=False),
}


# --- ch11.merge_stream --------------------------------------------------------------------------


def merge_solution(events):
    answer, texts, finish, chat = None, {}, {}, False
    for event in events:
        if "error" in event:
            raise RuntimeError(event["error"]["message"])
        if answer is None:
            chat = event["object"] == "chat.completion.chunk"
            answer = {"id": event["id"], "object": "chat.completion" if chat else "text_completion",
                      "created": event["created"], "model": event["model"]}
        for c in event["choices"]:
            i = c["index"]
            texts.setdefault(i, []).append((c["delta"].get("content") if chat else c["text"]) or "")
            if c["finish_reason"] is not None or i not in finish:
                finish[i] = c["finish_reason"]
        if event.get("usage"):
            answer["usage"] = event["usage"]
    answer["choices"] = []
    for i in sorted(texts):
        text = "".join(texts[i])
        body = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        answer["choices"].append({"index": i, **body, "finish_reason": finish[i]})
    return answer


def merge_defaultdict(events):
    """Keeps every event, then builds the answer in a second pass."""
    events = list(events)
    for e in events:
        if e.get("error"):
            raise RuntimeError(e["error"].get("message", ""))
    first = events[0]
    chat = "chunk" in first["object"]
    text, reason = defaultdict(str), {}
    for e in events:
        for c in e.get("choices", []):
            text[c["index"]] += c.get("text") or c.get("delta", {}).get("content") or ""
            reason[c["index"]] = c["finish_reason"] or reason.get(c["index"])
    out = {"id": first["id"], "created": first["created"], "model": first["model"],
           "object": "chat.completion" if chat else "text_completion", "choices": []}
    usage = [e["usage"] for e in events if e.get("usage")]
    if usage:
        out["usage"] = usage[-1]
    for i in sorted(text):
        choice = {"index": i, "finish_reason": reason[i]}
        if chat:
            choice["message"] = {"role": "assistant", "content": text[i]}
        else:
            choice["text"] = text[i]
        out["choices"].append(choice)
    return out


def _merge_mutant(**wrong):
    def fn(events):
        events = list(events)
        if wrong.get("no_raise"):
            events = [e for e in events if "error" not in e]
        if wrong.get("one_choice"):
            events = [{**e, "choices": [{**c, "index": 0} for c in e.get("choices", [])]}
                      if "choices" in e else e for e in events]
        if wrong.get("first_finish"):
            seen = set()
            fixed = []
            for e in events:
                cs = []
                for c in e.get("choices", []):
                    cs.append({**c, "finish_reason": None} if c["index"] in seen else c)
                    seen.add(c["index"])
                fixed.append({**e, "choices": cs} if "choices" in e else e)
            events = fixed
        if wrong.get("last_piece"):
            last = {}
            for e in events:
                for c in e.get("choices", []):
                    last[c["index"]] = c
            events = [events[0], {**events[0], "choices": list(last.values()),
                                  **({"usage": u} if (u := next((e["usage"] for e in events
                                                                 if e.get("usage")), None))
                                     else {})}]
        out = merge_solution(events)
        if wrong.get("chunk_object"):
            out["object"] = events[0]["object"]
        if wrong.get("no_role"):
            for c in out["choices"]:
                if "message" in c:
                    c["message"].pop("role")
        if wrong.get("usage_none"):
            out.setdefault("usage", None)
        return out

    return fn


MERGE_MUTANTS = {
    "ignores the index: every piece into one choice": _merge_mutant(one_choice=True),
    "finish_reason of each choice's first chunk": _merge_mutant(first_finish=True),
    "keeps only the last piece of each choice": _merge_mutant(last_piece=True),
    "keeps the chunk's object": _merge_mutant(chunk_object=True),
    "a chat message without its role": _merge_mutant(no_role=True),
    "usage: None when the stream had none": _merge_mutant(usage_none=True),
    "skips an error event": _merge_mutant(no_raise=True),
}


# --- ch11.timed_stream --------------------------------------------------------------------------


def _piece(c):
    return (c["text"] if "text" in c else c["delta"].get("content")) or ""


def timed_solution(events, start, clock=time.perf_counter):
    text, stamps, tokens = "", [], None
    for event in events:
        now = clock()
        for c in event["choices"]:
            piece = _piece(c)
            if piece:
                text += piece
                stamps.append(now)
        if event.get("usage"):
            tokens = event["usage"]["completion_tokens"]
    if tokens is None:
        raise ValueError("no usage")
    tpot = (stamps[-1] - stamps[0]) / (tokens - 1) if tokens > 1 else 0.0
    return {"text": text, "completion_tokens": tokens, "ttft_s": stamps[0] - start,
            "tpot_s": tpot}


def timed_first_last(events, start, clock=time.perf_counter):
    """Keeps only the first and last arrival times."""
    first = last = usage = None
    parts = []
    for e in events:
        t = clock()
        got = "".join(_piece(c) for c in e.get("choices") or [])
        if got:
            parts.append(got)
            first = t if first is None else first
            last = t
        usage = e.get("usage") or usage
    if not usage:
        raise ValueError("ask for stream_options.include_usage")
    n = usage["completion_tokens"]
    return {"text": "".join(parts), "completion_tokens": n, "ttft_s": first - start,
            "tpot_s": 0.0 if n <= 1 else (last - first) / (n - 1)}


def _timed_mutant(first_event=False, per_chunk=False, by_tokens=False, own_start=False,
                  no_usage_ok=False):
    def fn(events, start, clock=time.perf_counter):
        text, stamps, tokens, arrivals = "", [], None, []
        for event in events:
            now = clock()
            arrivals.append(now)
            for c in event["choices"]:
                piece = _piece(c)
                if piece:
                    text += piece
                    stamps.append(now)
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
        if tokens is None:
            if not no_usage_ok:
                raise ValueError("no usage")
            tokens = len(stamps)
        n = len(stamps) if per_chunk else tokens
        gaps = n if by_tokens else n - 1
        tpot = (stamps[-1] - stamps[0]) / gaps if gaps > 0 else 0.0
        begin = arrivals[0] if own_start else start
        first = arrivals[0] if first_event else stamps[0]
        return {"text": text, "completion_tokens": tokens, "ttft_s": first - begin,
                "tpot_s": tpot}

    return fn


TIMED_MUTANTS = {
    "TTFT at the first event (the chat role event)": _timed_mutant(first_event=True),
    "TPOT over the chunks, not the tokens": _timed_mutant(per_chunk=True),
    "TPOT divides by the tokens, not the gaps": _timed_mutant(by_tokens=True),
    "TTFT from the first clock reading, not start": _timed_mutant(own_start=True),
    "no usage: counts chunks instead of raising": _timed_mutant(no_usage_ok=True),
}


# --- ch11.sweep ---------------------------------------------------------------------------------


def _row(n, results, wall, rank=lambda xs, p: sorted(xs)[math.ceil(p / 100 * len(xs)) - 1],
         throughput=None):
    tokens = sum(r["completion_tokens"] for r in results)
    row = {"concurrency": n, "requests": len(results), "tokens": tokens, "wall_s": wall,
           "throughput": throughput if throughput is not None else tokens / wall}
    for key in ("ttft", "tpot"):
        for p in (50, 90):
            row[f"{key}_p{p}"] = rank([r[f"{key}_s"] for r in results], p)
    return row


def sweep_solution(run_one, prompts, levels, clock=time.perf_counter, *, warmup="alone",
                   clients=lambda n: n, per_level=None, rank=None, per_request=False):
    if warmup == "alone":
        run_one(prompts[0])
    rows = []
    for n in levels:
        todo = queue.SimpleQueue()
        for p in (prompts if per_level is None else prompts[:per_level(n)]):
            todo.put(p)
        results, lock = [], threading.Lock()
        k = clients(n)
        go = threading.Barrier(k + 1)
        errors = []

        def client(go=go, todo=todo, lock=lock, results=results, errors=errors):
            go.wait()
            try:
                while True:
                    try:
                        prompt = todo.get_nowait()
                    except queue.Empty:
                        return
                    r = run_one(prompt)
                    with lock:
                        results.append(r)
            except Exception as e:  # noqa: BLE001 - raised again below
                errors.append(e)

        threads = [threading.Thread(target=client) for _ in range(k)]
        for t in threads:
            t.start()
        start = clock()
        if warmup == "inside" and n == levels[0]:
            run_one(prompts[0])
        if warmup == "counted" and n == levels[0]:
            results.append(run_one(prompts[0]))
        go.wait()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        wall = clock() - start
        tput = len(results) / wall if per_request else None
        rows.append(_row(n, results, wall, **({"rank": rank} if rank else {}),
                         throughput=tput))
    return rows


def sweep_event_counter(run_one, prompts, levels, clock=time.perf_counter):
    """Plain threads, a shared index under a lock, an Event as the start signal, and wall time
    from clock readings taken by the clients themselves."""
    run_one(prompts[0])
    out = []
    for n in levels:
        state = {"next": 0, "first": None, "last": None}
        lock, go, results = threading.Lock(), threading.Event(), []

        def client(go=go, lock=lock, state=state, results=results):
            go.wait()
            while True:
                with lock:
                    if state["next"] == len(prompts):
                        return
                    prompt = prompts[state["next"]]
                    state["next"] += 1
                    if state["first"] is None:
                        state["first"] = clock()
                r = run_one(prompt)
                with lock:
                    results.append(r)
                    state["last"] = clock()

        threads = [threading.Thread(target=client, daemon=True) for _ in range(n)]
        for t in threads:
            t.start()
        go.set()
        for t in threads:
            t.join()
        out.append(_row(n, results, state["last"] - state["first"]))
    return out


def _sweep_mutant(**kw):
    return lambda run_one, prompts, levels, clock=time.perf_counter: sweep_solution(
        run_one, prompts, levels, clock, **kw)


SWEEP_MUTANTS = {
    "no warm-up": _sweep_mutant(warmup="none"),
    "the warm-up inside the first level's wall time": _sweep_mutant(warmup="inside"),
    "the warm-up counted in the first level": _sweep_mutant(warmup="counted"),
    "one client fewer than the level claims": _sweep_mutant(clients=lambda n: max(n - 1, 1)),
    "level n sends only n prompts": _sweep_mutant(per_level=lambda n: n),
    "p90 at index int(0.9 k)": _sweep_mutant(
        rank=lambda xs, p: sorted(xs)[min(int(p / 100 * len(xs)), len(xs) - 1)]),
    "throughput in requests per second": _sweep_mutant(per_request=True),
}


# --- every exercise -----------------------------------------------------------------------------

EXERCISES = {
    "ch11.sse_events": ([sse_solution, sse_bytes_lines], SSE_MUTANTS),
    "ch11.merge_stream": ([merge_solution, merge_defaultdict], MERGE_MUTANTS),
    "ch11.timed_stream": ([timed_solution, timed_first_last], TIMED_MUTANTS),
    "ch11.sweep": ([sweep_solution, sweep_event_counter], SWEEP_MUTANTS),
}
CORRECT = [(ex, fn) for ex, (fns, _) in EXERCISES.items() for fn in fns]
WRONG = [(ex, name) for ex, (_, mutants) in EXERCISES.items() for name in mutants]


@pytest.mark.parametrize("exercise, fn", CORRECT, ids=[f"{e}-{f.__name__}" for e, f in CORRECT])
def test_correct_variants_pass(exercise, fn):
    assert check(exercise, fn).passed


@pytest.mark.parametrize("exercise, name", WRONG, ids=[f"{e}-{n}" for e, n in WRONG])
def test_mutants_fail(exercise, name):
    assert not check(exercise, EXERCISES[exercise][1][name]).passed
