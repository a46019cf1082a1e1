"""Chapter 06's checks: every wrong implementation learners write fails, every right one passes."""

from __future__ import annotations

import functools
import re

import pytest
import torch

from minimodel.engine.detokenizer import IncrementalDetokenizer
from minimodel.grading import check


@functools.cache
def result(name, fn):
    """check(name, fn), run once per function: the mutant and hint tests share it."""
    return check(name, fn)


# --- ch06.generate -------------------------------------------------------------------------


def generate_solution(forward_all, tokens, max_new_tokens, eos_id=None):
    out = []
    for _ in range(max_new_tokens):
        token = int(forward_all(tokens)[0, -1].argmax())
        out.append(token)
        tokens = torch.cat([tokens, tokens.new_tensor([[token]])], dim=1)
        if token == eos_id:
            break
    return out


def generate_python_list(forward_all, tokens, max_new_tokens, eos_id=None):
    seq = tokens[0].tolist()
    prompt_len = len(seq)
    while len(seq) - prompt_len < max_new_tokens:
        logits = forward_all(torch.tensor([seq]))  # [1, T, V]
        seq.append(logits[:, -1, :].argmax(dim=-1).item())
        if eos_id is not None and seq[-1] == eos_id:
            break
    return seq[prompt_len:]


@torch.inference_mode()
def generate_buffer(forward_all, tokens, max_new_tokens, eos_id=None):
    T = tokens.shape[1]
    buf = torch.zeros(1, T + max_new_tokens, dtype=torch.long)
    buf[:, :T] = tokens
    n = 0
    while n < max_new_tokens:
        nxt = forward_all(buf[:, : T + n])[0, -1].argmax(-1)
        buf[0, T + n] = nxt
        n += 1
        if eos_id is not None and int(nxt) == eos_id:
            break
    return [int(t) for t in buf[0, T : T + n]]


def generate_topk1(forward_all, tokens, max_new_tokens, eos_id=None):
    new = []
    while len(new) < max_new_tokens and (not new or new[-1] != eos_id):
        last = forward_all(tokens)[:, -1]  # [1, V]
        token = last.topk(1, dim=-1).indices  # [1, 1]
        new.append(token.item())
        tokens = torch.cat((tokens, token), dim=-1)
    return new


CORRECT_GENERATE = [generate_solution, generate_python_list, generate_buffer, generate_topk1]


def generate_eos_not_counted(forward_all, tokens, max_new_tokens, eos_id=None):
    out = []
    for _ in range(max_new_tokens):
        token = int(forward_all(tokens)[0, -1].argmax())
        if token == eos_id:
            break
        out.append(token)
        tokens = torch.cat([tokens, tokens.new_tensor([[token]])], dim=1)
    return out


def generate_one_too_many(forward_all, tokens, max_new_tokens, eos_id=None):
    return generate_solution(forward_all, tokens, max_new_tokens + 1, eos_id)


def generate_one_too_few(forward_all, tokens, max_new_tokens, eos_id=None):
    out = []
    while len(out) < max_new_tokens - 1 or not out:
        token = int(forward_all(tokens)[0, -1].argmax())
        out.append(token)
        tokens = torch.cat([tokens, tokens.new_tensor([[token]])], dim=1)
        if token == eos_id:
            break
    return out


def generate_last_token_only(forward_all, tokens, max_new_tokens, eos_id=None):
    out, step = [], tokens  # "the model already saw the rest" (it did not: there is no cache)
    for _ in range(max_new_tokens):
        token = int(forward_all(step)[0, -1].argmax())
        out.append(token)
        step = tokens.new_tensor([[token]])
        if token == eos_id:
            break
    return out


def generate_argmax_wrong_axis(forward_all, tokens, max_new_tokens, eos_id=None):
    out = []
    for _ in range(max_new_tokens):
        token = int(forward_all(tokens).argmax(dim=1)[0, -1])  # over positions, not the vocab
        out.append(token)
        tokens = torch.cat([tokens, tokens.new_tensor([[token]])], dim=1)
        if token == eos_id:
            break
    return out


def generate_first_position(forward_all, tokens, max_new_tokens, eos_id=None):
    out = []
    for _ in range(max_new_tokens):
        token = int(forward_all(tokens)[0, 0].argmax())
        out.append(token)
        tokens = torch.cat([tokens, tokens.new_tensor([[token]])], dim=1)
        if token == eos_id:
            break
    return out


def generate_returns_prompt(forward_all, tokens, max_new_tokens, eos_id=None):
    return tokens[0].tolist() + generate_solution(forward_all, tokens, max_new_tokens, eos_id)


def generate_eos_anywhere(forward_all, tokens, max_new_tokens, eos_id=None):
    out = []
    for _ in range(max_new_tokens):
        token = int(forward_all(tokens)[0, -1].argmax())
        out.append(token)
        tokens = torch.cat([tokens, tokens.new_tensor([[token]])], dim=1)
        if eos_id in tokens[0].tolist():  # also fires on an EOS in the prompt
            break
    return out


def generate_truthy_eos(forward_all, tokens, max_new_tokens, eos_id=None):
    out = []
    for _ in range(max_new_tokens):
        token = int(forward_all(tokens)[0, -1].argmax())
        out.append(token)
        tokens = torch.cat([tokens, tokens.new_tensor([[token]])], dim=1)
        if eos_id and token == eos_id:  # eos_id=0 never stops
            break
    return out


def generate_extra_call(forward_all, tokens, max_new_tokens, eos_id=None):
    out = []
    while True:
        token = int(forward_all(tokens)[0, -1].argmax())
        if len(out) == max_new_tokens:
            break
        out.append(token)
        tokens = torch.cat([tokens, tokens.new_tensor([[token]])], dim=1)
        if token == eos_id:
            break
    return out


def generate_zero_still_calls(forward_all, tokens, max_new_tokens, eos_id=None):
    logits = forward_all(tokens)  # "prefill" first, then think about the budget
    out = []
    while len(out) < max_new_tokens:
        token = int(logits[0, -1].argmax())
        out.append(token)
        tokens = torch.cat([tokens, tokens.new_tensor([[token]])], dim=1)
        if token == eos_id or len(out) == max_new_tokens:
            break
        logits = forward_all(tokens)
    return out


def generate_tensor_items(forward_all, tokens, max_new_tokens, eos_id=None):
    out = []
    for _ in range(max_new_tokens):
        token = forward_all(tokens)[0, -1].argmax()
        out.append(token)
        tokens = torch.cat([tokens, token.view(1, 1)], dim=1)
        if token == eos_id:
            break
    return out


def generate_never_appends(forward_all, tokens, max_new_tokens, eos_id=None):
    out = []
    for _ in range(max_new_tokens):
        token = int(forward_all(tokens)[0, -1].argmax())
        out.append(token)
        if token == eos_id:
            break
    return out


def generate_samples(forward_all, tokens, max_new_tokens, eos_id=None):
    out = []
    for _ in range(max_new_tokens):
        probs = forward_all(tokens)[0, -1].softmax(-1)
        token = int(torch.multinomial(probs, 1))
        out.append(token)
        tokens = torch.cat([tokens, tokens.new_tensor([[token]])], dim=1)
        if token == eos_id:
            break
    return out


def generate_float_ids(forward_all, tokens, max_new_tokens, eos_id=None):
    out = []
    for _ in range(max_new_tokens):
        token = int(forward_all(tokens)[0, -1].argmax())
        out.append(token)
        tokens = torch.cat([tokens.float(), torch.tensor([[float(token)]])], dim=1)
        if token == eos_id:
            break
    return out


def generate_drops_batch_dim(forward_all, tokens, max_new_tokens, eos_id=None):
    seq, out = tokens[0], []  # [T]: the model wants [1, T]
    for _ in range(max_new_tokens):
        token = int(forward_all(seq)[0, -1].argmax())
        out.append(token)
        seq = torch.cat([seq, seq.new_tensor([token])])
        if token == eos_id:
            break
    return out


WRONG_GENERATE = [
    generate_eos_not_counted, generate_one_too_many, generate_one_too_few,
    generate_last_token_only, generate_argmax_wrong_axis, generate_first_position,
    generate_returns_prompt, generate_eos_anywhere, generate_truthy_eos, generate_extra_call,
    generate_zero_still_calls, generate_tensor_items, generate_never_appends, generate_samples,
    generate_float_ids, generate_drops_batch_dim,
]


@pytest.mark.parametrize("fn", CORRECT_GENERATE, ids=lambda f: f.__name__)
def test_generate_correct_passes(fn):
    result = check("ch06.generate", fn)
    assert result.passed, str(result)


@pytest.mark.parametrize("fn", WRONG_GENERATE, ids=lambda f: f.__name__)
def test_generate_mutant_fails(fn):
    assert not result("ch06.generate", fn).passed


def test_generate_hints():
    assert "belongs to the output" in str(result("ch06.generate", generate_eos_not_counted))
    assert "whole sequence" in str(result("ch06.generate", generate_last_token_only))
    assert "at all" in str(result("ch06.generate", generate_zero_still_calls))


# --- ch06.stream_text ----------------------------------------------------------------------

BROKEN = "\ufffd"


def stream_solution(tokenizer, ids):
    deltas, shown = [], ""
    for i in range(len(ids)):
        text = tokenizer.decode(ids[: i + 1])
        if text.endswith(BROKEN) and i < len(ids) - 1:
            deltas.append("")  # a character is still pending
        else:
            deltas.append(text[len(shown):])
            shown = text
    return deltas


def stream_engine_detokenizer(tokenizer, ids):
    detok = IncrementalDetokenizer(tokenizer)
    deltas = [detok.push(t) for t in ids]
    if deltas:
        deltas[-1] += detok.flush()
    return deltas


def stream_windowed(tokenizer, ids):
    # decode only from the last character boundary: the cost per token stays flat
    deltas, start = [], 0
    for i in range(len(ids)):
        text = tokenizer.decode(ids[start : i + 1])
        if text.endswith(BROKEN) and i < len(ids) - 1:
            deltas.append("")
        else:
            deltas.append(text)
            start = i + 1
    return deltas


def stream_rstrip_then_flush(tokenizer, ids):
    deltas, shown = [], ""
    for i in range(len(ids)):
        text = tokenizer.decode(ids[: i + 1])
        ready = text if i == len(ids) - 1 else text.rstrip(BROKEN)
        deltas.append(ready[len(shown):])
        shown = ready
    return deltas


CORRECT_STREAM = [stream_solution, stream_engine_detokenizer, stream_windowed,
                  stream_rstrip_then_flush]


def stream_each_token_alone(tokenizer, ids):
    return [tokenizer.decode([t]) for t in ids]


def stream_all_at_the_end(tokenizer, ids):
    return [""] * (len(ids) - 1) + [tokenizer.decode(ids)] if ids else []


def stream_one_delta(tokenizer, ids):
    return [tokenizer.decode(ids)]


def stream_naive_diff(tokenizer, ids):
    deltas, prev = [], ""
    for i in range(len(ids)):
        text = tokenizer.decode(ids[: i + 1])
        deltas.append(text[len(prev):])
        prev = text
    return deltas


def stream_tracks_decode_not_output(tokenizer, ids):
    deltas, prev = [], ""
    for i in range(len(ids)):
        text = tokenizer.decode(ids[: i + 1])
        deltas.append("" if text.endswith(BROKEN) else text[len(prev):])
        prev = text  # remembers the broken text too, so the completed character is skipped
    return deltas


def stream_no_flush(tokenizer, ids):
    deltas, shown = [], ""
    for i in range(len(ids)):
        text = tokenizer.decode(ids[: i + 1])
        if text.endswith(BROKEN):
            deltas.append("")
        else:
            deltas.append(text[len(shown):])
            shown = text
    return deltas


def stream_skip_special(tokenizer, ids):
    deltas, shown = [], ""
    for i in range(len(ids)):
        text = tokenizer.decode(ids[: i + 1], skip_special_tokens=True)
        if text.endswith(BROKEN) and i < len(ids) - 1:
            deltas.append("")
        else:
            deltas.append(text[len(shown):])
            shown = text
    return deltas


def stream_per_character(tokenizer, ids):
    return list(tokenizer.decode(ids))


def stream_lags_one_token(tokenizer, ids):
    deltas, shown = [], ""
    for i in range(len(ids)):
        text = tokenizer.decode(ids[:i]) if i < len(ids) - 1 else tokenizer.decode(ids)
        if text.endswith(BROKEN) and i < len(ids) - 1:
            deltas.append("")
        else:
            deltas.append(text[len(shown):])
            shown = text
    return deltas


def stream_drops_broken(tokenizer, ids):
    return [d.replace(BROKEN, "") for d in stream_naive_diff(tokenizer, ids)]


WRONG_STREAM = [
    stream_each_token_alone, stream_all_at_the_end, stream_one_delta, stream_naive_diff,
    stream_tracks_decode_not_output, stream_no_flush, stream_skip_special, stream_per_character,
    stream_lags_one_token, stream_drops_broken,
]


@pytest.mark.parametrize("fn", CORRECT_STREAM, ids=lambda f: f.__name__)
def test_stream_correct_passes(fn):
    result = check("ch06.stream_text", fn)
    assert result.passed, str(result)


@pytest.mark.parametrize("fn", WRONG_STREAM, ids=lambda f: f.__name__)
def test_stream_mutant_fails(fn):
    assert not result("ch06.stream_text", fn).passed


def test_stream_hints():
    assert "Hold those bytes back" in str(result("ch06.stream_text", stream_each_token_alone))
    assert "held back" in str(result("ch06.stream_text", stream_no_flush))


# --- ch06.apply_stop -----------------------------------------------------------------------


def stop_solution(text, stop):
    hits = [text.find(s) for s in stop if s in text]
    return (text[: min(hits)], True) if hits else (text, False)


def stop_regex(text, stop):
    if not stop:
        return text, False
    m = re.search("|".join(re.escape(s) for s in stop), text)
    return (text[: m.start()], True) if m else (text, False)


def stop_scan(text, stop):
    for i in range(len(text)):
        if any(text.startswith(s, i) for s in stop):
            return text[:i], True
    return text, False


CORRECT_STOP = [stop_solution, stop_regex, stop_scan]


def stop_included(text, stop):
    hits = [(text.find(s), s) for s in stop if s in text]
    if not hits:
        return text, False
    i, s = min(hits)
    return text[: i + len(s)], True


def stop_list_order(text, stop):
    for s in stop:
        if s in text:
            return text[: text.find(s)], True
    return text, False


def stop_endswith(text, stop):
    for s in stop:
        if text.endswith(s):
            return text[: -len(s)], True
    return text, False


def stop_last_occurrence(text, stop):
    hits = [text.rfind(s) for s in stop if s in text]
    return (text[: min(hits)], True) if hits else (text, False)


def stop_first_only(text, stop):
    if stop and stop[0] in text:
        return text.split(stop[0])[0], True
    return text, False


def stop_not_cut(text, stop):
    return text, any(s in text for s in stop)


def stop_strips(text, stop):
    cut, found = stop_solution(text, stop)
    return cut.rstrip(), found


def stop_index_raises(text, stop):
    hits = [text.index(s) for s in stop]
    return (text[: min(hits)], True) if hits else (text, False)


def stop_none_flag(text, stop):
    cut, found = stop_solution(text, stop)
    return cut, (True if found else None)


def stop_regex_unescaped(text, stop):  # "." matches any character
    m = re.search("|".join(stop), text) if stop else None
    return (text[: m.start()], True) if m else (text, False)


WRONG_STOP = [
    stop_regex_unescaped, stop_included, stop_list_order, stop_endswith, stop_last_occurrence,
    stop_first_only, stop_not_cut, stop_strips, stop_index_raises, stop_none_flag,
]


@pytest.mark.parametrize("fn", CORRECT_STOP, ids=lambda f: f.__name__)
def test_stop_correct_passes(fn):
    result = check("ch06.apply_stop", fn)
    assert result.passed, str(result)


@pytest.mark.parametrize("fn", WRONG_STOP, ids=lambda f: f.__name__)
def test_stop_mutant_fails(fn):
    assert not result("ch06.apply_stop", fn).passed


def test_stop_hints():
    assert "not part of the output" in str(result("ch06.apply_stop", stop_included))
    assert "search the whole text" in str(result("ch06.apply_stop", stop_endswith))
