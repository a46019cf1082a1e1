"""vLLM's offline API on the engine: LLM.chat, RequestOutput.outputs, stop_reason."""

from __future__ import annotations

import pytest

import minimodel as mm
from minimodel.engine import CompletionOutput, Logprob


@pytest.fixture(scope="module")
def llm():
    return mm.LLM("tiny", num_pages=256)


def greedy(**kw):
    return mm.SamplingParams(temperature=0.0, max_tokens=kw.pop("max_tokens", 12), **kw)


CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "床前明月光"}]


def test_chat_renders_the_template_and_generates(llm):
    want = llm.tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True)
    (out,) = llm.chat(CHAT, greedy())
    assert out.prompt_token_ids == want
    assert out.token_ids == llm.generate([want], greedy())[0].token_ids


def test_chat_takes_several_conversations_and_template_kwargs(llm):
    other = [{"role": "user", "content": "Hello"}]
    outs = llm.chat([CHAT, other], greedy(), chat_template_kwargs={"enable_thinking": False})
    assert [o.prompt_token_ids for o in outs] == [
        llm.tokenizer.apply_chat_template(c, tokenize=True, enable_thinking=False)
        for c in (CHAT, other)]
    assert outs[0].prompt_token_ids != llm.chat(CHAT, greedy())[0].prompt_token_ids


@pytest.mark.parametrize("bad", [[], "hello", [["not a dict"]], [{"role": "user"}, "x"]])
def test_chat_refuses_what_is_not_a_conversation(llm, bad):
    with pytest.raises(ValueError, match="messages must be a conversation"):
        llm.chat(bad, greedy())


def test_chat_template_kwargs_may_not_set_what_chat_sets(llm):
    with pytest.raises(ValueError, match="may not set 'tokenize'"):
        llm.chat(CHAT, greedy(), chat_template_kwargs={"tokenize": False})


def test_outputs_hold_the_completion_in_vllms_shape(llm):
    out = llm.generate("ROMEO.\n", greedy(logprobs=2))[0]
    assert out.finished
    (c,) = out.outputs
    assert isinstance(c, CompletionOutput) and c.index == 0
    assert (c.text, c.token_ids, c.finish_reason) == (out.text, out.token_ids, out.finish_reason)
    assert c.cumulative_logprob == pytest.approx(sum(out.logprobs))
    for tok, lp, alts, entry in zip(out.token_ids, out.logprobs, out.top_logprobs, c.logprobs):
        assert entry[tok].logprob == lp  # the chosen token is always there
        assert all(isinstance(v, Logprob) for v in entry.values())
        ranked = sorted((v.rank, t) for t, v in entry.items() if v.rank is not None)
        assert [t for _, t in ranked] == [t for t, _ in alts]
    plain = llm.generate("ROMEO.\n", greedy())[0].outputs[0]
    assert plain.logprobs is None and plain.cumulative_logprob is None


def test_stop_reason_names_the_stop_string_or_token(llm):
    free = llm.generate("ROMEO.\n", greedy(max_tokens=16))[0]
    assert free.finish_reason == "length" and free.stop_reason is None
    # a stop string that the free run's text holds, after its first character
    stop = free.text[3:6]
    assert len(stop) == 3
    out = llm.generate("ROMEO.\n", greedy(max_tokens=16, stop=["never-in-text", stop]))[0]
    assert (out.finish_reason, out.stop_reason) == ("stop", stop)
    assert out.outputs[0].stop_reason == stop
    # a stop token: the first generated id ends the request at once
    tok = free.token_ids[0]
    out = llm.generate("ROMEO.\n", greedy(max_tokens=16, stop_token_ids=[tok]))[0]
    assert (out.finish_reason, out.stop_reason) == ("stop", tok)
    assert out.token_ids == [tok] and out.text == ""
