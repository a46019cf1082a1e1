"""What the checks of the capstone tp_decoder_layer compare with: its two cases (bard's layer 0
and a random layer with one KV head, which two ranks must both hold) and the package's reference
decoder layer on each; how a learner's layer is called on one rank, and what is wrong with its
output or its K and V.

The learner's tp_decoder_layer(weights, cfg, x, rank, world_size) -> (out, k, v) is one Qwen3
decoder layer on one rank: `weights` is the whole layer in the engine's merged layout (every rank
loaded the checkpoint), x [T, C] one sequence at positions 0..T-1. It returns the layer's output
[T, C] (the same on every rank) and the K (after QK-norm and RoPE) and V [T, hkv, D] of the KV
heads this rank keeps in its cache. With world_size=1 there is no process group.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

from minimodel.config import Qwen3Config
from minimodel.grading.ch10.common import _gen
from minimodel.grading.core import CheckFailed, expect, expect_shape
from minimodel.grading.i18n import Text, tr

_TP_TOL = 1e-4
# One KV head and four query heads: two ranks must both hold (replicate) the KV head; Hq·D ≠ C.
_REPLICATED = Qwen3Config(
    vocab_size=64, hidden_size=48, intermediate_size=96, num_hidden_layers=1,
    num_attention_heads=4, num_key_value_heads=1, head_dim=16, rope_theta=10_000.0,
)


def _engine_layout(hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One layer's Hugging Face weights -> the engine's names (q/k/v and gate/up merged)."""
    return {
        "input_layernorm.weight": hf["input_layernorm.weight"],
        "self_attn.qkv_proj.weight": torch.cat([hf[f"self_attn.{n}_proj.weight"]
                                                for n in "qkv"]),
        "self_attn.q_norm.weight": hf["self_attn.q_norm.weight"],
        "self_attn.k_norm.weight": hf["self_attn.k_norm.weight"],
        "self_attn.o_proj.weight": hf["self_attn.o_proj.weight"],
        "post_attention_layernorm.weight": hf["post_attention_layernorm.weight"],
        "mlp.gate_up_proj.weight": torch.cat([hf["mlp.gate_proj.weight"],
                                              hf["mlp.up_proj.weight"]]),
        "mlp.down_proj.weight": hf["mlp.down_proj.weight"],
    }


@functools.cache
def _tp_cases() -> tuple[tuple[Text, Qwen3Config, dict[str, torch.Tensor], torch.Tensor], ...]:
    """(name, config, the layer's weights in the engine's layout, x [T, C]) for bard's layer 0
    and for a random layer with one KV head."""
    from safetensors import safe_open

    from minimodel.hub import resolve_model
    from minimodel.weights import safetensors_files

    path = resolve_model("bard")
    bard = Qwen3Config.from_pretrained(path)
    prefix = "model.layers.0."
    hf = {}
    for file in safetensors_files(path):
        with safe_open(str(file), framework="pt") as f:
            hf.update({n[len(prefix):]: f.get_tensor(n).float() for n in f.keys()
                       if n.startswith(prefix)})
    g = _gen(1010)
    c = _REPLICATED
    C, I, D = c.hidden_size, c.intermediate_size, c.head_dim  # noqa: E741
    shapes = {"self_attn.q_proj.weight": (c.q_size, C), "self_attn.k_proj.weight": (c.kv_size, C),
              "self_attn.v_proj.weight": (c.kv_size, C), "self_attn.o_proj.weight": (C, c.q_size),
              "mlp.gate_proj.weight": (I, C), "mlp.up_proj.weight": (I, C),
              "mlp.down_proj.weight": (C, I)}
    rnd = {n: torch.randn(s, generator=g) / math.sqrt(s[1]) for n, s in shapes.items()}
    for n, size in (("input_layernorm", C), ("post_attention_layernorm", C),
                    ("self_attn.q_norm", D), ("self_attn.k_norm", D)):
        rnd[f"{n}.weight"] = 1 + 0.2 * torch.randn(size, generator=g)
    return ((tr("bard layer 0"), bard, _engine_layout(hf), torch.randn(7, bard.hidden_size,
                                                                         generator=g)),
            (tr("a layer with 1 KV head"), c, _engine_layout(rnd),
             torch.randn(5, C, generator=g)))


@functools.cache
def _tp_reference(i: int) -> dict[str, torch.Tensor]:
    """The package's reference decoder layer on case i: its output, its two branches (what
    each all-reduce must sum), K after QK-norm and RoPE and V of every KV head, its FLOPs."""
    from torch.utils.flop_counter import FlopCounterMode

    from minimodel.ops import apply_rope, rms_norm, rope_cos_sin
    from minimodel.reference.model import Qwen3DecoderLayer, causal_mask

    _, cfg, w, x = _tp_cases()[i]
    T, D = x.shape[0], cfg.head_dim
    layer = Qwen3DecoderLayer(cfg)
    q, k, v = w["self_attn.qkv_proj.weight"].split([cfg.q_size, cfg.kv_size, cfg.kv_size])
    gate, up = w["mlp.gate_up_proj.weight"].chunk(2)
    layer.load_state_dict({
        "input_layernorm.weight": w["input_layernorm.weight"],
        "post_attention_layernorm.weight": w["post_attention_layernorm.weight"],
        "self_attn.q_proj.weight": q, "self_attn.k_proj.weight": k, "self_attn.v_proj.weight": v,
        "self_attn.o_proj.weight": w["self_attn.o_proj.weight"],
        "self_attn.q_norm.weight": w["self_attn.q_norm.weight"],
        "self_attn.k_norm.weight": w["self_attn.k_norm.weight"],
        "mlp.gate_proj.weight": gate, "mlp.up_proj.weight": up,
        "mlp.down_proj.weight": w["mlp.down_proj.weight"]})
    cos, sin = rope_cos_sin(torch.arange(T), D, cfg.rope_theta)
    mask = causal_mask(T)[None, None]
    with torch.no_grad():
        xb, cb, sb = x[None], cos[None], sin[None]
        with FlopCounterMode(display=False) as flops:
            out = layer(xb, cb, sb, mask)[0]
        attn = layer.self_attn(layer.input_layernorm(xb), cb, sb, mask)[0]
        mlp = layer.mlp(layer.post_attention_layernorm(x + attn))
        h = layer.input_layernorm(x)
        keys = rms_norm((h @ k.T).view(T, -1, D), w["self_attn.k_norm.weight"], cfg.rms_norm_eps)
        keys = apply_rope(keys, cos, sin)
        values = (h @ v.T).view(T, -1, D)
    return {"out": out, "attn": attn, "mlp": mlp, "k": keys, "v": values,
            "flops": flops.get_total_flops()}


def _rank_kv_heads(cfg: Qwen3Config, rank: int, world: int) -> list[int]:
    from minimodel.layers import local_heads

    _, hkv, replicas = local_heads(cfg.num_attention_heads, cfg.num_key_value_heads, world)
    first = rank // replicas * hkv
    return list(range(first, first + hkv))


def _call_layer(fn: Callable, i: int, rank: int, world: int) -> tuple[torch.Tensor, ...]:
    """Run the learner's layer on case i; check the types and shapes it returns."""
    name, cfg, w, x = _tp_cases()[i]
    given = dict(w)
    with torch.no_grad():
        got = fn(given, cfg, x.clone(), rank, world)
    what = tr("tp_decoder_layer on {name} (T={T}), rank {rank} of {world}", name=name,
              T=x.shape[0], rank=rank, world=world)
    expect(isinstance(got, tuple) and len(got) == 3,
           tr("{what} returned {got}; return a tuple (out, k, v)", what=what,
              got=type(got).__name__))
    out, k, v = got
    expect_shape(out, tuple(x.shape), tr("{what}: out", what=what))
    for t, n in ((k, "k"), (v, "v")):
        expect(isinstance(t, torch.Tensor),
               tr("{what}: {name} should be a torch.Tensor, got {got}", what=what, name=n,
                  got=type(t).__name__))
    expect(given.keys() == w.keys() and all(given[n] is w[n] for n in w),
           tr("{what} changed the weights dict; read it, don't modify it", what=what))
    return out.detach(), k.detach(), v.detach()


def _out_problem(out: torch.Tensor, i: int, rank: int, world: int) -> Text | None:
    ref = _tp_reference(i)
    if torch.allclose(out, ref["out"], atol=_TP_TOL, rtol=_TP_TOL):
        return None
    name = _tp_cases()[i][0]
    err = float((out - ref["out"]).abs().nan_to_num(float("inf")).max())
    return tr("On {name}, rank {rank} of {world}: max |out - the reference layer| = {err:.3g} "
              "(tolerance {tol}).", name=name, rank=rank, world=world, err=err, tol=_TP_TOL)


def _kv_problem(k: torch.Tensor, v: torch.Tensor, i: int, rank: int, world: int) -> Text | None:
    name, cfg, _, _ = _tp_cases()[i]
    ref = _tp_reference(i)
    heads = _rank_kv_heads(cfg, rank, world)
    T, D = ref["k"].shape[0], cfg.head_dim
    for got, n in ((k, "k"), (v, "v")):
        expect_shape(got, (T, len(heads), D), tr(
            "On {name}, rank {rank} of {world}: {n} (the {kept} KV head(s) of {total} that this "
            "rank keeps in its cache)", name=name, rank=rank, world=world, n=n,
            kept=len(heads), total=cfg.num_key_value_heads))
    for got, full, what in ((k, ref["k"], tr("K (after k_norm and RoPE)")), (v, ref["v"], "V")):
        want = full[:, heads]
        if not torch.allclose(got, want, atol=_TP_TOL, rtol=_TP_TOL):
            others = [h for h in range(cfg.num_key_value_heads)
                      if torch.allclose(got[:, 0], full[:, h], atol=_TP_TOL, rtol=_TP_TOL)]
            held = (tr("its first is KV head {head}", head=others[0]) if others
                    else tr("it is no KV head's"))
            return tr("On {name} (Hq={Hq}, Hkv={Hkv}), rank {rank} of {world} should keep the "
                      "{what} of KV head(s) {heads}, the one(s) its query heads read; {held}.",
                      name=name, Hq=cfg.num_attention_heads, Hkv=cfg.num_key_value_heads,
                      rank=rank, world=world, what=what, heads=heads, held=held)
    return None


def _tp_one_rank(fn: Callable) -> None:
    """Fail unless fn, on one rank (no process group), is the reference layer on every case."""
    for i in range(len(_tp_cases())):
        out, k, v = _call_layer(fn, i, 0, 1)
        problem = _out_problem(out, i, 0, 1) or _kv_problem(k, v, i, 0, 1)
        if problem:
            raise CheckFailed(tr("{problem} With one rank your layer is the whole layer: check "
                                 "the norms, RoPE (positions 0..T-1), the causal attention of "
                                 "each query head on its KV head, and both residual adds.",
                                 problem=problem))
