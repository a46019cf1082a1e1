"""The server's API, held to OpenAI's and vLLM's: every answer validates against the `openai`
package's own types, streams are `data: {json}\\n\\n` events ending with `data: [DONE]\\n\\n`,
every field is honoured or refused by name, /metrics is Prometheus text whose counters move,
/tokenize and /detokenize agree with the tokenizer, an unknown model is a 404, Qwen3's think
block becomes reasoning_content (--reasoning-parser qwen3), chat logprobs carry each token's
bytes. On "tiny" (the real tokenizer, random weights) and a server on 127.0.0.1.
"""

from __future__ import annotations

import itertools
import json
import time

import httpx
import openai
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from prometheus_client.parser import text_string_to_metric_families

import minimodel as mm
from minimodel.bpe import bytes_to_unicode
from minimodel.serve import EngineLoop, Server, create_app
from minimodel.serve.reasoning import ReasoningSplit, split_reasoning

CHAT = [{"role": "user", "content": "Hi!"}]
NEW = 6


# --- the reasoning split, without a server --------------------------------------------------


THOUGHT = "<think>\nLet me see.</think>\n\nThe answer."


def _pieces(text: str, cuts: tuple[int, ...]) -> list[str]:
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def _split_stream(pieces: list[str], thinking: bool, opened: bool = False) -> tuple[str, str]:
    split = ReasoningSplit(thinking, opened)
    reasoning = content = ""
    for piece in pieces:
        r, c = split.push(piece)
        reasoning, content = reasoning + r, content + c
    r, c = split.flush()
    return reasoning + r, content + c


def test_a_think_block_split_anywhere_across_deltas_gives_the_same_parts():
    for cuts in itertools.combinations(range(1, len(THOUGHT)), 2):
        assert _split_stream(_pieces(THOUGHT, cuts), True) == ("\nLet me see.",
                                                                "\n\nThe answer."), cuts
    assert split_reasoning(THOUGHT, True) == ("\nLet me see.", "\n\nThe answer.")


def test_reasoning_is_the_think_block_the_answer_opens_and_thinking_off_is_all_content():
    assert split_reasoning("<think>still thinking", True) == ("still thinking", None)
    assert split_reasoning("  <think>a</think>b", True) == ("a", "b")
    # no think block opened (a model that never learnt the tags): all content, streamed too
    assert split_reasoning("no tags at all", True) == (None, "no tags at all")
    assert split_reasoning("thought</think>answer", True) == (None, "thought</think>answer")
    assert _split_stream(["<", "th", "x"], True) == ("", "<thx")
    # the prompt opened the block (a thinking-only template): the end tag alone ends it
    assert split_reasoning("thought</think>answer", True, opened=True) == ("thought", "answer")
    assert split_reasoning(THOUGHT, False) == (None, THOUGHT)
    assert _split_stream(["a </th", "ink", "> b"], True, opened=True) == ("a ", " b")
    assert _split_stream(["<think>a </th"], True) == ("a </th", "")  # a tag never finished
    assert _split_stream(["<thi", "nk>x"], True) == ("x", "")


def test_two_apps_in_one_process_keep_their_own_metrics():
    llm = mm.LLM("tiny", device="cpu", num_pages=16)
    apps = [create_app(EngineLoop(llm), "tiny") for _ in range(2)]
    registries = [app.state.engine.metrics.registry for app in apps]
    assert registries[0] is not registries[1]
    apps[0].state.engine.metrics.prompt(7)
    values = [r.get_sample_value("minimodel:prompt_tokens_total", {"model_name": "tiny"})
              for r in registries]
    assert values == [7.0, 0.0]


# --- against a server ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served():
    """(server, client, expected): expected answers from LLM.generate, computed before the
    server owns the engine."""
    llm = mm.LLM("tiny", device="cpu", num_pages=256, max_num_seqs=16)
    plain = mm.SamplingParams(temperature=0, max_tokens=NEW)
    honoured = {  # fields that reach SamplingParams: the server must give generate's text
        "min_p": {"temperature": 0.9, "min_p": 0.2, "seed": 11},
        "repetition_penalty": {"repetition_penalty": 2.0},
        "presence_penalty": {"presence_penalty": 1.5, "frequency_penalty": 1.0},
        "min_tokens": {"min_tokens": NEW, "stop_token_ids": [151643]},
        "negative seed": {"temperature": 0.9, "seed": -12345},
        "top_k -1": {"temperature": 0.9, "top_k": -1, "seed": 5},
    }
    exp = {"plain": llm.generate(["Hello"], plain)[0].text, "honoured": {},
           "top": llm.generate(["Hello"], mm.SamplingParams(temperature=0, max_tokens=NEW,
                                                            logprobs=3))[0]}
    for name, fields in honoured.items():
        params = mm.SamplingParams(**{"temperature": 0, "max_tokens": NEW, **fields})
        exp["honoured"][name] = (fields, llm.generate(["Hello"], params)[0].text)
    assert exp["honoured"]["repetition_penalty"][1] != exp["plain"], "the penalty changes nothing"
    loose = mm.SamplingParams(temperature=0.9, seed=11, max_tokens=NEW)
    assert llm.generate(["Hello"], loose)[0].text != exp["honoured"]["min_p"][1], (
        "min_p changes nothing here: pick another case")
    server = Server(llm, model_name="tiny", reasoning_parser="qwen3").start()
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                           timeout=120)
    yield server, client, exp
    client.close()
    server.close()


def _settled(server: Server, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        s = server.engine.stats()
        if s["requests"] == 0 and s["running"] == 0 and s["free_pages"] == s["num_pages"]:
            return
        assert time.monotonic() < deadline, s
        time.sleep(0.02)


def _post(server: Server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=120)


def _raw_events(server: Server, path: str, body: dict) -> list[str]:
    """The data of each event of a stream, checked to be exactly `data: ...\\n\\n` each."""
    with httpx.stream("POST", server.url + path, json={**body, "stream": True},
                      timeout=120) as r:
        assert r.status_code == 200
        raw = r.read().decode()
    assert raw.endswith("data: [DONE]\n\n"), raw[-200:]
    events = raw.split("\n\n")
    assert events[-1] == ""
    for event in events[:-1]:
        assert event.startswith("data: ") and "\n" not in event, event
    return [event.removeprefix("data: ") for event in events[:-1]]


def _typed(chunk: dict, kind: type) -> dict:
    """openai's Completion type has no null finish_reason, which a text completion's stream
    sends (as OpenAI's does) until a choice ends: checked here, then set for validation."""
    if kind is Completion:
        for choice in chunk["choices"]:
            if choice["finish_reason"] is None:
                choice["finish_reason"] = "length"
    return chunk


@pytest.mark.stress
def test_every_answer_validates_against_openai_types(served):
    server, _, _ = served
    body = {"model": "tiny", "prompt": ["Hello", "床前"], "max_tokens": NEW, "n": 2, "seed": 3,
            "logprobs": 0}
    r = _post(server, "/v1/completions", body)
    Completion.model_validate(r.json(), strict=True)
    chat = {"model": "tiny", "messages": CHAT, "max_tokens": NEW, "logprobs": True, "n": 2}
    r = _post(server, "/v1/chat/completions", chat)
    reply = ChatCompletion.model_validate(r.json(), strict=True)
    # tiny's random text opens no think block: all of it is content (None when the sampled
    # tokens carry no text at all, e.g. ids past the tokenizer's vocabulary: it is unseeded)
    for choice in reply.choices:
        assert choice.message.reasoning_content is None
        if any(t.bytes for t in choice.logprobs.content):
            assert choice.message.content
        else:
            assert choice.message.content is None
    for path, kind in (("/v1/completions", Completion),
                       ("/v1/chat/completions", ChatCompletionChunk)):
        stream_body = {**(body if kind is Completion else chat),
                       "stream_options": {"include_usage": True}}
        events = _raw_events(server, path, stream_body)
        assert events[-1] == "[DONE]"
        chunks = [kind.model_validate(_typed(json.loads(e), kind), strict=True)
                  for e in events[:-1]]
        assert chunks[-1].usage is not None and chunks[-1].choices == []


@pytest.mark.stress
def test_a_failing_stream_ends_with_an_error_event_and_done(served, monkeypatch):
    server, _, _ = served
    _settled(server)  # this stream is the only request: every step that fails is its own

    def broken_kernel(batch):
        raise RuntimeError("a kernel failed")

    with monkeypatch.context() as patch:
        patch.setattr(server.llm.runner, "run", broken_kernel)
        events = _raw_events(server, "/v1/completions",
                             {"model": "tiny", "prompt": "Hello", "max_tokens": NEW})
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert set(error) == {"message", "type", "param", "code"} and "a kernel failed" in (
        error["message"])
    _settled(server)


REFUSED = [  # (path, field, value): each a 400 whose param names the field
    *[("/v1/completions", f, v) for f, v in (
        ("suffix", "end"), ("logit_bias", {"50": 5}), ("best_of", 3),
        ("response_format", {"type": "json_object"}), ("guided_json", {"type": "object"}),
        ("use_beam_search", True), ("no_such_field", 1), ("top_k", -2),
        ("min_p", 1.5), ("top_p", 0.0), ("presence_penalty", 3.0), ("min_tokens", -1),
        ("stop_token_ids", [-1]), ("repetition_penalty", 0.0),
        ("stream_options", {"continuous_usage_stats": True}))],
    *[("/v1/chat/completions", f, v) for f, v in (
        ("tools", [{"type": "function", "function": {"name": "f"}}]), ("tool_choice", "auto"),
        ("functions", [{"name": "f"}]), ("function_call", "auto"),
        ("parallel_tool_calls", True), ("response_format", {"type": "json_object"}),
        ("logit_bias", {"50": 5}), ("top_logprobs", 21), ("modalities", ["audio"]),
        ("reasoning_effort", "high"), ("continue_final_message", True), ("echo", True))],
]


@pytest.mark.stress
@pytest.mark.parametrize("path, field, value", REFUSED)
def test_a_field_that_would_change_the_answer_is_refused_by_name(served, path, field, value):
    server, _, _ = served
    body = {"model": "tiny", "max_tokens": 2, field: value}
    body.update({"prompt": "Hi"} if "chat" not in path else {"messages": CHAT})
    if field == "top_logprobs":
        body.update(logprobs=True, stream=True)  # more alternatives than OpenAI's 20
    r = _post(server, path, body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field, r.text


@pytest.mark.stress
def test_harmless_and_neutral_fields_are_accepted(served):
    server, _, exp = served
    body = {"model": "tiny", "prompt": "Hello", "max_tokens": NEW, "temperature": 0,
            "user": "u", "metadata": {"a": "b"}, "store": False, "logit_bias": {},
            "best_of": 1, "echo": False, "suffix": ""}
    r = _post(server, "/v1/completions", body)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == exp["plain"]
    r = _post(server, "/v1/chat/completions", {"model": "tiny", "messages": CHAT, "tools": [],
                                               "tool_choice": "none", "max_tokens": 1})
    assert r.status_code == 200, r.text


@pytest.mark.stress
def test_sampling_fields_are_honoured(served):
    server, client, exp = served
    for name, (fields, text) in exp["honoured"].items():
        body = {"model": "tiny", "prompt": "Hello", "max_tokens": NEW, "temperature": 0,
                **fields}
        r = _post(server, "/v1/completions", body)
        assert r.status_code == 200, (name, r.text)
        assert r.json()["choices"][0]["text"] == text, name


def _metrics(server: Server) -> dict[tuple[str, tuple], float]:
    r = httpx.get(server.url + "/metrics", timeout=60)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            out[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _value(metrics: dict, name: str, **labels: str) -> float:
    return metrics.get((name, tuple(sorted({"model_name": "tiny", **labels}.items()))), 0.0)


@pytest.mark.stress
def test_a_repeated_prompt_reports_its_cached_tokens(served):
    """usage.prompt_tokens_details.cached_tokens (OpenAI's field, read by the openai client),
    streamed and not; /health and /metrics report the prefix cache."""
    server, client, _ = served
    _settled(server)
    before = _metrics(server)
    prompt = "A prompt that no other test sends, long enough to fill a few pages: " * 4
    page = server.llm.config.page_size
    first = client.completions.create(model="tiny", prompt=prompt, max_tokens=3, temperature=0)
    assert first.usage.prompt_tokens > 3 * page
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    again = client.completions.create(model="tiny", prompt=prompt, max_tokens=3, temperature=0)
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert cached == (first.usage.prompt_tokens - 1) // page * page
    assert again.choices[0].text == first.choices[0].text
    chunks = list(client.completions.create(model="tiny", prompt=prompt, max_tokens=3,
                                            stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == cached
    _settled(server)
    health = httpx.get(server.url + "/health").json()
    assert health["cached_pages"] >= cached // page
    assert health["evictable_pages"] == health["cached_pages"], "idle: nobody holds a page"
    assert 0 < health["prefix_cache_hit_rate"] <= 1
    after = _metrics(server)
    assert _value(after, "minimodel:prefix_cache_hits_total") - _value(
        before, "minimodel:prefix_cache_hits_total") == 2 * cached
    assert _value(after, "minimodel:prefix_cache_queries_total") - _value(
        before, "minimodel:prefix_cache_queries_total") == 3 * first.usage.prompt_tokens
    assert _value(after, "minimodel:prefix_cache_pages") == health["cached_pages"]


def test_metrics_move_as_requests_run(served):
    server, client, _ = served
    _settled(server)
    before = _metrics(server)
    r = client.completions.create(model="tiny", prompt=["Hello", "World"], max_tokens=5,
                                  extra_body={"ignore_eos": True})
    stream = client.completions.create(model="tiny", prompt="Hi", max_tokens=2000, stream=True,
                                       extra_body={"ignore_eos": True})
    next(iter(stream))
    during = _metrics(server)
    assert _value(during, "minimodel:num_requests_running") == 1
    assert 0 < _value(during, "minimodel:kv_cache_usage_perc") <= 1
    assert _value(during, "minimodel:kv_cache_used_pages") >= 1
    stream.close()  # the client hangs up: aborted
    _settled(server)
    after = _metrics(server)

    def moved(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert moved("minimodel:prompt_tokens_total") == r.usage.prompt_tokens + 1
    assert moved("minimodel:generation_tokens_total") >= r.usage.completion_tokens + 1
    assert moved("minimodel:request_success_total", finished_reason="length") == 2
    assert moved("minimodel:request_success_total", finished_reason="abort") == 1
    for name in ("time_to_first_token_seconds", "e2e_request_latency_seconds",
                 "time_per_output_token_seconds"):
        assert moved(f"minimodel:{name}_count") == 2, name
    assert _value(after, "minimodel:num_requests_running") == 0
    assert _value(after, "minimodel:kv_cache_free_pages") == _value(
        after, "minimodel:kv_cache_total_pages") == server.llm.allocator.num_pages


@pytest.mark.stress
def test_tokenize_and_detokenize_agree_with_the_tokenizer(served):
    server, client, _ = served
    tok = server.llm.tokenizer
    text = "Hello, 床前明月光 <think>"
    r = _post(server, "/tokenize", {"model": "tiny", "prompt": text}).json()
    assert r["tokens"] == tok.encode(text) and r["count"] == len(r["tokens"])
    assert r["max_model_len"] == server.llm.max_model_len
    assert _post(server, "/detokenize", {"tokens": r["tokens"]}).json() == {"prompt": text}
    for kwargs in ({}, {"chat_template_kwargs": {"enable_thinking": False}}):
        r = _post(server, "/tokenize", {"messages": CHAT, **kwargs}).json()
        thinking = kwargs.get("chat_template_kwargs", {}).get("enable_thinking", True)
        assert r["tokens"] == tok.apply_chat_template(CHAT, add_generation_prompt=True,
                                                      enable_thinking=thinking, tokenize=True)
        reply = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=1,
                                               extra_body=kwargs)
        assert reply.usage.prompt_tokens == r["count"]
    r = _post(server, "/tokenize", {"messages": CHAT, "add_generation_prompt": False}).json()
    assert r["tokens"] == tok.apply_chat_template(CHAT, add_generation_prompt=False,
                                                  tokenize=True)
    bad = _post(server, "/detokenize", {"tokens": [10**9]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    assert _post(server, "/tokenize", {"prompt": "x", "model": "other"}).status_code == 404


@pytest.mark.stress
def test_an_unknown_model_is_a_404_through_the_openai_client(served):
    _, client, _ = served
    with pytest.raises(openai.NotFoundError) as err:
        client.completions.create(model="gpt-4o", prompt="Hi", max_tokens=1)
    assert err.value.status_code == 404 and err.value.body["code"] == "model_not_found"
    assert err.value.body["param"] == "model"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=CHAT, max_tokens=1)


class _Forced:
    """A sampler that draws what it is told: the next id of `ids` for every request."""

    def __init__(self, sampler, ids: list[int]) -> None:
        self.sampler, self.ids = sampler, iter(ids)

    def __getattr__(self, name: str):  # make_generator, ...: the real sampler's
        return getattr(self.sampler, name)

    def __call__(self, *args, **kwargs):
        out = self.sampler(*args, **kwargs)
        out[0].fill_(next(self.ids))
        return out


@pytest.fixture
def forced(served, monkeypatch):
    server = served[0]
    _settled(server)

    def force(text_or_ids) -> int:
        ids = (server.llm.tokenizer.encode(text_or_ids) if isinstance(text_or_ids, str)
               else text_or_ids)
        real = server.llm.runner.sampler
        real = real.sampler if isinstance(real, _Forced) else real
        monkeypatch.setattr(server.llm.runner, "sampler", _Forced(real, ids))
        return len(ids)

    yield force


@pytest.mark.stress
@pytest.mark.parametrize("stream", [False, True])
def test_the_think_block_becomes_reasoning_content(served, forced, stream):
    server, client, _ = served
    kw = dict(model="tiny", messages=CHAT, temperature=0, stream=stream)
    if not stream:
        r = client.chat.completions.create(max_tokens=forced(THOUGHT), **kw)
        message = r.choices[0].message
        assert (message.reasoning_content, message.content) == ("\nLet me see.",
                                                                "\n\nThe answer.")
    else:
        chunks = list(client.chat.completions.create(max_tokens=forced(THOUGHT), **kw))
        deltas = [c.choices[0].delta for c in chunks]
        reasoning = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
        content = "".join(d.content or "" for d in deltas)
        assert (reasoning, content) == ("\nLet me see.", "\n\nThe answer.")
        assert "</think>" not in content and "<think>" not in reasoning
    # thinking off: the whole text is the content
    r = client.chat.completions.create(max_tokens=forced(THOUGHT), model="tiny", messages=CHAT,
                                       extra_body={"chat_template_kwargs":
                                                   {"enable_thinking": False}})
    assert r.choices[0].message.content == THOUGHT
    assert r.choices[0].message.reasoning_content is None


@pytest.mark.stress
def test_chat_logprobs_carry_the_bytes_of_each_token_even_inside_a_character(served, forced):
    server, client, _ = served
    tok = server.llm.tokenizer
    alphabet = bytes_to_unicode()
    pieces = [tok.token_to_id(alphabet[b]) for b in "床".encode()]  # one token per byte
    ids = [*tok.encode("<think>hi"), *pieces]
    r = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=forced(ids),
                                       logprobs=True)
    content = r.choices[0].logprobs.content
    assert [c.bytes for c in content[-3:]] == [[b] for b in "床".encode()]
    assert b"".join(bytes(c.bytes) for c in content) == "<think>hi床".encode()
    assert r.choices[0].message.reasoning_content == "hi床"


def test_the_default_served_name_is_the_repo_id_not_the_snapshot_folder(tmp_path):
    from types import SimpleNamespace

    from minimodel.serve.server import default_model_name

    snapshot = tmp_path / "models--Qwen--Qwen3-0.6B" / "snapshots" / "0123abcd"
    assert default_model_name(SimpleNamespace(folder=snapshot)) == "Qwen/Qwen3-0.6B"
    assert default_model_name(SimpleNamespace(folder=tmp_path / "models" / "bard")) == "bard"


@pytest.mark.stress
def test_top_logprobs_are_the_engines_most_likely_tokens(served):
    server, client, exp = served
    tok, want = server.llm.tokenizer, exp["top"].top_logprobs
    r = client.completions.create(model="tiny", prompt="Hello", max_tokens=NEW, temperature=0,
                                  logprobs=3)
    tops = r.choices[0].logprobs.top_logprobs
    assert len(tops) == NEW and all(len(t) <= 3 for t in tops)
    for got, step in zip(tops, want):
        expected = {tok.decode([i]): lp for i, lp in step[:3]}
        assert got.keys() == expected.keys()
        assert max(abs(got[k] - expected[k]) for k in got) < 1e-5
    r = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=NEW,
                                       temperature=0, logprobs=True, top_logprobs=2)
    ChatCompletion.model_validate(r.model_dump(mode="json"), strict=True)
    for entry in r.choices[0].logprobs.content:
        assert len(entry.top_logprobs) == 2
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob


def _completion_text(server: Server, body: dict) -> tuple[str, str]:
    """(text, finish_reason) of one completion choice, and the streamed text must agree."""
    r = _post(server, "/v1/completions", body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    chunks = [json.loads(e) for e in _raw_events(server, "/v1/completions", body)[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == choice["text"]
    return choice["text"], choice["finish_reason"]


@pytest.mark.stress
def test_no_special_token_text_in_answers_unless_asked(served, forced):
    """The EOS that ends a request is never in the text; special tokens inside it are skipped
    by default in both routes (vLLM's skip_special_tokens), kept when asked."""
    server, client, _ = served
    tok = server.llm.tokenizer
    ids = [*tok.encode("one<|im_start|>two"), tok.token_to_id("<|endoftext|>")]
    body = {"model": "tiny", "prompt": "Hi", "max_tokens": 16}
    forced(ids * 2)  # the non-streamed answer, then the streamed one
    assert _completion_text(server, body) == ("onetwo", "stop")
    forced(ids * 2)
    assert _completion_text(server, {**body, "skip_special_tokens": False}) == (
        "one<|im_start|>two", "stop")
    forced(ids * 2)
    assert _completion_text(server, {**body, "skip_special_tokens": False,
                                     "include_stop_str_in_output": True}) == (
        "one<|im_start|>two<|endoftext|>", "stop")
    chat_ids = [*tok.encode("Hello"), tok.token_to_id("<|im_end|>")]
    for stream in (False, True):
        forced(chat_ids)
        r = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=16,
                                           stream=stream)
        if stream:
            chunks = list(r)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            finish = chunks[-1].choices[0].finish_reason
        else:
            text, finish = r.choices[0].message.content, r.choices[0].finish_reason
        assert (text, finish) == ("Hello", "stop"), stream


@pytest.mark.stress
def test_include_stop_str_in_output_keeps_the_stop_string(served, forced):
    server, _, _ = served
    body = {"model": "tiny", "prompt": "Hi", "max_tokens": 16, "stop": ["cd"]}
    forced("abcdef" * 2)
    assert _completion_text(server, body) == ("ab", "stop")
    forced("abcdef" * 2)
    assert _completion_text(server, {**body, "include_stop_str_in_output": True}) == (
        "abcd", "stop")


@pytest.mark.stress
def test_streamed_top_logprobs_equal_the_answers(served):
    """top-N alternatives in a stream: the same as in the whole answer, token by token."""
    server, client, exp = served
    kw = dict(model="tiny", max_tokens=NEW, temperature=0)
    whole = client.completions.create(prompt="Hello", logprobs=3, **kw).choices[0].logprobs
    chunks = list(client.completions.create(prompt="Hello", logprobs=3, stream=True, **kw))
    streamed = [t for c in chunks for t in (c.choices[0].logprobs.top_logprobs
                                            if c.choices[0].logprobs else [])]
    assert streamed == whole.top_logprobs and len(streamed) == NEW
    tokens = [t for c in chunks for t in (c.choices[0].logprobs.tokens
                                          if c.choices[0].logprobs else [])]
    assert tokens == whole.tokens
    chat = client.chat.completions.create(messages=CHAT, logprobs=True, top_logprobs=4, **kw)
    chat_chunks = list(client.chat.completions.create(messages=CHAT, logprobs=True,
                                                      top_logprobs=4, stream=True, **kw))
    for chunk in chat_chunks:
        ChatCompletionChunk.model_validate(chunk.model_dump(mode="json"), strict=True)
    entries = [e for c in chat_chunks if c.choices and c.choices[0].logprobs
               for e in c.choices[0].logprobs.content]
    assert [e.model_dump() for e in entries] == [
        e.model_dump() for e in chat.choices[0].logprobs.content]
    assert all(len(e.top_logprobs) == 4 for e in entries)
    # each step's alternatives are the engine's own most likely tokens
    tok = server.llm.tokenizer
    for got, step in zip(streamed, exp["top"].top_logprobs):
        assert list(got) == [tok.decode([i]) for i, _ in step[:3]]


@pytest.mark.stress
def test_echo_puts_the_prompt_before_the_completion(served):
    server, client, exp = served
    r = client.completions.create(model="tiny", prompt="Hello", max_tokens=NEW, temperature=0,
                                  echo=True)
    assert r.choices[0].text == "Hello" + exp["plain"]
    ids = server.llm.tokenizer.encode("Hello")
    r = client.completions.create(model="tiny", prompt=ids, max_tokens=NEW, temperature=0,
                                  echo=True)
    assert r.choices[0].text == "Hello" + exp["plain"]
    chunks = list(client.completions.create(model="tiny", prompt="Hello", max_tokens=NEW,
                                            temperature=0, echo=True, stream=True))
    assert chunks[0].choices[0].text == "Hello"
    assert "".join(c.choices[0].text for c in chunks) == "Hello" + exp["plain"]
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="tiny", prompt="Hello", max_tokens=1, echo=True,
                                  logprobs=1)
    assert err.value.body["param"] == "echo"


def test_a_speculative_server_answers_as_the_engine_alone():
    """`serve --speculative-model`: the engine drafts and checks; greedy answers, streamed and
    not, are the engine's answers without speculation, and /metrics counts the drafts."""
    prompts = ["ROMEO.\n", "床前明月光，"]
    sp = mm.SamplingParams(temperature=0, max_tokens=24)
    want = [o.text for o in mm.LLM("bard").generate(prompts, sp)]
    llm = mm.LLM("bard", speculative_model="bard-draft", num_speculative_tokens=3)
    server = Server(llm, model_name="bard").start()
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                           timeout=120)
    try:
        for prompt, text in zip(prompts, want, strict=True):
            got = client.completions.create(model="bard", prompt=prompt, max_tokens=24,
                                            temperature=0)
            assert got.choices[0].text == text
            stream = client.completions.create(model="bard", prompt=prompt, max_tokens=24,
                                               temperature=0, stream=True)
            assert "".join(c.choices[0].text for c in stream if c.choices) == text
        families = {f.name: f for f in text_string_to_metric_families(
            httpx.get(server.url + "/metrics").text)}
        drafts = families["minimodel:spec_decode_num_draft_tokens"].samples[0].value
        accepted = families["minimodel:spec_decode_num_accepted_tokens"].samples[0].value
        assert drafts > 0 and 0 <= accepted <= drafts
    finally:
        client.close()
        server.close()
