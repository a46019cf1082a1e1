"""Text in and out of the engine: prompts as strings, streaming, stop strings (on "tiny",
which has the real Qwen3 tokenizer)."""

from __future__ import annotations

import pytest

import minimodel as mm
from minimodel.engine import LLM
from minimodel.engine.detokenizer import IncrementalDetokenizer


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM("tiny", device="cpu", num_pages=256)


@pytest.fixture(scope="module")
def tok(llm: LLM) -> mm.Tokenizer:
    return llm.tokenizer


def byte_tokens(tok: mm.Tokenizer, text: str) -> list[int]:
    """The ids of the single-byte tokens that spell text's UTF-8 bytes (one token per byte),
    so every multi-byte character is split across tokens."""
    # GPT-2's byte-level alphabet: printable bytes stand for themselves, others are shifted.
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    char_of = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in char_of:
            char_of[b] = chr(256 + shift)
            shift += 1
    return [tok.token_to_id(char_of[b]) for b in text.encode("utf-8")]


def test_detokenizer_never_splits_a_character(tok):
    text = "a€😀世界!"
    ids = byte_tokens(tok, text)
    assert len(ids) == len(text.encode("utf-8")) and tok.decode(ids) == text
    detok = IncrementalDetokenizer(tok)
    deltas = [detok.push(i) for i in ids]
    assert "".join(deltas) + detok.flush() == text
    assert all("\ufffd" not in d for d in deltas)
    assert [d for d in deltas if d] == ["a", "€", "😀", "世", "界", "!"]


def test_detokenizer_flushes_an_incomplete_tail(tok):
    ids = byte_tokens(tok, "ok😀")[:-1]  # the emoji's last byte never comes
    detok = IncrementalDetokenizer(tok)
    assert "".join(detok.push(i) for i in ids) == "ok"
    assert detok.flush() == tok.decode(ids)[2:] and detok.text == tok.decode(ids)


def test_text_prompt_equals_its_token_ids(llm, tok):
    sp = mm.SamplingParams(temperature=0.0, max_new_tokens=12)
    by_text = llm.generate(["The capital of France is"], sp)[0]
    by_ids = llm.generate([tok.encode("The capital of France is")], sp)[0]
    assert by_text.token_ids == by_ids.token_ids
    assert by_text.text == tok.decode(by_text.token_ids)


def test_stream_pieces_add_up_to_the_text(llm):
    sp = mm.SamplingParams(temperature=0.7, seed=3, max_new_tokens=40)
    pieces = list(llm.stream("Once upon a time", sp))
    out = llm.generate(["Once upon a time"], sp)[0]
    assert len(pieces) > 1 and "".join(pieces) == out.text
    assert all(p and "\ufffd" not in p[-1:] for p in pieces[:-1])


def test_stop_string_cuts_the_text(llm):
    sp = mm.SamplingParams(temperature=0.0, max_new_tokens=40)
    free = llm.generate(["Hello world"], sp)[0]
    assert len(free.text) > 12
    stop = free.text[6:9]
    start = free.text.find(stop)
    stopped = llm.generate(["Hello world"], mm.SamplingParams(temperature=0.0, max_new_tokens=40,
                                                             stop=[stop, "never-there"]))[0]
    assert stopped.finish_reason == "stop"
    assert stopped.text == free.text[:start]
    assert stopped.token_ids == free.token_ids[: len(stopped.token_ids)]
    assert len(stopped.token_ids) < len(free.token_ids)
    streamed = "".join(llm.stream("Hello world", mm.SamplingParams(
        temperature=0.0, max_new_tokens=40, stop=[stop])))
    assert streamed == stopped.text


# --- the text as vLLM makes it: special tokens skipped, what ended the request left out ------
# bard (the course's trained model) ends its poems with EOS (<|endoftext|>, a special token).

POEM = "床前明月光，"


@pytest.fixture(scope="module")
def bard() -> LLM:
    return LLM("bard", device="cpu", num_pages=256)


def greedy(max_tokens: int = 64, **kw) -> mm.SamplingParams:
    return mm.SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw)


def test_the_eos_that_ended_a_request_is_not_in_its_text(bard):
    tok = bard.tokenizer
    out = bard.generate(POEM, greedy())[0]
    assert out.finish_reason == "stop" and out.stop_reason is None
    assert out.token_ids[-1] in tok.eos_token_ids  # kept in the ids, as vLLM keeps it
    assert out.text == tok.decode(out.token_ids[:-1]) and "<|" not in out.text
    assert out.outputs[0].text == out.text
    # the same text through every path: streamed, and with a detokenizer (a stop string)
    assert "".join(bard.stream(POEM, greedy())) == out.text
    assert bard.generate(POEM, greedy(stop=["never there"]))[0].text == out.text


def test_include_stop_str_in_output_keeps_the_eos_text_when_special_tokens_are_kept(bard):
    tok = bard.tokenizer
    ids = bard.generate(POEM, greedy())[0].token_ids
    for params, want in [
        (greedy(skip_special_tokens=False), tok.decode(ids[:-1])),
        (greedy(include_stop_str_in_output=True), tok.decode(ids[:-1])),  # skipped: special
        (greedy(skip_special_tokens=False, include_stop_str_in_output=True), tok.decode(ids)),
    ]:
        out = bard.generate(POEM, params)[0]
        assert out.token_ids == ids and out.text == want, params
        assert "".join(bard.stream(POEM, params)) == want, params
    assert want.endswith("<|endoftext|>")


def test_special_tokens_inside_the_text_are_skipped_unless_asked(bard):
    tok = bard.tokenizer
    # ignore_eos: the model's EOS comes early, then generation goes on past it
    params = greedy(24, ignore_eos=True)
    out = bard.generate(POEM, params)[0]  # the rest of the poem, then EOS
    inside = [t for t in out.token_ids[:-1] if t in tok.eos_token_ids]
    assert inside, "bard ends the poem with EOS within 24 tokens"
    assert out.finish_reason == "length"
    assert out.text == tok.decode(out.token_ids, skip_special_tokens=True)
    assert "<|endoftext|>" not in out.text
    kept = bard.generate(POEM, greedy(24, ignore_eos=True, skip_special_tokens=False))[0]
    assert kept.text == tok.decode(out.token_ids) and "<|endoftext|>" in kept.text
    assert "".join(bard.stream(POEM, params)) == out.text


def test_include_stop_str_in_output_keeps_the_stop_string(llm):
    free = llm.generate(["Hello world"], greedy(40))[0]
    stop = free.text[6:9]
    start = free.text.find(stop)
    params = greedy(40, stop=[stop], include_stop_str_in_output=True)
    kept = llm.generate(["Hello world"], params)[0]
    assert kept.finish_reason == "stop" and kept.stop_reason == stop
    assert kept.text == free.text[: start + len(stop)]
    assert "".join(llm.stream("Hello world", params)) == kept.text


def test_a_stop_token_is_left_out_of_the_text_unless_asked(llm, tok):
    free = llm.generate(["Hello world"], greedy(12))[0]
    stop_id = free.token_ids[4]
    k = free.token_ids.index(stop_id)  # its first place
    for include, n in ((False, k), (True, k + 1)):
        params = greedy(12, stop_token_ids=[stop_id], include_stop_str_in_output=include)
        out = llm.generate(["Hello world"], params)[0]
        assert out.token_ids == free.token_ids[: k + 1] and out.stop_reason == stop_id
        assert out.text == tok.decode(free.token_ids[:n])
        assert "".join(llm.stream("Hello world", params)) == out.text


def test_the_detokenizer_skips_special_tokens_when_asked(tok):
    ids = tok.encode("<|im_start|>assistant\n你好<|im_end|>\n<think>\nx</think>")
    for skip in (False, True):
        detok = IncrementalDetokenizer(tok, skip_special_tokens=skip)
        text = "".join(detok.push(i) for i in ids) + detok.flush()
        assert text == tok.decode(ids, skip_special_tokens=skip)
    assert "<|im_end|>" not in text and "<think>" in text  # <think> is not a special token
