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
    "seed below 0": {"seed": -1},
    "empty stop string": {"stop": [""]},
    "logprobs below 0": {"logprobs": -1},
    "presence_penalty": {"presence_penalty": 0.5},
    "echo": {"echo": True},
    "empty prompt": {"prompt": ""},
    "empty prompt list": {"prompt": []},
    "over-long prompt": {"prompt": "hello " * 5000},
    "prompt + max_tokens over the context": {"max_tokens": 4096},
    "token id outside the vocabulary": {"prompt": [5, 10**7]},
    "prompt not text or ids": {"prompt": {"text": "hi"}},
    "unknown model": {"model": "no-such-model"},
}
BAD_CHATS = {
    "no messages": {"messages": []},
    "a message without a role": {"messages": [{"content": "hi"}]},
    "an image part": {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x"}}]}]},
    "over-long conversation": {"messages": [{"role": "user", "content": "hello " * 5000}]},
    "unknown model": {"messages": CHAT, "model": "gpt-4o"},
    "top_p above 1": {"messages": CHAT, "top_p": 2.0},
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
    assert server.llm._next_id == next_id, "a bad request reached the engine"
    assert settled(server) == before  # the same pages, queues and number of engine steps
    r = client.completions.create(model="tiny", prompt=PROMPTS[3], max_tokens=NEW, temperature=0)
    assert r.choices[0].text == exp["greedy"][3]


# --- API key, shutdown, the command line ----------------------------------------------------


def test_api_key_and_a_clean_shutdown_with_a_stream_open():
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
        client = openai.OpenAI(base_url=url, api_key="sekret", max_retries=0)
        assert client.completions.create(model="tiny", prompt="Hi", max_tokens=2).choices
        stream = client.completions.create(model="tiny", prompt="Hi", max_tokens=3000,
                                           stream=True, extra_body={"ignore_eos": True})
        next(stream)
        server.close()  # with the stream still open: it ends with an error event
        with pytest.raises(openai.APIError, match="shutting down"):
            list(stream)
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
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
