"""The HTTP server, driven as a user drives it: the official `openai` client and raw HTTP
against a server started here on 127.0.0.1 and a free port (on "tiny": the real tokenizer,
random weights).

What it holds: the server is the engine (greedy and seeded text equal `LLM.generate`); many
clients share one engine; a client that goes away is aborted and its pages come back; every
bad request is a 400 with an OpenAI-style body and changes nothing; a full server says 429;
a failing engine step is a 500 for its requests only; shutdown leaves nothing running.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import psutil
import pytest

import minimodel as mm
from minimodel.engine import LLM
from minimodel.serve import Server

pytestmark = pytest.mark.stress  # threads, sockets, a subprocess, deadlines
ROOT = Path(__file__).resolve().parents[1]
NEW = 8  # tokens per answer: short, so that the whole file runs in about a minute
PROMPTS = [f"{word} number {i}" for i, word in enumerate(
    ["Hello", "床前明月光", "The capital of France is", "def add(a, b):", "Once upon a time",
     "ROMEO.", "我爱北京", "1, 2, 3,"] * 4)]  # 32 different prompts
CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi!"}]


def greedy(n: int = NEW, **kw) -> mm.SamplingParams:
    return mm.SamplingParams(temperature=0.0, max_new_tokens=n, **kw)


@pytest.fixture(scope="module")
def served():
    """(server, client, expected): what LLM.generate gives, computed before the server owns
    the engine; then the server around the same LLM."""
    llm = LLM("tiny", device="cpu", num_pages=512, max_num_seqs=64)
    tok = llm.tokenizer
    exp = {"greedy": [o.text for o in llm.generate(PROMPTS, greedy())]}
    free = llm.generate(["Hello world"], greedy(24))[0].text
    exp["stop"] = free[6:9]
    exp["stopped"] = llm.generate(["Hello world"], greedy(24, stop=[exp["stop"]]))[0]
    exp["seeded"] = llm.generate(["Once upon a time"], mm.SamplingParams(
        temperature=0.8, top_k=50, top_p=0.9, seed=7, max_new_tokens=NEW))[0].text
    exp["logprobs"] = llm.generate(["Hello"], greedy(logprobs=True))[0]
    chat_ids = tok.apply_chat_template(CHAT, add_generation_prompt=True, enable_thinking=False,
                                       tokenize=True)
    exp["chat"] = llm.generate([chat_ids], greedy())[0]
    exp["chat_tokens"] = len(chat_ids)
    exp["think"] = len(tok.apply_chat_template(CHAT, add_generation_prompt=True,
                                               enable_thinking=True, tokenize=True))
    threads = set(threading.enumerate())
    server = Server(llm, model_name="tiny").start()
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                           timeout=60)
    yield server, client, exp
    client.close()
    server.close()
    assert set(threading.enumerate()) <= threads, "the server left a thread behind"


def settled(server: Server, timeout: float = 10.0) -> dict:
    """Wait until no request is left in the server and every page is free; the stats."""
    deadline = time.monotonic() + timeout
    while True:
        stats = server.engine.stats()
        idle = stats["requests"] == 0 and stats["running"] == 0 and stats["waiting"] == 0
        if idle and stats["free_pages"] == stats["num_pages"]:
            return stats
        assert time.monotonic() < deadline, f"the server did not settle: {stats}"
        time.sleep(0.02)


# --- the server is the engine ---------------------------------------------------------------


def test_completion_equals_llm_generate(served):
    server, client, exp = served
    r = client.completions.create(model="tiny", prompt=PROMPTS[2], max_tokens=NEW,
                                  temperature=0)
    assert r.object == "text_completion" and r.model == "tiny"
    assert r.choices[0].text == exp["greedy"][2]
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == NEW
    assert r.usage.prompt_tokens == len(server.llm.tokenizer.encode(PROMPTS[2]))
    assert r.usage.total_tokens == r.usage.prompt_tokens + NEW


def test_streamed_completion_adds_up_to_the_same_text(served):
    server, client, exp = served
    chunks = list(client.completions.create(model="tiny", prompt=PROMPTS[1], max_tokens=NEW,
                                            temperature=0, stream=True))
    assert len(chunks) > 1
    assert "".join(c.choices[0].text for c in chunks) == exp["greedy"][1]
    assert [c.choices[0].finish_reason for c in chunks][-1] == "length"
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])
    assert all("\ufffd" not in c.choices[0].text for c in chunks)


def test_a_list_of_prompts_gives_one_choice_each(served):
    server, client, exp = served
    r = client.completions.create(model="tiny", prompt=PROMPTS[:3], max_tokens=NEW,
                                  temperature=0)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert [c.text for c in r.choices] == exp["greedy"][:3]


def test_chat_uses_the_chat_template(served):
    server, client, exp = served
    r = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=NEW,
                                       temperature=0, extra_body={"enable_thinking": False})
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == exp["chat"].text
    assert r.usage.prompt_tokens == exp["chat_tokens"]
    # thinking on (the template's default) is a different prompt
    r = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=1, temperature=0)
    assert r.usage.prompt_tokens == exp["think"] != exp["chat_tokens"]


def test_streamed_chat(served):
    server, client, exp = served
    chunks = list(client.chat.completions.create(
        model="tiny", messages=CHAT, max_tokens=NEW, temperature=0, stream=True,
        stream_options={"include_usage": True},
        extra_body={"chat_template_kwargs": {"enable_thinking": False}}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == exp["chat"].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == NEW


def test_stop_strings_seeds_and_logprobs_map_to_sampling_params(served):
    server, client, exp = served
    r = client.completions.create(model="tiny", prompt="Hello world", max_tokens=24,
                                  temperature=0, stop=[exp["stop"], "never-there"])
    assert r.choices[0].text == exp["stopped"].text and r.choices[0].finish_reason == "stop"
    streamed = client.completions.create(model="tiny", prompt="Hello world", max_tokens=24,
                                         temperature=0, stop=exp["stop"], stream=True)
    assert "".join(c.choices[0].text for c in streamed) == exp["stopped"].text
    r = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=NEW,
                                  temperature=0.8, top_p=0.9, seed=7,
                                  extra_body={"top_k": 50})
    assert r.choices[0].text == exp["seeded"]
    r = client.completions.create(model="tiny", prompt="Hello", max_tokens=NEW, temperature=0,
                                  logprobs=0)
    lp = r.choices[0].logprobs
    assert len(lp.token_logprobs) == NEW and len(lp.tokens) == NEW
    assert max(abs(a - b) for a, b in zip(lp.token_logprobs, exp["logprobs"].logprobs)) < 1e-5
    r = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=3, temperature=0,
                                       logprobs=True)
    assert len(r.choices[0].logprobs.content) == 3


def test_models_and_health(served):
    server, client, _ = served
    assert [m.id for m in client.models.list()] == ["tiny"]
    health = httpx.get(server.url + "/health").json()
    assert health["status"] == "ok" and health["model"] == "tiny"


def test_one_llm_is_served_by_one_engine_loop_at_a_time(served):
    server, _, _ = served
    threads = set(threading.enumerate())
    with pytest.raises(RuntimeError, match="already served"):
        Server(server.llm).start()
    assert set(threading.enumerate()) == threads


# --- one engine, many clients ---------------------------------------------------------------


def test_32_concurrent_streaming_clients_get_their_own_text(served):
    server, _, exp = served
    sizes = []
    run = server.llm.runner.run

    def traced(batch):
        sizes.append(len(batch.seqs))
        return run(batch)

    async def one(client: openai.AsyncOpenAI, i: int) -> str:
        stream = await client.completions.create(model="tiny", prompt=PROMPTS[i],
                                                 max_tokens=NEW, temperature=0, stream=True)
        return "".join([c.choices[0].text async for c in stream])

    async def all_of_them() -> list[str]:
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="none",
                                      max_retries=0, timeout=120) as client:
            return await asyncio.gather(*(one(client, i) for i in range(len(PROMPTS))))

    server.llm.runner.run = traced
    try:
        texts = asyncio.run(all_of_them())
    finally:
        del server.llm.runner.run
    assert texts == exp["greedy"]
    assert max(sizes) >= 8, f"the requests were not batched together: {sizes}"
    settled(server)


def test_a_stream_that_disconnects_is_aborted_and_its_pages_freed(served):
    server, client, _ = served
    stream = client.completions.create(model="tiny", prompt="Hello", max_tokens=3000,
                                       temperature=0, stream=True, extra_body={"ignore_eos": True})
    next(stream), next(stream)
    stats = server.engine.stats()
    assert stats["running"] == 1 and stats["free_pages"] < stats["num_pages"]
    stream.close()
    settled(server)


def test_a_waiting_client_that_disconnects_is_aborted(served):
    server, _, _ = served
    body = {"model": "tiny", "prompt": "Hello", "max_tokens": 3000, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/completions", json=body, timeout=1.0)
    settled(server)


def test_a_full_server_answers_429_and_recovers(served, monkeypatch):
    server, client, _ = served
    monkeypatch.setattr(server.engine, "max_requests", 2)
    streams = [client.completions.create(model="tiny", prompt="Hi", max_tokens=3000,
                                         stream=True, extra_body={"ignore_eos": True})
               for _ in range(2)]
    for s in streams:
        next(s)
    with pytest.raises(openai.RateLimitError) as err:
        client.completions.create(model="tiny", prompt="Hi", max_tokens=2)
    assert err.value.status_code == 429 and err.value.body["type"] == "rate_limit_error"
    for s in streams:
        s.close()
    settled(server)
    assert client.completions.create(model="tiny", prompt="Hi", max_tokens=2).choices[0].text


def test_an_engine_error_fails_its_request_with_500_and_the_server_goes_on(served):
    server, client, exp = served
    marker = server.llm.tokenizer.encode("BOOM")
    run = server.llm.runner.run

    def failing(batch):
        if any(s.token_ids[:len(marker)] == marker for s in batch.seqs):
            raise RuntimeError("a kernel failed")
        return run(batch)

    server.llm.runner.run = failing
    try:
        with pytest.raises(openai.InternalServerError) as err:
            client.completions.create(model="tiny", prompt="BOOM", max_tokens=NEW)
        assert err.value.status_code == 500 and "a kernel failed" in err.value.message
        with pytest.raises(openai.APIError, match="a kernel failed"):
            list(client.completions.create(model="tiny", prompt="BOOM", max_tokens=NEW,
                                           stream=True))
        settled(server)
        r = client.completions.create(model="tiny", prompt=PROMPTS[0], max_tokens=NEW,
                                      temperature=0)
        assert r.choices[0].text == exp["greedy"][0]
    finally:
        del server.llm.runner.run


def test_an_unexpected_error_while_queueing_is_a_500_and_the_engine_goes_on(served):
    server, client, exp = served

    def broken(prompt, params=None):
        raise RuntimeError("the queue is broken")

    server.llm.add_request = broken
    try:
        with pytest.raises(openai.InternalServerError, match="the queue is broken"):
            client.completions.create(model="tiny", prompt="Hi", max_tokens=2)
    finally:
        del server.llm.add_request
    assert server.engine.is_alive
    r = client.completions.create(model="tiny", prompt=PROMPTS[5], max_tokens=NEW, temperature=0)
    assert r.choices[0].text == exp["greedy"][5]
    settled(server)


def _local_port(response: httpx.Response) -> int:
    """The client's port of the connection that carried this response."""
    return response.extensions["network_stream"].get_extra_info("client_addr")[1]


def test_every_error_status_leaves_the_connection_usable(served, monkeypatch):
    """After a 400, 404, 429, 500 or 503 the server keeps the connection open (keep-alive):
    the next request goes over the same socket, and a pooled openai client with
    max_retries=0 never meets a reset. (401 is checked with the API-key server below.)"""
    server, client, exp = served
    ok = {"model": "tiny", "prompt": PROMPTS[4], "max_tokens": NEW, "temperature": 0}

    def broken(prompt, params=None):
        raise RuntimeError("the queue is broken")

    def status_500():
        monkeypatch.setattr(server.llm, "add_request", broken)
        return "POST", "/v1/completions", {"json": ok}

    def status_429():
        monkeypatch.setattr(server.engine, "_num_requests", server.engine.max_requests)
        return "POST", "/v1/completions", {"json": ok}

    def status_503():
        monkeypatch.setattr(server.llm.runner, "closed", "a worker died", raising=False)
        return "POST", "/v1/completions", {"json": ok}

    cases = {
        400: lambda: ("POST", "/v1/completions", {"json": {**ok, "temperature": -1}}),
        404: lambda: ("GET", "/v1/no-such-route", {}),
        429: status_429, 500: status_500, 503: status_503,
    }
    with httpx.Client(base_url=server.url, timeout=60,
                      limits=httpx.Limits(max_connections=1)) as http:
        first = http.post("/v1/completions", json=ok)
        assert first.status_code == 200
        port = _local_port(first)
        for status, make in cases.items():
            method, path, kw = make()
            r = http.request(method, path, **kw)
            assert r.status_code == status, r.text
            assert set(r.json()["error"]) == {"message", "type", "param", "code"}
            monkeypatch.undo()
            after = http.post("/v1/completions", json=ok)
            assert after.status_code == 200
            assert after.json()["choices"][0]["text"] == exp["greedy"][4]
            assert _local_port(r) == _local_port(after) == port, f"{status} closed the connection"
        # the openai client over its own pool: every error, then a good request, no retries
        for status, make in cases.items():
            if status == 404:
                continue
            make()
            with pytest.raises(openai.APIStatusError) as err:
                client.completions.create(model="tiny", prompt="Hi", max_tokens=2,
                                          temperature=-1 if status == 400 else 0)
            assert err.value.status_code == status
            monkeypatch.undo()
            r = client.completions.create(model="tiny", prompt=PROMPTS[4], max_tokens=NEW,
                                          temperature=0)
            assert r.choices[0].text == exp["greedy"][4]
    settled(server)


def test_health_is_503_when_the_engine_cannot_serve(served, monkeypatch):
    server, client, _ = served
    assert httpx.get(server.url + "/health").status_code == 200
    monkeypatch.setattr(server.llm.runner, "closed", "a worker failed", raising=False)
    r = httpx.get(server.url + "/health")
    assert r.status_code == 503 and "a worker failed" in r.json()["reason"]
    with pytest.raises(openai.InternalServerError) as err:
        client.completions.create(model="tiny", prompt="Hi", max_tokens=2)
    assert err.value.status_code == 503 and "a worker failed" in err.value.message
    monkeypatch.undo()
    assert httpx.get(server.url + "/health").status_code == 200


def test_a_bad_request_beside_good_ones_changes_none_of_them(served):
    """Fifteen good requests in flight while bad ones (integers past int64) arrive: every good
    one gets its own text, every bad one a 400."""
    server, _, exp = served
    bad = [{"top_k": 2**70}, {"seed": 2**70}, {"max_tokens": 2**70}, {"n": 2**70}]

    async def good(http: httpx.AsyncClient, i: int) -> str:
        r = await http.post("/v1/completions", json={
            "model": "tiny", "prompt": PROMPTS[i], "max_tokens": NEW, "temperature": 0,
            "top_k": 40, "seed": i})
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["text"]

    async def refused(http: httpx.AsyncClient, fields: dict) -> int:
        r = await http.post("/v1/completions", json={"model": "tiny", "prompt": "Hi",
                                                     "max_tokens": 2, **fields})
        return r.status_code

    async def together() -> tuple[list[str], list[int]]:
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as http:
            goods = [good(http, i) for i in range(15)]
            bads = [refused(http, f) for f in bad]
            out = await asyncio.gather(*goods, *bads)
            return out[:15], out[15:]

    texts, statuses = asyncio.run(together())
    assert texts == exp["greedy"][:15]
    assert statuses == [400] * len(bad)
    settled(server)


def test_a_tiny_temperature_is_greedy(served):
    server, client, exp = served
    for t in (1e-38, 5e-324, 1e-6):
        r = client.completions.create(model="tiny", prompt=PROMPTS[2], max_tokens=NEW,
                                      temperature=t)
        assert r.choices[0].text == exp["greedy"][2], t


def test_prompts_are_tokenised_off_the_event_loop(served, monkeypatch):
    import minimodel.serve.prompts as prompts_module

    server, client, exp = served
    threads = []
    encode = prompts_module._completion_prompts

    def spy(prompts, tokenizer):
        threads.append(threading.current_thread().name)
        return encode(prompts, tokenizer)

    monkeypatch.setattr(prompts_module, "_completion_prompts", spy)
    r = client.completions.create(model="tiny", prompt=PROMPTS[0], max_tokens=NEW,
                                  temperature=0)
    assert r.choices[0].text == exp["greedy"][0]
    assert threads and all(name.startswith("minimodel-tokenize") for name in threads), threads


@pytest.fixture(scope="module")
def strict():
    """A second server with a small body limit and a short body timeout."""
    llm = LLM("tiny", device="cpu", num_pages=64)
    with Server(llm, model_name="tiny", max_body_bytes=64 * 1024, body_timeout_s=1.0) as server:
        yield server


def test_a_body_over_the_limit_is_413_before_it_is_read(strict):
    for body in ({"model": "tiny", "prompt": "x" * 100_000}, ):
        r = httpx.post(strict.url + "/v1/completions", json=body, timeout=60)
        assert r.status_code == 413, r.text
        assert r.json()["error"]["code"] == "request_too_large"
    # without a Content-Length (chunked), the limit holds too
    def chunks():
        yield b'{"model": "tiny", "prompt": "'
        for _ in range(100):
            yield b"x" * 1000
        yield b'"}'

    r = httpx.post(strict.url + "/v1/completions", content=chunks(), timeout=60,
                   headers={"content-type": "application/json"})
    assert r.status_code == 413, r.text
    assert httpx.get(strict.url + "/health").status_code == 200


def test_a_text_longer_than_the_context_can_hold_is_400_before_tokenising(served, monkeypatch):
    import minimodel.serve.prompts as prompts_module

    server, client, _ = served
    calls = []
    monkeypatch.setattr(prompts_module, "_completion_prompts", lambda *a: calls.append(a))
    # 4096 tokens of at most 256 bytes each hold 1 MiB of text: 2 MiB cannot fit
    huge = "ab" * (1 << 20)
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="tiny", prompt=huge, max_tokens=2)
    assert err.value.body["param"] == "prompt" and "bytes" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": huge}])
    assert err.value.body["param"] == "messages"
    assert calls == [], "the text was tokenised"
    assert httpx.get(server.url + "/health").status_code == 200


def _raw_request(url: str, head: bytes) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=60)
    sock.sendall(head)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_body_that_never_arrives_is_408_and_the_connection_closes(strict):
    """Headers that promise 100 bytes, then 10 of them and silence: each such client gets a
    408 once the body timeout passes, and its connection is closed; the server answers
    others meanwhile."""
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n" + b'{"model":')
    socks = [_raw_request(strict.url, head) for _ in range(20)]
    try:
        assert httpx.get(strict.url + "/health", timeout=60).status_code == 200
        for sock in socks:
            answer = _read_until_closed(sock)  # recv returns b"" once the server closed it
            assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
            assert b"request_timeout" in answer
    finally:
        for sock in socks:
            sock.close()


# --- bad requests: a 400 with an OpenAI-style body, and nothing changes ---------------------


BAD_COMPLETIONS = {
    "temperature below 0": {"temperature": -0.5},
    "temperature not a number": {"temperature": "hot"},
    "top_p 0": {"top_p": 0.0},
    "top_p above 1": {"top_p": 1.5},
    "top_k below -1": {"top_k": -3},
    "max_tokens below 0": {"max_tokens": -1},
    "max_tokens not an integer": {"max_tokens": 2.5},
    "n 0": {"n": 0},
    "empty stop string": {"stop": [""]},
    "logprobs below 0": {"logprobs": -1},
    "presence_penalty past 2": {"presence_penalty": 2.5},
    "echo with logprobs": {"echo": True, "logprobs": 1},
    "empty prompt": {"prompt": ""},
    "empty prompt list": {"prompt": []},
    "over-long prompt": {"prompt": "hello " * 5000},
    "prompt + max_tokens over the context": {"max_tokens": 4096},
    "token id outside the vocabulary": {"prompt": [5, 10**7]},
    "prompt not text or ids": {"prompt": {"text": "hi"}},
    # integers that no engine could take: refused before any step, never a 500 later
    "top_k past int64": {"top_k": 2**70},
    "seed past int64": {"seed": 2**70},
    "seed + n past int64": {"seed": 2**63 - 1, "n": 2},
    "max_tokens past int64": {"max_tokens": 2**70},
    "logprobs past the limit": {"logprobs": 2**70},
    "n past the limit": {"n": 2**70},
    # more completions than the server ever holds at once: a 400, not "retry later"
    "n above the server's limit": {"n": 1000},
    "more prompts than the server holds": {"prompt": ["Hi"] * 300},
}
BAD_CHATS = {
    "no messages": {"messages": []},
    "a message without a role": {"messages": [{"content": "hi"}]},
    "an image part": {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x"}}]}]},
    "over-long conversation": {"messages": [{"role": "user", "content": "hello " * 5000}]},
    "top_p above 1": {"messages": CHAT, "top_p": 2.0},
    "an unknown role": {"messages": [{"role": "wizard", "content": "hi"}]},
    "an empty role": {"messages": [*CHAT, {"role": "", "content": "hi"}]},
    "top_logprobs past the limit": {"messages": CHAT, "logprobs": True, "top_logprobs": 2**70},
    "n past the limit": {"messages": CHAT, "n": 2**70},
    "template kwargs the server sets": {"messages": CHAT,
                                        "chat_template_kwargs": {"tokenize": False}},
}


def _check_400(response: httpx.Response, case: str = "") -> dict:
    assert response.status_code == 400, f"{case}: {response.text}"
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def test_bad_requests_get_400_and_change_nothing(served):
    server, client, exp = served
    before = settled(server)
    next_id = server.llm._next_id
    for name, fields in BAD_COMPLETIONS.items():
        body = {"model": "tiny", "prompt": "Hello", "max_tokens": 2, **fields}
        error = _check_400(httpx.post(server.url + "/v1/completions", json=body), name)
        assert error["param"], name
    for name, fields in BAD_CHATS.items():
        _check_400(httpx.post(server.url + "/v1/chat/completions",
                              json={"model": "tiny", "max_tokens": 2, **fields}), name)
    for raw in (b"{not json", b"[1, 2]", b"", b'"a string"'):
        _check_400(httpx.post(server.url + "/v1/completions", content=raw,
                              headers={"content-type": "application/json"}), repr(raw))
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="tiny", prompt="Hi", temperature=-1)
    assert err.value.body["param"] == "temperature"
    for path, body in (("/v1/completions", {"prompt": "Hello", "model": "no-such-model"}),
                       ("/v1/chat/completions", {"messages": CHAT, "model": "gpt-4o"})):
        r = httpx.post(server.url + path, json=body)  # an unknown model: 404, as OpenAI's
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found", r.text
    assert server.llm._next_id == next_id, "a bad request reached the engine"
    assert settled(server) == before  # the same pages, queues and number of engine steps
    r = client.completions.create(model="tiny", prompt=PROMPTS[3], max_tokens=NEW, temperature=0)
    assert r.choices[0].text == exp["greedy"][3]


# --- API key, shutdown, the command line ----------------------------------------------------


LONG = {"model": "tiny", "prompt": "Hi", "max_tokens": 3000, "ignore_eos": True}


class _InFlight:
    """Two requests that run until the server stops: a stream (its lines are kept) and a
    plain request (its response is kept), each in a thread; `running` is set once the stream
    has brought its first event."""

    def __init__(self, url: str, headers: dict | None = None) -> None:
        self.url, self.headers = url, headers or {}
        self.running = threading.Event()
        self.lines: list[str] = []
        self.response: httpx.Response | None = None
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._stream), threading.Thread(target=self._post)]
        for t in self.threads:
            t.start()

    def _stream(self) -> None:
        try:
            with httpx.stream("POST", self.url + "/v1/completions", headers=self.headers,
                              json={**LONG, "stream": True}, timeout=120) as r:
                for line in r.iter_lines():
                    if line:
                        self.lines.append(line)
                        self.running.set()
        except BaseException as err:  # the test reads it
            self.errors.append(err)
            self.running.set()

    def _post(self) -> None:
        try:
            self.response = httpx.post(self.url + "/v1/completions", json=LONG,
                                       headers=self.headers, timeout=120)
        except BaseException as err:
            self.errors.append(err)

    def join(self, timeout: float = 120) -> None:
        for t in self.threads:
            t.join(timeout)
            assert not t.is_alive(), "a client was still waiting after the shutdown"

    def check_ended_cleanly(self) -> None:
        """The stream ended with an error event and then [DONE]; the plain request got a 503
        in OpenAI's shape."""
        assert not self.errors, self.errors
        assert self.lines[-1] == "data: [DONE]", self.lines[-3:]
        error = json.loads(self.lines[-2].removeprefix("data: "))["error"]
        assert error["type"] == "server_error" and "shutting down" in error["message"]
        assert self.response is not None and self.response.status_code == 503
        body = self.response.json()["error"]
        assert set(body) == {"message", "type", "param", "code"} and body["code"] == "unavailable"


def _wait_running(server: Server, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while server.engine.stats()["running"] < n:
        assert time.monotonic() < deadline, server.engine.stats()
        time.sleep(0.02)


def test_api_key_and_a_clean_shutdown_with_requests_open(record_property):
    threads = set(threading.enumerate())
    # processes other tests left on purpose (multiprocessing's resource tracker) are not ours
    children = {c.pid for c in psutil.Process().children(recursive=True)}
    llm = LLM("tiny", device="cpu", num_pages=64)
    with Server(llm, api_key="sekret") as server:
        url = server.url + "/v1"
        anonymous = openai.OpenAI(base_url=url, api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            anonymous.models.list()
        assert httpx.post(url + "/completions", json={"prompt": "Hi"}).status_code == 401
        assert httpx.get(server.url + "/health").status_code == 200  # no key needed
        key = {"Authorization": "Bearer sekret"}
        with httpx.Client(base_url=server.url, timeout=60) as http:  # a 401 keeps the socket
            denied = http.get("/v1/models")
            allowed = http.get("/v1/models", headers=key)
            assert (denied.status_code, allowed.status_code) == (401, 200)
            assert _local_port(denied) == _local_port(allowed)
        client = openai.OpenAI(base_url=url, api_key="sekret", max_retries=0)
        assert client.completions.create(model="tiny", prompt="Hi", max_tokens=2).choices
        flight = _InFlight(server.url, key)
        assert flight.running.wait(120)
        _wait_running(server, 2)
        start = time.monotonic()
        server.close()  # with both still open: each gets its answer
        flight.join()
        record_property("shutdown_s", round(time.monotonic() - start, 2))
        flight.check_ended_cleanly()
    assert llm.allocator.num_free == llm.allocator.num_pages
    assert set(threading.enumerate()) <= threads
    assert {c.pid for c in psutil.Process().children(recursive=True)} <= children


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_python_m_minimodel_serve():
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "minimodel", "serve", "--model", "tiny",
                             "--port", str(port), "--num-pages", "64", "--log-level", "warning"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, proc.communicate()[0]
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.5)
        with httpx.stream("POST", url + "/v1/completions", json={
                "model": "tiny", "prompt": "Hello", "max_tokens": 3, "stream": True},
                timeout=60) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            lines = [line for line in r.iter_lines() if line]
        assert lines[-1] == "data: [DONE]"
        chunks = [json.loads(line[len("data: "):]) for line in lines[:-1]]
        assert all(line.startswith("data: ") for line in lines)
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        # SIGTERM with a stream and a plain request open: both get their answer, then exit 0
        flight = _InFlight(url)
        assert flight.running.wait(120)
        deadline = time.monotonic() + 120
        while httpx.get(url + "/health", timeout=60).json()["running"] < 2:
            assert time.monotonic() < deadline, "the two requests did not start"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        flight.join()
        flight.check_ended_cleanly()
        assert proc.wait(timeout=120) == 0
        log = proc.stdout.read()
        assert "Traceback" not in log and "CancelledError" not in log, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_a_dead_tensor_parallel_worker_makes_health_503_and_requests_503():
    """A killed worker closes the tensor-parallel LLM: the request in flight fails, later ones
    are 503 ("restart the server"), and /health says why instead of "ok"."""
    with LLM("tiny", device="cpu", num_pages=64, tensor_parallel_size=2) as llm, \
            Server(llm, model_name="tiny") as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                               timeout=300)
        assert client.completions.create(model="tiny", prompt="Hi", max_tokens=2).choices
        assert httpx.get(server.url + "/health").status_code == 200
        worker = psutil.Process(llm.runner._procs[0].pid)
        worker.kill()
        worker.wait(60)
        with pytest.raises(openai.APIStatusError) as err:  # the step that meets the dead rank
            client.completions.create(model="tiny", prompt="Hi", max_tokens=4)
        assert err.value.status_code in (500, 503), err.value
        health = httpx.get(server.url + "/health", timeout=60)
        assert health.status_code == 503 and "closed" in health.json()["reason"]
        with pytest.raises(openai.APIStatusError) as err:
            client.completions.create(model="tiny", prompt="Hi", max_tokens=2)
        assert err.value.status_code == 503 and "restart the server" in err.value.message
