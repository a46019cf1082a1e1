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
