"""Checks of ch07.my_cached_decode, the capstone: the learner's greedy decode with a KV cache,
built from their own pieces.

The learner's function gets a checkpoint's weights by Hugging Face name and its config, and
greedily decodes `steps` tokens after a prompt: logits[:, 0] come from the prefill (the prompt's
last row), logits[:, i] from the decode step that feeds the token picked at step i-1. The
reference is the naive model run once over the prompt and the picked tokens (teacher forcing
on the learner's own choices, so a near-tie never decides the verdict).

Shapes: B prompts, T prompt tokens, V vocab.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from minimodel.checkpoints import random_state_dict_numpy
from minimodel.config import Qwen3Config
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import Text, join, plain, tr
from minimodel.grading.learner import spy_calls
from minimodel.hub import resolve_model
from minimodel.reference.model import Qwen3ForCausalLM as ReferenceQwen3
from minimodel.weights import iter_checkpoint

_TOL = 1e-4
# A small config whose LM head is cheap next to its layers (so the matmul count shows whether
# tokens are recomputed), with an untied head, Hq * D != C and 4 query heads per KV head.
_SMALL = Qwen3Config(
    vocab_size=256, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
    num_attention_heads=8, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
    rope_theta=10_000.0, tie_word_embeddings=False, torch_dtype="float32",
)


@functools.cache
def _model(name: str) -> tuple[Qwen3Config, dict[str, torch.Tensor], ReferenceQwen3]:
    """(config, weights by Hugging Face name in float32, the reference model) of bard or the
    small random config."""
    if name == "bard":
        path = resolve_model("bard")
        weights = {n: t.float() for n, t in iter_checkpoint(path)}
        return Qwen3Config.from_pretrained(path), weights, ReferenceQwen3.from_pretrained(path)
    weights = random_state_dict_numpy(_SMALL)
    model = ReferenceQwen3(_SMALL)
    model.load_state_dict(weights)
    return _SMALL, weights, model.eval()


def _model_text(name: str) -> Text | str:
    """How the model `name` is called in a message."""
    return "bard" if name == "bard" else tr("the random config")


def _run_decode(fn: Callable, name: str, ids: torch.Tensor, steps: int) -> torch.Tensor:
    """The learner's logits [B, steps, V], after checking the type, shape and untouched inputs."""
    cfg, weights, _ = _model(name)
    B, T = ids.shape
    what = tr("my_cached_decode(weights, cfg, ids [{B}, {T}], steps={steps}) on {model}", B=B,
              T=T, steps=steps, model=_model_text(name))
    given = dict(weights)
    got = fn(given, cfg, ids.clone(), steps)
    expect_shape(got, (B, steps, cfg.vocab_size),
                 tr("{what} (the logits that picked each of the {steps} new tokens)", what=what,
                    steps=steps))
    expect(got.dtype.is_floating_point,
           tr("{what} returned {dtype} logits; return floats", what=what, dtype=got.dtype))
    expect(given.keys() == weights.keys() and all(given[k] is weights[k] for k in weights),
           tr("{what} changed the weights dict; read it, don't modify it", what=what))
    return got.detach()


def _expect_decode(fn: Callable, name: str, ids: torch.Tensor, steps: int) -> None:
    """The learner's cached decode on these prompts must give the full recompute's logits at
    every step; the failure says which step is off first, and what that suggests."""
    _, _, ref = _model(name)
    B, T = ids.shape
    got = _run_decode(fn, name, ids, steps).double()
    picked = got.argmax(-1)  # [B, steps]: the tokens the learner's loop chose
    want = ref(torch.cat([ids, picked[:, :-1]], dim=1))[:, T - 1:].double()  # [B, steps, V]
    ok = torch.isclose(got, want, atol=_TOL, rtol=1e-5).flatten(2).all(-1).all(0)  # [steps]
    if bool(ok.all()):
        return
    err = (got - want).abs().nan_to_num(float("inf")).amax(dim=(0, 2))  # [steps]
    errs = ", ".join(f"{e:.2g}" for e in err.tolist())
    what = tr("On {model}, prompts [{B}, {T}], {steps} steps: max |yours - full recompute| per "
              "step = [{errs}] (step 0 is the prefill)", model=_model_text(name), B=B, T=T,
              steps=steps, errs=errs)
    if not bool(ok[0]):
        raise CheckFailed(tr("{what}. The prefill is already off, before any cached key is "
                             "reused. Check that the pieces it calls pass their own checks, the "
                             "weights each layer reads, the final norm and the LM head, and the "
                             "cache: in the prefill every layer writes the prompt's K/V at "
                             "positions 0..T-1 and reads exactly those.", what=what))
    i = int((~ok).nonzero()[0])
    alone = ref(picked[:, i - 1 : i])[:, 0].double()  # the fed token with no context, position 0
    if torch.allclose(got[:, i], alone, atol=1e-3, rtol=1e-3):
        raise CheckFailed(tr("{what}. Decode step {i} gives the logits of its token alone, as "
                             "if nothing were cached: the step did not read the K/V of the "
                             "earlier tokens (or they were never written).", what=what, i=i))
    raise CheckFailed(tr("{what}. The prefill matches, decode step {i} does not. The token fed "
                         "at step {i} continues its row at position {position}: its RoPE "
                         "position, the place its K and V are written in the cache, and the keys "
                         "it reads (all {seen} so far, its own included) follow on from what is "
                         "already cached, and it must be the token the previous step picked.",
                         what=what, i=i, position=T + i - 1, seen=T + i))


def _prompts(name: str, B: int, T: int) -> torch.Tensor:
    """Random token ids [B, T] in the vocabulary of the model `name`."""
    return torch.randint(0, _model(name)[0].vocab_size, (B, T))


@exercise("ch07.my_cached_decode", "bard, one prompt at a time: the logits of every step equal "
          "the full recompute within 1e-4 (3 prompts, 6 steps)")
def _decode_single(fn: Callable) -> None:
    for T in (1, int(torch.randint(2, 9, ())), int(torch.randint(9, 25, ()))):
        _expect_decode(fn, "bard", _prompts("bard", 1, T), 6)


@exercise("ch07.my_cached_decode", "bard, a batch of 3 prompts of one length decoded together")
def _decode_batch(fn: Callable) -> None:
    _expect_decode(fn, "bard", _prompts("bard", 3, int(torch.randint(4, 17, ()))), 5)


@exercise("ch07.my_cached_decode", "another config (untied LM head, Hq·D ≠ C, 4 query heads per "
          "KV head): the same, batches of 1 and 2")
def _decode_small(fn: Callable) -> None:
    for B in (1, 2):
        _expect_decode(fn, "small", _prompts("small", B, int(torch.randint(3, 20, ()))), 7)


@exercise("ch07.my_cached_decode", "runs the prompt once and then only the new token per step "
          "(matmul FLOPs counted)")
def _decode_work(fn: Callable) -> str:
    _, _, ref = _model("small")
    T, steps = 24, 8
    ids = _prompts("small", 1, T)
    with FlopCounterMode(display=False) as counted:
        got = _run_decode(fn, "small", ids, steps)
    with FlopCounterMode(display=False) as one_pass:  # every token through the model once
        ref(torch.cat([ids, got.argmax(-1)[:, :-1]], dim=1))
    ratio = counted.get_total_flops() / one_pass.get_total_flops()
    expect(ratio <= 2.0, tr(
        "Prompt of {T} tokens, {steps} steps: your loop did {ratio:.1f} times the matmul work "
        "of one pass over the final sequence. A cached decode runs every token through the "
        "model once: the prompt in one prefill, then only the new token of each step, reading "
        "the earlier tokens' K/V from the cache (and only the filled part of it). Recomputing "
        "the whole sequence at every step gives the same logits at many times the cost.",
        T=T, steps=steps, ratio=ratio))
    return tr("{ratio:.1f}x the work of one pass", ratio=ratio)


def _pieces() -> dict[Text, tuple[str, ...]]:
    """Your own pieces from earlier notebooks (any one name of each group counts)."""
    return {
        tr("RoPE (chapter 02)"): ("apply_rope", "rope_qkv"),
        tr("attention (chapter 03, or cached_attention of this notebook)"): ("attention",
                                                                            "cached_attention"),
        tr("RMSNorm (chapter 04)"): ("rms_norm", "fused_add_rms_norm"),
        tr("SwiGLU (chapter 04)"): ("swiglu",),
    }


@exercise("ch07.my_cached_decode", "is built from your own RoPE, attention, RMSNorm and SwiGLU")
def _decode_pieces(fn: Callable) -> str:
    # Look through decorators (@torch.no_grad() wraps fn in a function of torch's own module).
    with spy_calls(inspect.unwrap(fn)) as calls:
        _run_decode(fn, "small", _prompts("small", 1, 5), 3)
    missing = [what for what, names in _pieces().items() if not any(calls[n] for n in names)]
    expect(not missing, tr(
        "my_cached_decode never called your own {missing}. Build the model step from the "
        "functions you wrote (load them with learner_module), not from the package's model or "
        "ops. Calls seen: {calls}.", missing=join(tr(", "), missing),
        calls=dict(calls) or tr("none")))
    return plain(", ".join(f"{n} ×{c}" for n, c in sorted(calls.items())))
