"""Checks of ch04.my_qwen3_forward, the part-1 capstone: the learner's own Qwen3, built from
their own pieces, compared with the reference model on bard's weights and on small random
models, prompt by prompt and as a left-padded batch.

Shapes: B batch, T tokens, V vocab; C hidden, Hq/Hkv query/KV heads, D head dim, L layers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import torch

from minimodel.config import Qwen3Config
from minimodel.grading.ch04.common import _name
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import Text, join, tr
from minimodel.grading.learner import spy_calls

# Real text through the real tokenizer: verse in the layout bard was trained on, a Chinese line,
# and a single token (where attention can only read the token itself).
_PROMPTS = ("HAMLET.\nTo be, or not to be, that is the question:\n", "床前明月光，疑是地上霜。",
            "O")
_BATCH = ("Shall I compare thee to a summer's day?", "床前明月光，", "ROMEO.\nBut soft")
_ATOL = 1e-4



def _pieces() -> tuple[tuple[Text, tuple[str, ...]], ...]:
    """What the forward must be built from: (what to tell the learner, names that count)."""
    return (
        (tr("embed (chapter 01)"), ("embed",)),
        (tr("apply_rope or rope_qkv (chapter 02)"), ("apply_rope", "rope_qkv")),
        (tr("attention (chapter 03)"), ("attention",)),
        (tr("rms_norm (this chapter)"), ("rms_norm",)),
        (tr("swiglu (this chapter)"), ("swiglu",)),
    )


def _reference_model(cfg: Qwen3Config, weights: dict[str, torch.Tensor]) -> torch.nn.Module:
    """The package's reference Qwen3 (float32) holding `weights` (Hugging Face names)."""
    from minimodel.reference import Qwen3ForCausalLM

    with torch.device("meta"):
        model = Qwen3ForCausalLM(cfg)
    model = model.to_empty(device="cpu").float()
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    with torch.no_grad():
        for name, param in model.named_parameters():  # a tied table is listed once
            param.copy_(weights[name])
    return model.eval()


def _left_pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ids -> (ids Long[B, T], attention_mask Bool[B, T]), padded on the left."""
    T = max(len(r) for r in rows)
    ids = torch.tensor([[pad_id] * (T - len(r)) + r for r in rows])
    real = torch.tensor([[False] * (T - len(r)) + [True] * len(r) for r in rows])
    return ids, real


@functools.lru_cache(maxsize=1)
def _bard_cases() -> tuple[dict[str, torch.Tensor], Qwen3Config, list[tuple], tuple]:
    """bard's weights in float32, its config, and (ids, attention_mask, reference logits): each
    prompt alone, then the left-padded batch."""
    from minimodel.hub import resolve_model
    from minimodel.tokenizer import load_tokenizer
    from minimodel.weights import iter_checkpoint

    path = resolve_model("bard")
    cfg = Qwen3Config.from_pretrained(path)
    tok = load_tokenizer(path)
    weights = {name: t.float() for name, t in iter_checkpoint(path)}
    model = _reference_model(cfg, weights)
    prompts = [torch.tensor([tok.encode(p)]) for p in _PROMPTS]
    batch, real = _left_pad([tok.encode(p) for p in _BATCH], tok.pad_token_id)
    with torch.no_grad():
        alone = [(ids, None, model(ids)) for ids in prompts]
        padded = (batch, real, model(batch, attention_mask=real))
    return weights, cfg, alone, padded


def _random_cases() -> Iterator[tuple]:
    """Small random Qwen3s (MQA, Hq*D != C, an untied LM head), random lengths and padding:
    (weights, config, ids, attention_mask, reference logits) for each."""
    from minimodel.checkpoints import random_state_dict_numpy

    configs = (
        Qwen3Config(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
                    num_attention_heads=6, num_key_value_heads=2, head_dim=16,
                    rope_theta=10_000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                    torch_dtype="float32"),
        Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=1, head_dim=8,
                    torch_dtype="float32"),
    )
    for seed, cfg in enumerate(configs):
        weights = random_state_dict_numpy(cfg, seed=seed + 1)
        model = _reference_model(cfg, weights)
        lengths = torch.randint(1, 12, (3,)).tolist()
        rows = [torch.randint(cfg.vocab_size, (n,)).tolist() for n in lengths]
        ids, real = _left_pad(rows, pad_id=0)
        with torch.no_grad():
            yield weights, cfg, ids, real, model(ids, attention_mask=real)


def _where(cfg: Qwen3Config, ids: torch.Tensor, attention_mask: torch.Tensor | None) -> Text:
    """How a run of my_qwen3_forward is written in a message."""
    B, T = ids.shape
    shape = (f"C={cfg.hidden_size}, Hq={cfg.num_attention_heads}, "
             f"Hkv={cfg.num_key_value_heads}, D={cfg.head_dim}, L={cfg.num_hidden_layers}")
    if attention_mask is None:
        return tr("my_qwen3_forward on ids [{B}, {T}], {shape}", B=B, T=T, shape=shape)
    return tr("my_qwen3_forward on ids [{B}, {T}] (left-padded, real lengths {lengths}), {shape}",
              B=B, T=T, lengths=attention_mask.sum(-1).tolist(), shape=shape)


def _compare_forward(fn: Callable, weights: dict[str, torch.Tensor], cfg: Qwen3Config,
                     ids: torch.Tensor, attention_mask: torch.Tensor | None,
                     want: torch.Tensor) -> None:
    """The learner's logits must equal `want` at every real position, within 1e-4."""
    with torch.no_grad():
        got = fn(dict(weights), cfg, ids, attention_mask)
    where = _where(cfg, ids, attention_mask)
    expect_shape(got, tuple(want.shape), tr("the logits of {where}", where=where))
    expect(got.dtype == torch.float32,
           tr("the logits of {where} have dtype {dtype}; the weights are float32, so the logits "
              "should be too.", where=where, dtype=_name(got.dtype)))
    real = (torch.ones(ids.shape, dtype=torch.bool) if attention_mask is None
            else attention_mask.bool())
    diff = (got - want)[real].abs()  # [positions, V]: padded positions are not compared
    if diff.isnan().any():
        raise CheckFailed(
            tr("{where} gives NaN at real positions. A padding query that may read no key at "
               "all gets a softmax over -inf only (NaN); the NaN then reaches real tokens "
               "through the next layer's values, even where their weight is 0 (0 * NaN = NaN).",
               where=where)
            if attention_mask is not None else tr("{where} gives NaN logits.", where=where)
        )
    worst = float(diff.max())
    if worst <= _ATOL:
        return
    # Diagnose with the first real token alone: it reads only itself, at position 0, so q, k,
    # RoPE and the mask play no part in its logits.
    s = int(real[0].long().argmax())
    with torch.no_grad():
        single = fn(dict(weights), cfg, ids[:1, s:s + 1])
    if not isinstance(single, torch.Tensor) or tuple(single.shape[:2]) != (1, 1) \
            or (single[0, 0] - want[0, s]).abs().max() > _ATOL:
        hint = tr(" Even one token alone is off. A single token's attention reads only its own "
                  "value vector, so q, k, RoPE and the mask play no part there: look at the "
                  "embedding, the norms and their weights, the residual adds, the MLP, v and "
                  "o_proj, the final norm and the LM head.")
    else:
        hint = tr(" One token alone comes out right, so the mistake is where tokens meet: q and "
                  "k (QK-norm, RoPE and its positions), the causal mask, the padding, the "
                  "scores.")
    raise CheckFailed(tr("{where}: the logits are off from the reference model's by up to "
                         "{worst:.3g} (allowed {atol:g}).{hint}", where=where, worst=worst,
                         atol=_ATOL, hint=hint))


@exercise("ch04.my_qwen3_forward", "returns float32 logits [B, T, V] for bard's weights")
def _forward_shape(fn: Callable) -> None:
    weights, cfg, alone, _ = _bard_cases()
    ids, _, want = alone[0]
    with torch.no_grad():
        got = fn(dict(weights), cfg, ids)
    expect_shape(got, tuple(want.shape), f"my_qwen3_forward(weights, cfg, ids {tuple(ids.shape)})")
    expect(got.dtype == torch.float32,
           tr("my_qwen3_forward returned {dtype} logits; float32 weights give float32.",
              dtype=_name(got.dtype)))


@exercise("ch04.my_qwen3_forward",
          "equals the reference model within 1e-4 on 3 prompts (verse, Chinese, one token)")
def _forward_prompts(fn: Callable) -> None:
    weights, cfg, alone, _ = _bard_cases()
    for ids, mask, want in alone:
        _compare_forward(fn, weights, cfg, ids, mask, want)


@exercise("ch04.my_qwen3_forward",
          "a left-padded batch of 3 prompts: equal at every real position")
def _forward_padded(fn: Callable) -> None:
    weights, cfg, _, (ids, real, want) = _bard_cases()
    _compare_forward(fn, weights, cfg, ids, real, want)


@exercise("ch04.my_qwen3_forward",
          "random small models: MQA, Hq*D != C, untied LM head, random lengths and padding")
def _forward_random(fn: Callable) -> None:
    for weights, cfg, ids, real, want in _random_cases():
        _compare_forward(fn, weights, cfg, ids, real, want)


@exercise("ch04.my_qwen3_forward",
          "is built from your own embed, RoPE, attention, rms_norm and swiglu")
def _forward_own_pieces(fn: Callable) -> None:
    weights, cfg, alone, _ = _bard_cases()
    ids = alone[0][0]
    with spy_calls(fn) as calls, torch.no_grad():
        fn(dict(weights), cfg, ids)
    missing = [what for what, names in _pieces() if not any(calls[n] for n in names)]
    expect(not missing,
           tr("my_qwen3_forward never called your own {missing}. The capstone is your model: it "
              "must run the functions you wrote (loaded with learner_module from your notebooks "
              "of chapters 01-03, and this notebook's), not the package's.",
              missing=join(tr(", "), missing)))
