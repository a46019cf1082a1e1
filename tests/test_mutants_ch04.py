"""Chapter 04's checks: every wrong implementation fails, every right one (in any style) passes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from minimodel.grading import check, learner_module
from minimodel.ops import silu_and_mul
from minimodel.reference import Qwen3ForCausalLM

# --- rms_norm ------------------------------------------------------------------------------


def norm_ok(x, weight, eps):
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def norm_ok_weight_in_float32(x, weight, eps):
    x32 = x.float()
    return (x32 / torch.sqrt((x32 * x32).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def norm_ok_torch(x, weight, eps):
    return F.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)


def norm_ok_norm(x, weight, eps):
    """Via the vector 2-norm: rms = ||x|| / sqrt(C)."""
    x64 = x.double()
    rms = (x64.norm(dim=-1, keepdim=True).pow(2) / x.shape[-1] + eps).sqrt()
    return (x64 / rms * weight.double()).to(x.dtype)


def _norm(x, weight, eps, *, center=False, square=True, eps_inside=True, use_eps=True,
          use_weight=True, compute_dtype=torch.float32, out_dtype=None, reduce="mean", dim=-1):
    x_ = x.to(compute_dtype)
    if center:
        x_ = x_ - x_.mean(dim, keepdim=True)
    sq = x_.pow(2) if square else x_.abs()
    ms = sq.mean(dim, keepdim=True) if reduce == "mean" else sq.sum(dim, keepdim=True)
    e = eps if use_eps else 0.0
    y = x_ / (ms + e).sqrt() if eps_inside else x_ / (ms.sqrt() + e)
    if use_weight:
        y = y * weight.to(compute_dtype)
    return y.to(out_dtype or x.dtype)


def _norm_mutant(**kw):
    return lambda x, w, eps: _norm(x, w, eps, **kw)


def norm_in_input_dtype(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def norm_scale_rounded(x, weight, eps):
    """The mean of squares in float32, but the row scale rounded to x's dtype."""
    scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).to(x.dtype)
    return x * scale * weight


def norm_in_place(x, weight, eps):
    x.mul_(torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).to(x.dtype))
    return x * weight


NORM_MUTANTS = {
    "mean instead of mean of squares": _norm_mutant(square=False),
    "missing eps": _norm_mutant(use_eps=False),
    "eps outside the sqrt": _norm_mutant(eps_inside=False),
    "forgot the weight": _norm_mutant(use_weight=False),
    "returns float32 for half input": _norm_mutant(out_dtype=torch.float32),
    "LayerNorm (subtracts the mean)": _norm_mutant(center=True),
    "sum instead of mean": _norm_mutant(reduce="sum"),
    "normalises over dim 0": _norm_mutant(dim=0),
    "computes in the input dtype": norm_in_input_dtype,
    "computes in bfloat16": _norm_mutant(compute_dtype=torch.bfloat16),
    "row scale rounded to the input dtype": norm_scale_rounded,
    "modifies x in place": norm_in_place,
    "torch LayerNorm": lambda x, w, eps: F.layer_norm(x.float(), x.shape[-1:], w.float(),
                                                      eps=eps).to(x.dtype),
}


@pytest.mark.parametrize("fn", [norm_ok, norm_ok_weight_in_float32, norm_ok_torch, norm_ok_norm])
def test_rms_norm_correct(fn):
    assert check("ch04.rms_norm", fn).passed


@pytest.mark.parametrize("name", NORM_MUTANTS)
def test_rms_norm_mutants(name):
    assert not check("ch04.rms_norm", NORM_MUTANTS[name]).passed


def test_rms_norm_hints():
    messages = " ".join(o.message for o in check("ch04.rms_norm", NORM_MUTANTS["forgot the weight"])
                        .outcomes)
    assert "multiply by weight" in messages
    messages = " ".join(o.message for o in check("ch04.rms_norm", NORM_MUTANTS[
        "LayerNorm (subtracts the mean)"]).outcomes)
    assert "LayerNorm" in messages


# --- fused_add_rms_norm --------------------------------------------------------------------


def fused_ok(x, residual, weight, eps):
    residual = x + residual
    return norm_ok(residual, weight, eps), residual


def fused_ok_in_place(x, residual, weight, eps):
    """vLLM style: updates the residual buffer in place."""
    residual.add_(x)
    return norm_ok_torch(residual, weight, eps), residual


def fused_ok_list(x, residual, weight, eps):
    s = (x.float() + residual.float()).to(x.dtype)
    return [norm_ok_weight_in_float32(s, weight, eps), s]


FUSED_MUTANTS = {
    "returns the old residual": lambda x, r, w, e: (norm_ok(x + r, w, e), r),
    "normalises x only": lambda x, r, w, e: (norm_ok(x, w, e), x + r),
    "norm, then add": lambda x, r, w, e: (norm_ok(x, w, e) + r, x + r),
    "outputs swapped": lambda x, r, w, e: (x + r, norm_ok(x + r, w, e)),
    "residual becomes the normed value": lambda x, r, w, e: (norm_ok(x + r, w, e),) * 2,
    "returns x as the residual": lambda x, r, w, e: (norm_ok(x + r, w, e), x),
    "returns only normed": lambda x, r, w, e: norm_ok(x + r, w, e),
    "float32 outputs": lambda x, r, w, e: (norm_ok(x + r, w, e).float(), (x + r).float()),
    "no weight": lambda x, r, w, e: (norm_ok(x + r, torch.ones_like(w), e), x + r),
    "subtracts the residual": lambda x, r, w, e: (norm_ok(x - r, w, e), x - r),
}


@pytest.mark.parametrize("fn", [fused_ok, fused_ok_in_place, fused_ok_list])
def test_fused_correct(fn):
    assert check("ch04.fused_add_rms_norm", fn).passed


@pytest.mark.parametrize("name", FUSED_MUTANTS)
def test_fused_mutants(name):
    assert not check("ch04.fused_add_rms_norm", FUSED_MUTANTS[name]).passed


# --- swiglu --------------------------------------------------------------------------------


def swiglu_ok(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def swiglu_ok_linear(x, w_gate, w_up, w_down):
    gate_up = F.linear(x, torch.cat([w_gate, w_up]))
    gate, up = gate_up.chunk(2, dim=-1)
    return F.linear(gate * torch.sigmoid(gate) * up, w_down)


def swiglu_ok_einsum(x, w_gate, w_up, w_down):
    g = torch.einsum("...c,ic->...i", x.float(), w_gate.float())
    u = torch.einsum("...c,ic->...i", x.float(), w_up.float())
    return torch.einsum("...i,ci->...c", F.silu(g) * u, w_down.float()).to(x.dtype)


def _swiglu(act, on="gate"):
    def fn(x, w_gate, w_up, w_down):
        g, u = x @ w_gate.T, x @ w_up.T
        h = {"gate": lambda: act(g) * u, "up": lambda: g * act(u), "product": lambda: act(g * u),
             "no_up": lambda: act(g)}[on]()
        return h @ w_down.T

    return fn


SWIGLU_MUTANTS = {
    "relu instead of silu": _swiglu(F.relu),
    "gelu instead of silu": _swiglu(F.gelu),
    "sigmoid instead of silu": _swiglu(torch.sigmoid),
    "tanh-gelu": _swiglu(lambda z: F.gelu(z, approximate="tanh")),
    "silu on up instead of gate": _swiglu(F.silu, on="up"),
    "silu of the product": _swiglu(F.silu, on="product"),
    "no up projection": _swiglu(F.silu, on="no_up"),
    "no activation": _swiglu(lambda z: z),
    "w_down not transposed": lambda x, g, u, d: (F.silu(x @ g.T) * (x @ u.T)) @ d.reshape(
        d.shape[1], d.shape[0]),
    "gate and up swapped": lambda x, g, u, d: swiglu_ok(x, u, g, d),
    "returns float32": lambda x, g, u, d: swiglu_ok(x.float(), g.float(), u.float(), d.float()),
}


@pytest.mark.parametrize("fn", [swiglu_ok, swiglu_ok_linear, swiglu_ok_einsum])
def test_swiglu_correct(fn):
    assert check("ch04.swiglu", fn).passed


@pytest.mark.parametrize("name", SWIGLU_MUTANTS)
def test_swiglu_mutants(name):
    assert not check("ch04.swiglu", SWIGLU_MUTANTS[name]).passed


# --- merge_qkv -----------------------------------------------------------------------------


def merge_ok(w_q, w_k, w_v):
    return torch.cat([w_q, w_k, w_v], dim=0)


def merge_ok_fill(w_q, w_k, w_v):
    out = w_q.new_empty(w_q.shape[0] + w_k.shape[0] + w_v.shape[0], w_q.shape[1])
    out[: len(w_q)], out[len(w_q): len(w_q) + len(w_k)], out[len(w_q) + len(w_k):] = w_q, w_k, w_v
    return out


MERGE_MUTANTS = {
    "k and v swapped": lambda q, k, v: torch.cat([q, v, k]),
    "q last": lambda q, k, v: torch.cat([k, v, q]),
    "stacked along dim 1": lambda q, k, v: torch.cat([q, k, v], dim=1),
    "transposed": lambda q, k, v: torch.cat([q, k, v]).T,
    "k twice": lambda q, k, v: torch.cat([q, k, k]),
    "float32": lambda q, k, v: torch.cat([q, k, v]).float(),
    "interleaved rows": lambda q, k, v: torch.cat([q, torch.stack([k, v], 1).flatten(0, 1)]),
}


@pytest.mark.parametrize("fn", [merge_ok, merge_ok_fill])
def test_merge_qkv_correct(fn):
    assert check("ch04.merge_qkv", fn).passed


@pytest.mark.parametrize("name", MERGE_MUTANTS)
def test_merge_qkv_mutants(name):
    assert not check("ch04.merge_qkv", MERGE_MUTANTS[name]).passed


# --- my_qwen3_forward: the part-1 capstone -------------------------------------------------
# Composed from the solutions' own pieces (loaded the way a learner's notebook loads them), with
# one thing broken at a time. Each mutant is a plain function, so spy_calls sees what it calls.

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"
EXERCISES = Path(__file__).resolve().parents[1] / "exercises"
ch01 = learner_module("ch01", SOLUTIONS)
ch02 = learner_module("ch02", SOLUTIONS)
ch03 = learner_module("ch03", SOLUTIONS)
ch04 = learner_module("ch04", SOLUTIONS)
embed, apply_rope, rope_qkv = ch01.embed, ch02.apply_rope, ch02.rope_qkv
causal_mask, attention = ch03.causal_mask, ch03.attention
rms_norm, fused_add_rms_norm, swiglu = ch04.rms_norm, ch04.fused_add_rms_norm, ch04.swiglu


def _forward(weights, cfg, ids, attention_mask=None, *, residual="pre-norm", qk_norm=True,
             rope_v=False, causal=True, pad_keys_hidden=True, final_norm="model.norm.weight",
             tiled_attention=False, own_swiglu=True):
    """A Qwen3 forward from the solutions' pieces; each keyword breaks one thing."""
    B, T = ids.shape
    eps, theta = cfg.rms_norm_eps, cfg.rope_theta
    Hq, Hkv, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    real = torch.ones(B, T, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    positions = (real.long().cumsum(-1) - 1).clamp(min=0)
    allowed = causal_mask(T) if causal else torch.ones(T, T, dtype=torch.bool)
    if pad_keys_hidden:
        allowed = allowed & (real[:, None, :] | torch.eye(T, dtype=torch.bool))
    masks = allowed.expand(B, T, T)
    h = embed(ids, weights["model.embed_tokens.weight"])
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        x = rms_norm(h, weights[p + "input_layernorm.weight"], eps)
        rows = []
        for b in range(B):
            q = (x[b] @ weights[p + "self_attn.q_proj.weight"].T).view(T, Hq, D)
            k = (x[b] @ weights[p + "self_attn.k_proj.weight"].T).view(T, Hkv, D)
            v = (x[b] @ weights[p + "self_attn.v_proj.weight"].T).view(T, Hkv, D)
            if qk_norm:
                q = rms_norm(q, weights[p + "self_attn.q_norm.weight"], eps)
                k = rms_norm(k, weights[p + "self_attn.k_norm.weight"], eps)
            q, k = apply_rope(q, positions[b], theta), apply_rope(k, positions[b], theta)
            if rope_v:
                v = apply_rope(v, positions[b], theta)
            attend = _tiled_attention if tiled_attention else attention
            o = attend(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                          v.transpose(0, 1)[None], masks[b])
            rows.append(o[0].transpose(0, 1).reshape(T, Hq * D)
                        @ weights[p + "self_attn.o_proj.weight"].T)
        a = torch.stack(rows)
        if residual == "pre-norm":
            h = h + a
        elif residual == "adds the normed input":
            h = x + a
        elif residual == "post-norm":
            h = rms_norm(h + a, weights[p + "input_layernorm.weight"], eps)
        x = rms_norm(h, weights[p + "post_attention_layernorm.weight"], eps)
        w_gate, w_up, w_down = (weights[p + f"mlp.{n}_proj.weight"] for n in ("gate", "up", "down"))
        if own_swiglu:
            m = swiglu(x, w_gate, w_up, w_down)
        else:  # the package's MLP arithmetic, not the learner's function
            m = F.linear(silu_and_mul(torch.cat([F.linear(x, w_gate), F.linear(x, w_up)], -1)),
                         w_down)
        h = x + m if residual == "adds the normed input" else h + m
    if final_norm is not None:
        h = rms_norm(h, weights[final_norm.format(last=cfg.num_hidden_layers - 1)], eps)
    return h @ weights.get("lm_head.weight", weights["model.embed_tokens.weight"]).T


def _mutant(**broken):
    def my_qwen3_forward(weights, cfg, ids, attention_mask=None):
        return _forward(weights, cfg, ids, attention_mask, **broken)

    return my_qwen3_forward


def forward_fused(weights, cfg, ids, attention_mask=None):
    """Written differently: engine style (fused add + norm, merged q/k/v, rope_qkv), the padding
    queries' NaN rows zeroed instead of letting them read themselves."""
    B, T = ids.shape
    eps = cfg.rms_norm_eps
    Hq, Hkv, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    real = torch.ones(B, T, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    start = (~real).sum(-1)  # left padding: the first real token of each row
    hidden, residual = embed(ids, weights["model.embed_tokens.weight"]), None
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        w = weights[p + "input_layernorm.weight"]
        if residual is None:
            residual, hidden = hidden, rms_norm(hidden, w, eps)
        else:
            hidden, residual = fused_add_rms_norm(hidden, residual, w, eps)
        w_qkv = ch04.merge_qkv(*(weights[p + f"self_attn.{n}_proj.weight"] for n in "qkv"))
        out = torch.zeros(B, T, Hq * D)
        for b in range(B):
            s = int(start[b])
            n = T - s
            q, k, v = (hidden[b, s:] @ w_qkv.T).split([Hq * D, Hkv * D, Hkv * D], dim=-1)
            q = rms_norm(q.reshape(n, Hq, D), weights[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k.reshape(n, Hkv, D), weights[p + "self_attn.k_norm.weight"], eps)
            q, k, v = rope_qkv(q, k, v.reshape(n, Hkv, D), torch.arange(n), cfg.rope_theta)
            o = attention(*(t.permute(1, 0, 2)[None] for t in (q, k, v)), causal_mask(n))
            out[b, s:] = o[0].permute(1, 0, 2).reshape(n, Hq * D)
        hidden = out @ weights[p + "self_attn.o_proj.weight"].T
        hidden, residual = fused_add_rms_norm(
            hidden, residual, weights[p + "post_attention_layernorm.weight"], eps)
        hidden = swiglu(hidden, weights[p + "mlp.gate_proj.weight"],
                        weights[p + "mlp.up_proj.weight"], weights[p + "mlp.down_proj.weight"])
    hidden, _ = fused_add_rms_norm(hidden, residual, weights["model.norm.weight"], eps)
    head = weights["lm_head.weight"] if "lm_head.weight" in weights else \
        weights["model.embed_tokens.weight"]
    return torch.einsum("btc,vc->btv", hidden, head)


def forward_calls_the_package(weights, cfg, ids, attention_mask=None):
    """Right logits, but from the package's model: none of the learner's pieces run."""
    model = Qwen3ForCausalLM(cfg)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(weights[name])
    return model(ids, attention_mask=attention_mask)


def forward_untied_ignored(weights, cfg, ids, attention_mask=None):
    """Always uses the embedding table as the LM head, even when lm_head.weight is given."""
    w = {k: v for k, v in weights.items() if k != "lm_head.weight"}
    return _forward(w, cfg, ids, attention_mask)


def _tiled_attention(q, k, v, mask):
    """The learner's attention broken on purpose: K/V heads tiled (0, 1, 0, 1), not grouped."""
    g = q.shape[1] // k.shape[1]
    s = q @ k.repeat(1, g, 1, 1).transpose(-1, -2) / q.shape[-1] ** 0.5
    return s.masked_fill(~mask, float("-inf")).softmax(-1) @ v.repeat(1, g, 1, 1)


FORWARD_MUTANTS = {
    "residual adds the normed input": _mutant(residual="adds the normed input"),
    "post-norm instead of pre-norm": _mutant(residual="post-norm"),
    "no QK-norm": _mutant(qk_norm=False),
    "RoPE applied to V too": _mutant(rope_v=True),
    "missing causal mask": _mutant(causal=False),
    "no final norm": _mutant(final_norm=None),
    "final norm with the last layer's weight": _mutant(
        final_norm="model.layers.{last}.post_attention_layernorm.weight"),
    "padding keys attended": _mutant(pad_keys_hidden=False),
    "untied lm_head ignored": forward_untied_ignored,
    "learner's attention broken (K/V tiled)": _mutant(tiled_attention=True),
    "calls the package model": forward_calls_the_package,
    "package MLP instead of own swiglu": _mutant(own_swiglu=False),
}


@pytest.mark.parametrize("fn", [ch04.my_qwen3_forward, forward_fused, _mutant()],
                         ids=["solution", "engine style", "composed here"])
def test_forward_correct(fn):
    result = check("ch04.my_qwen3_forward", fn)
    assert result.passed, str(result)


@pytest.mark.parametrize("name", FORWARD_MUTANTS)
def test_forward_mutants(name):
    assert not check("ch04.my_qwen3_forward", FORWARD_MUTANTS[name]).passed


@pytest.mark.parametrize("name", ["calls the package model", "package MLP instead of own swiglu"])
def test_forward_spy_names_what_was_not_used(name):
    result = check("ch04.my_qwen3_forward", FORWARD_MUTANTS[name])
    failed = [o for o in result.outcomes if not o.passed]
    assert [o.title for o in failed] == [result.outcomes[-1].title], str(result)  # logits are fine
    assert "swiglu" in failed[0].message
    if name == "calls the package model":
        assert all(p in failed[0].message for p in ("embed", "attention", "rms_norm", "rope"))


def test_forward_hint_points_where_tokens_meet():
    result = check("ch04.my_qwen3_forward", FORWARD_MUTANTS["missing causal mask"])
    assert any("where tokens meet" in o.message for o in result.outcomes if not o.passed)
    result = check("ch04.my_qwen3_forward", FORWARD_MUTANTS["no final norm"])
    assert any("one token alone is off" in o.message for o in result.outcomes if not o.passed)


def test_forward_stub_is_not_implemented_yet():
    """In exercises/ every piece is a stub: the capstone reports "not implemented yet"."""
    stub = learner_module("ch04", EXERCISES).my_qwen3_forward
    result = check("ch04.my_qwen3_forward", stub)
    assert not result.implemented and result.summary().endswith("not implemented yet")


def test_forward_on_unwritten_pieces_is_not_implemented_yet(tmp_path):
    """A capstone written on top of earlier exercises that are still stubs does not raise."""
    for name in ("ch01_tokens_and_embeddings", "ch02_rope", "ch03_attention"):
        shutil.copy(EXERCISES / f"{name}.ipynb", tmp_path)
    shutil.copy(SOLUTIONS / "ch04_block.ipynb", tmp_path)
    result = check("ch04.my_qwen3_forward", learner_module("ch04", tmp_path).my_qwen3_forward)
    assert not result.implemented, str(result)


def test_a_broken_earlier_notebook_breaks_the_capstone(tmp_path):
    """The solved capstone, next to a ch03 notebook whose attention tiles the K/V heads."""
    for name in ("ch01_tokens_and_embeddings", "ch02_rope", "ch04_block"):
        shutil.copy(SOLUTIONS / f"{name}.ipynb", tmp_path)
    text = (SOLUTIONS / "ch03_attention.ipynb").read_text(encoding="utf-8")
    right = "k, v = repeat_kv(k, groups), repeat_kv(v, groups)"
    assert right in text
    broken = "k, v = k.repeat(1, groups, 1, 1), v.repeat(1, groups, 1, 1)"
    (tmp_path / "ch03_attention.ipynb").write_text(text.replace(right, broken), encoding="utf-8")
    result = check("ch04.my_qwen3_forward", learner_module("ch04", tmp_path).my_qwen3_forward)
    assert result.implemented and not result.passed, str(result)
