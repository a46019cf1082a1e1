"""Chapter 06's checks: every wrong implementation learners write fails, every right one passes."""

from __future__ import annotations

import dataclasses
import functools
import re
import types
from pathlib import Path

import pytest
import torch

import minimodel as mm
from minimodel.engine.detokenizer import IncrementalDetokenizer
from minimodel.grading import check
from minimodel.grading.learner import learner_module

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"


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


# --- ch06.visible_text --------------------------------------------------------------------


def visible_solution(text, stop, final=False):
    starts = [i for i in (text.find(s) for s in stop) if i >= 0]
    if starts:
        return text[: min(starts)], True
    if final:
        return text, False
    for i in range(len(text)):
        if any(s.startswith(text[i:]) for s in stop):
            return text[:i], False
    return text, False


def visible_regex(text, stop, final=False):
    m = re.search("|".join(re.escape(s) for s in stop), text) if stop else None
    if m:
        return text[: m.start()], True
    hold = 0
    if not final:
        hold = max((k for s in stop for k in range(1, len(s)) if text.endswith(s[:k])),
                   default=0)
    return text[: len(text) - hold], False


def visible_scan(text, stop, final=False):
    for i in range(len(text)):
        if any(text.startswith(s, i) for s in stop):
            return text[:i], True
    if final:
        return text, False
    cut = len(text)
    for s in stop:  # each stop string's longest proper prefix that ends the text
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text[-k:] == s[:k]:
                cut = min(cut, len(text) - k)
                break
    return text[:cut], False


CORRECT_VISIBLE = [visible_solution, visible_regex, visible_scan]


def visible_package_rule(text, stop, final=False):  # holds len(stop) - 1 characters always
    cut, found = visible_solution(text, stop, final=True)
    if found or final:
        return cut, found
    hold = max((len(s) for s in stop), default=1) - 1
    return text[: max(0, len(text) - hold)], False


def visible_never_holds(text, stop, final=False):  # the plain cut: shows a stop string's start
    return visible_solution(text, stop, final=True)


def visible_last_char_only(text, stop, final=False):
    cut, found = visible_solution(text, stop, final=True)
    if found or final:
        return cut, found
    if text and any(s.startswith(text[-1]) for s in stop):
        return text[:-1], False
    return text, False


def visible_shortest_hold(text, stop, final=False):  # holds the shortest possible end
    cut, found = visible_solution(text, stop, final=True)
    if found or final:
        return cut, found
    for i in range(len(text) - 1, -1, -1):
        if any(s.startswith(text[i:]) for s in stop):
            return text[:i], False
    return text, False


def visible_ignores_final(text, stop, final=False):
    return visible_solution(text, stop, False)


def visible_final_skips_stop(text, stop, final=False):
    return (text, False) if final else visible_solution(text, stop)


def visible_includes_stop(text, stop, final=False):
    hits = [(text.find(s), s) for s in stop if s in text]
    if hits:
        i, s = min(hits)
        return text[: i + len(s)], True
    return visible_solution(text, stop, final)


def visible_list_order(text, stop, final=False):
    for s in stop:
        if s in text:
            return text[: text.find(s)], True
    return visible_solution(text, stop, final)


def visible_endswith(text, stop, final=False):
    for s in stop:
        if text.endswith(s):
            return text[: -len(s)], True
    return visible_solution(text, [s for s in stop if s not in text], final)


def visible_first_stop_only(text, stop, final=False):
    return visible_solution(text, stop[:1], final)


def visible_suffix_not_prefix(text, stop, final=False):  # holds what could END a stop string
    cut, found = visible_solution(text, stop, final=True)
    if found or final:
        return cut, found
    for i in range(len(text)):
        if any(s.endswith(text[i:]) for s in stop):
            return text[:i], False
    return text, False


def visible_returns_held(text, stop, final=False):  # returns the held part, not the shown one
    cut, found = visible_solution(text, stop, final)
    return (cut, found) if found else (text[len(cut):], False)


def visible_strips(text, stop, final=False):
    cut, found = visible_solution(text, stop, final)
    return cut.rstrip(), found


WRONG_VISIBLE = [
    visible_package_rule, visible_never_holds, visible_last_char_only, visible_shortest_hold,
    visible_ignores_final, visible_final_skips_stop, visible_includes_stop, visible_list_order,
    visible_endswith, visible_first_stop_only, visible_suffix_not_prefix, visible_returns_held,
    visible_strips,
]


@pytest.mark.parametrize("fn", CORRECT_VISIBLE, ids=lambda f: f.__name__)
def test_visible_correct_passes(fn):
    result = check("ch06.visible_text", fn)
    assert result.passed, str(result)


@pytest.mark.parametrize("fn", WRONG_VISIBLE, ids=lambda f: f.__name__)
def test_visible_mutant_fails(fn):
    assert not result("ch06.visible_text", fn).passed


def test_visible_hints():
    assert "not part of the output" in str(result("ch06.visible_text", visible_includes_stop))
    assert "must not show it yet" in str(result("ch06.visible_text", visible_never_holds))
    assert "reach the reader now" in str(result("ch06.visible_text", visible_package_rule))
    assert "nothing can complete" in str(result("ch06.visible_text", visible_ignores_final))


# --- ch06.my_writer: the capstone ----------------------------------------------------------
#
# The solution's my_writer runs on the solutions' own ch04 (my_qwen3_forward) and ch05 (sample).
# Variants swap one piece: the names a my_writer looks up (generate, ch04, ch05) are rebound.


@functools.cache
def solution(name: str) -> types.ModuleType:
    return learner_module(name, SOLUTIONS)


def rebind(fn, name: str | None = None, **names):
    """`fn` with some of its global names bound to other objects (and renamed to `name`)."""
    scope = {**fn.__globals__, **names}
    return types.FunctionType(fn.__code__, scope, name or fn.__name__, fn.__defaults__,
                              fn.__closure__)


def as_learner_module(label: str, **functions) -> types.ModuleType:
    """A module that spy_calls treats as a learner's notebook, holding `functions` by name."""
    module = types.ModuleType(f"learner_{label}")
    for key, f in functions.items():
        setattr(module, key, rebind(f, name=key))
    return module


def writer(**names):
    """The solution's my_writer with some of its pieces swapped."""
    return rebind(solution("ch06").my_writer, **names)


def qwen3_forward(weights, cfg, ids, attention_mask=None, causal=True):
    """Another Qwen3 forward, written without the course's pieces: ids [B, T] -> [B, T, V]."""
    B, T = ids.shape
    H, Hkv, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim

    def norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps) * w

    real = torch.ones(B, T, dtype=torch.bool) if attention_mask is None else attention_mask
    pos = (real.long().cumsum(-1) - 1).clamp(min=0).float()  # [B, T]
    angle = pos[..., None] / cfg.rope_theta ** (torch.arange(0, D, 2).float() / D)
    cos, sin = angle.cos().repeat(1, 1, 2)[:, None], angle.sin().repeat(1, 1, 2)[:, None]

    def rope(x):  # [B, H, T, D]
        return x * cos + torch.cat([-x[..., D // 2:], x[..., : D // 2]], -1) * sin

    allowed = real[:, None, None, :] & (torch.ones(T, T).tril().bool() if causal else True)
    x = weights["model.embed_tokens.weight"][ids]
    for i in range(cfg.num_hidden_layers):
        w = {k.removeprefix(f"model.layers.{i}."): v for k, v in weights.items()
             if k.startswith(f"model.layers.{i}.")}
        h = norm(x, w["input_layernorm.weight"])
        q = (h @ w["self_attn.q_proj.weight"].T).view(B, T, H, D).transpose(1, 2)
        k = (h @ w["self_attn.k_proj.weight"].T).view(B, T, Hkv, D).transpose(1, 2)
        v = (h @ w["self_attn.v_proj.weight"].T).view(B, T, Hkv, D).transpose(1, 2)
        q = rope(norm(q, w["self_attn.q_norm.weight"]))
        k = rope(norm(k, w["self_attn.k_norm.weight"])).repeat_interleave(H // Hkv, 1)
        v = v.repeat_interleave(H // Hkv, 1)
        scores = (q @ k.transpose(-1, -2) / D**0.5).masked_fill(~allowed, float("-inf"))
        a = (scores.softmax(-1).nan_to_num(0.0) @ v).transpose(1, 2).reshape(B, T, H * D)
        x = x + a @ w["self_attn.o_proj.weight"].T
        h = norm(x, w["post_attention_layernorm.weight"])
        gate = torch.nn.functional.silu(h @ w["mlp.gate_proj.weight"].T)
        x = x + (gate * (h @ w["mlp.up_proj.weight"].T)) @ w["mlp.down_proj.weight"].T
    head = weights.get("lm_head.weight", weights["model.embed_tokens.weight"])
    return norm(x, weights["model.norm.weight"]) @ head.T


def forward_causal(weights, cfg, ids, attention_mask=None):
    return qwen3_forward(weights, cfg, ids, attention_mask)


def forward_no_mask(weights, cfg, ids, attention_mask=None):  # attends to later tokens too
    return qwen3_forward(weights, cfg, ids, attention_mask, causal=False)


def forward_wrong_theta(weights, cfg, ids, attention_mask=None):  # most pairs never rotate
    cfg = dataclasses.replace(cfg, rope_theta=1e30)
    return qwen3_forward(weights, cfg, ids, attention_mask)


def writer_own_style(weights, cfg, ids, max_new_tokens, eos_id=None, temperature=0.0, top_k=0,
                     top_p=1.0, generator=None):
    """Written differently: a forward_all object, the drawn token marked with +inf."""

    class ForwardAll:
        def __call__(self, tokens):
            logits = ch04.my_qwen3_forward(weights, cfg, tokens).clone()  # noqa: F821
            if temperature > 0:
                token = int(ch05.sample(logits[:, -1], temperature, top_k, top_p,  # noqa: F821
                                        generator)[0])
                logits[0, -1, token] = float("inf")
            return logits

    return generate(ForwardAll(), ids, max_new_tokens, eos_id=eos_id)  # noqa: F821


def generate_drops_last(forward_all, tokens, max_new_tokens, eos_id=None):
    return solution("ch06").generate(forward_all, tokens, max_new_tokens, eos_id)[:-1]


def generate_last_token_only(forward_all, tokens, max_new_tokens, eos_id=None):
    out, step = [], tokens
    for _ in range(max_new_tokens):
        token = int(forward_all(step)[0, -1].argmax())
        out.append(token)
        step = tokens.new_tensor([[token]])
        if token == eos_id:
            break
    return out


@functools.cache
def package_model():
    return mm.reference.Qwen3ForCausalLM.from_pretrained(mm.resolve_model("bard"))


def writer_package_model(weights, cfg, ids, max_new_tokens, eos_id=None, temperature=0.0,
                         top_k=0, top_p=1.0, generator=None):
    return generate(package_model(), ids, max_new_tokens, eos_id)  # noqa: F821


def writer_own_loop(weights, cfg, ids, max_new_tokens, eos_id=None, temperature=0.0, top_k=0,
                    top_p=1.0, generator=None):
    out = []
    for _ in range(max_new_tokens):
        token = int(ch04.my_qwen3_forward(weights, cfg, ids)[0, -1].argmax())  # noqa: F821
        out.append(token)
        ids = torch.cat([ids, ids.new_tensor([[token]])], dim=1)
        if token == eos_id:
            break
    return out


def writer_always_greedy(weights, cfg, ids, max_new_tokens, eos_id=None, temperature=0.0,
                         top_k=0, top_p=1.0, generator=None):
    return generate(lambda t: ch04.my_qwen3_forward(weights, cfg, t),  # noqa: F821
                    ids, max_new_tokens, eos_id)


def writer_package_sampler(weights, cfg, ids, max_new_tokens, eos_id=None, temperature=0.0,
                           top_k=0, top_p=1.0, generator=None):
    params = mm.SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    sampler = mm.sampling.Sampler()

    def forward_all(tokens):
        logits = ch04.my_qwen3_forward(weights, cfg, tokens).clone()  # noqa: F821
        if temperature > 0:
            token = int(sampler(logits[:, -1], [params], [generator])[0][0])
            logits[0, -1, token] = float("inf")
        return logits

    return generate(forward_all, ids, max_new_tokens, eos_id)  # noqa: F821


def writer_ignores_eos(weights, cfg, ids, max_new_tokens, eos_id=None, **sampling):
    return solution("ch06").my_writer(weights, cfg, ids, max_new_tokens, None, **sampling)


def sampler_without_generator(logits, temperature, top_k, top_p, generator):
    return solution("ch05").sample(logits, temperature, top_k, top_p, None)


def sampler_without_top_k(logits, temperature, top_k, top_p, generator):
    return solution("ch05").sample(logits, temperature, 0, top_p, generator)


def writer_draw_in_wrong_row(weights, cfg, ids, max_new_tokens, eos_id=None, temperature=0.0,
                             top_k=0, top_p=1.0, generator=None):
    def forward_all(tokens):  # marks the drawn token at the first position: generate reads
        logits = ch04.my_qwen3_forward(weights, cfg, tokens).clone()  # noqa: F821
        if temperature > 0:
            token = int(ch05.sample(logits[:, -1], temperature, top_k, top_p,  # noqa: F821
                                    generator)[0])
            logits[0, 0, token] = float("inf")
        return logits

    return generate(forward_all, ids, max_new_tokens, eos_id)  # noqa: F821


def generate_with_pick(forward_all, tokens, max_new_tokens, eos_id=None, pick=None):
    """The loop of exercise 1 with one more optional parameter: who picks from the last row."""
    new = []
    for _ in range(max_new_tokens):
        last = forward_all(tokens)[0, -1]  # [V]
        token = int(last.argmax()) if pick is None else int(pick(last))
        new.append(token)
        if token == eos_id:
            break
        tokens = torch.cat([tokens, tokens.new_tensor([[token]])], dim=1)
    return new


def writer_with_pick(weights, cfg, ids, max_new_tokens, eos_id=None, temperature=0.0, top_k=0,
                     top_p=1.0, generator=None):
    """Another design: generate grows a `pick` parameter, and the sampler is handed to it."""
    def pick(row):
        return ch05.sample(row[None], temperature, top_k, top_p, generator)[0]  # noqa: F821

    return generate(lambda t: ch04.my_qwen3_forward(weights, cfg, t), ids,  # noqa: F821
                    max_new_tokens, eos_id, pick=pick if temperature > 0 else None)


def writer_one_hot_row(weights, cfg, ids, max_new_tokens, eos_id=None, temperature=0.0, top_k=0,
                       top_p=1.0, generator=None):
    """Another design: forward_all returns a single row, one-hot on the drawn token."""
    def forward_all(tokens):
        logits = ch04.my_qwen3_forward(weights, cfg, tokens)  # noqa: F821
        if temperature == 0:
            return logits
        token = ch05.sample(logits[:, -1], temperature, top_k, top_p, generator)  # noqa: F821
        return torch.nn.functional.one_hot(token, logits.shape[-1]).float()[None]  # [1, 1, V]

    return generate(forward_all, ids, max_new_tokens, eos_id)  # noqa: F821


def writer_small_bonus(weights, cfg, ids, max_new_tokens, eos_id=None, temperature=0.0, top_k=0,
                       top_p=1.0, generator=None):
    """Adds 1 to the drawn token's logit: the greedy token still wins most steps."""
    def forward_all(tokens):
        logits = ch04.my_qwen3_forward(weights, cfg, tokens).clone()  # noqa: F821
        if temperature > 0:
            token = int(ch05.sample(logits[:, -1], temperature, top_k, top_p,  # noqa: F821
                                    generator)[0])
            logits[0, -1, token] += 1.0
        return logits

    return generate(forward_all, ids, max_new_tokens, eos_id)  # noqa: F821


def writer_second_loop_to_sample(weights, cfg, ids, max_new_tokens, eos_id=None, temperature=0.0,
                                 top_k=0, top_p=1.0, generator=None):
    """generate for greedy text, a loop of its own for sampled text."""
    if temperature == 0:
        return generate(lambda t: ch04.my_qwen3_forward(weights, cfg, t), ids,  # noqa: F821
                        max_new_tokens, eos_id)
    out = []
    for _ in range(max_new_tokens):
        logits = ch04.my_qwen3_forward(weights, cfg, ids)[:, -1]  # noqa: F821
        token = int(ch05.sample(logits, temperature, top_k, top_p, generator)[0])  # noqa: F821
        out.append(token)
        ids = torch.cat([ids, ids.new_tensor([[token]])], dim=1)
        if token == eos_id:
            break
    return out


def correct_writers():
    ch06 = solution("ch06")
    ch04_other = as_learner_module("ch04_other", my_qwen3_forward=forward_causal)
    pieces = dict(generate=ch06.generate, ch04=solution("ch04"), ch05=solution("ch05"))
    with_pick = {**pieces, "generate": rebind(generate_with_pick, name="generate")}
    return {
        "solution": ch06.my_writer,
        "another_model": writer(ch04=ch04_other),
        "own_style": rebind(writer_own_style, **pieces),
        "generate_with_a_pick_parameter": rebind(writer_with_pick, **with_pick),
        "one_hot_row": rebind(writer_one_hot_row, **pieces),
    }


def wrong_writers():
    ch06 = solution("ch06")
    pieces = dict(generate=ch06.generate, ch04=solution("ch04"), ch05=solution("ch05"))
    generate_as = {f.__name__: rebind(f, name="generate")
                   for f in (generate_drops_last, generate_last_token_only)}
    ch05_with = {f.__name__: as_learner_module(f.__name__, sample=f)
                 for f in (sampler_without_generator, sampler_without_top_k)}
    return {
        "loop_drops_last_token": writer(generate=generate_as["generate_drops_last"]),
        "loop_shows_last_token_only": writer(generate=generate_as["generate_last_token_only"]),
        "model_without_causal_mask": writer(ch04=as_learner_module(
            "ch04_no_mask", my_qwen3_forward=forward_no_mask)),
        "model_wrong_rope_base": writer(ch04=as_learner_module(
            "ch04_wrong_theta", my_qwen3_forward=forward_wrong_theta)),
        "package_model": rebind(writer_package_model, **pieces),
        "own_loop_not_generate": rebind(writer_own_loop, **pieces),
        "sampling_ignored": rebind(writer_always_greedy, **pieces),
        "package_sampler": rebind(writer_package_sampler, **pieces),
        "eos_not_passed": rebind(writer_ignores_eos, **pieces),
        "sampler_without_generator": writer(ch05=ch05_with["sampler_without_generator"]),
        "sampler_without_top_k": writer(ch05=ch05_with["sampler_without_top_k"]),
        "drawn_token_in_wrong_row": rebind(writer_draw_in_wrong_row, **pieces),
        "drawn_token_boosted_too_little": rebind(writer_small_bonus, **pieces),
        "second_loop_to_sample": rebind(writer_second_loop_to_sample, **pieces),
    }


@pytest.mark.parametrize("name", ["solution", "another_model", "own_style",
                                  "generate_with_a_pick_parameter", "one_hot_row"])
def test_writer_correct_passes(name):
    outcome = check("ch06.my_writer", correct_writers()[name])
    assert outcome.passed, str(outcome)


WRONG_WRITERS = ["loop_drops_last_token", "loop_shows_last_token_only",
                 "model_without_causal_mask", "model_wrong_rope_base", "package_model",
                 "own_loop_not_generate", "sampling_ignored", "package_sampler", "eos_not_passed",
                 "sampler_without_generator", "sampler_without_top_k", "drawn_token_in_wrong_row",
                 "drawn_token_boosted_too_little", "second_loop_to_sample"]


@functools.cache
def writer_result(name):
    return check("ch06.my_writer", wrong_writers()[name])


@pytest.mark.parametrize("name", WRONG_WRITERS)
def test_writer_mutant_fails(name):
    assert not writer_result(name).passed, str(writer_result(name))


def causal_mask_sees_the_future(T):
    return torch.ones(T, T, dtype=torch.bool)


def rope_qkv_forgotten(q, k, v, positions, theta):
    return q, k, v


@pytest.mark.parametrize("chapter, piece, broken", [
    ("ch03", "causal_mask", causal_mask_sees_the_future),
    ("ch02", "rope_qkv", rope_qkv_forgotten),
], ids=["ch03.causal_mask", "ch02.rope_qkv"])
def test_writer_fails_when_a_learner_piece_is_broken(monkeypatch, chapter, piece, broken):
    """The solution's own chain: ch06 -> ch04 -> ch02/ch03. Break one earlier piece."""
    ch04 = solution("ch06").ch04
    monkeypatch.setattr(getattr(ch04, chapter), piece, broken)
    outcome = check("ch06.my_writer", solution("ch06").my_writer)
    assert not outcome.passed, str(outcome)


def test_writer_hints():
    assert "one short" in str(writer_result("loop_drops_last_token"))
    assert "my_qwen3_forward" in str(writer_result("package_model"))
    assert "never called generate" in str(writer_result("own_loop_not_generate"))
    assert "call(s) of sample" in str(writer_result("package_sampler"))
    assert "seeded alike" in str(writer_result("sampler_without_generator"))
    assert "not the token your sample drew" in str(writer_result("drawn_token_boosted_too_little"))
    assert "second loop" in str(writer_result("second_loop_to_sample"))


def test_writer_stub_is_not_implemented_yet():
    def stub(weights, cfg, ids, max_new_tokens, eos_id=None, temperature=0.0, top_k=0,
             top_p=1.0, generator=None):
        raise NotImplementedError("your code here")

    outcome = check("ch06.my_writer", stub)
    assert not outcome.implemented and outcome.summary().endswith("not implemented yet")
