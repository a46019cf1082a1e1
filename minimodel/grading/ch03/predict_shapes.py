"""Checks of ch03.predict_shapes: the shape of every tensor in a Qwen3 forward pass, from the
config alone, on the chapter's example and on configs the learner has not seen.

Shapes: B batch, T tokens, C hidden, Hq query heads, Hkv KV heads, D head dim, V vocab.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.core import exercise, expect
from minimodel.grading.i18n import Text, tr

SHAPE_KEYS = (
    "input_ids", "embeddings", "q", "k", "v", "scores", "attn_output", "logits",
    "next_token_logits",
)


def _shape_hint(key: str) -> Text:
    """Why the tensor `key` of SHAPE_KEYS has its shape."""
    return {
        "input_ids": tr("token ids are [B, T]."),
        "embeddings": tr("one C-vector per token: [B, T, C]."),
        "q": tr("q is [B, Hq, T, D]; D is the given head_dim, which need not be C // Hq."),
        "k": tr("K has only Hkv heads (GQA: Hq // Hkv query heads share one): [B, Hkv, T, D]."),
        "v": tr("V has only Hkv heads (GQA: Hq // Hkv query heads share one): [B, Hkv, T, D]."),
        "scores": tr("one score per query and key in every query head: [B, Hq, T, T]."),
        "attn_output": tr("o_proj maps the Hq * D head outputs back to the hidden size: "
                          "[B, T, C]."),
        "logits": tr("V scores at every position: [B, T, V]."),
        "next_token_logits": tr("only the last position predicts the next token: [B, V]."),
    }[key]


def _true_shapes(B: int, T: int, C: int, Hq: int, Hkv: int, D: int, V: int) -> dict:
    """The right shape of each of SHAPE_KEYS for this config."""
    return {
        "input_ids": (B, T), "embeddings": (B, T, C), "q": (B, Hq, T, D), "k": (B, Hkv, T, D),
        "v": (B, Hkv, T, D), "scores": (B, Hq, T, T), "attn_output": (B, T, C),
        "logits": (B, T, V), "next_token_logits": (B, V),
    }


def _as_shape(value: object) -> tuple[int, ...] | None:
    """A tuple of Python ints, or None if `value` is not a sequence of integers."""
    if not isinstance(value, (tuple, list, torch.Size)):
        return None
    if any(isinstance(d, bool) or not hasattr(d, "__index__") for d in value):
        return None
    return tuple(d.__index__() for d in value)


def _not_a_shape(value: object) -> Text:
    """What a value that is not a shape should have been, and what it is."""
    if isinstance(value, torch.Tensor):
        return tr("a tuple of ints (a shape), got a tensor of shape {shape}.",
                  shape=tuple(value.shape))
    return tr("a tuple of ints, got {value!r}.", value=value)


def _expect_every_key(got: object, where: str, listing: Text | str = "") -> None:
    """`got` must be a dict holding every key of SHAPE_KEYS; `listing` ends the missing-key
    message."""
    expect(isinstance(got, dict),
           tr("{where} should return a dict, got {type}.", where=where, type=type(got).__name__))
    missing = [key for key in SHAPE_KEYS if key not in got]
    expect(not missing, tr("{where} is missing the key(s) {missing}{listing}.", where=where,
                           missing=missing, listing=listing))


def _compare_shapes(fn: Callable, config: tuple[int, ...]) -> None:
    """The learner's shapes for `config` (B, T, C, Hq, Hkv, D, V) must all be right."""
    B, T, C, Hq, Hkv, D, V = config
    got = fn(B, T, C, Hq, Hkv, D, V)
    where = f"predict_shapes(B={B}, T={T}, C={C}, Hq={Hq}, Hkv={Hkv}, D={D}, V={V})"
    _expect_every_key(got, where)
    for key, want in _true_shapes(*config).items():
        shape = _as_shape(got[key])
        expect(shape is not None, tr("{where}[{key!r}] should be {want}", where=where, key=key,
                                     want=_not_a_shape(got[key])))
        expect(shape == want, tr("{where}[{key!r}] is {shape}, expected {want}: {hint}",
                                 where=where, key=key, shape=shape, want=want,
                                 hint=_shape_hint(key)))


@exercise("ch03.predict_shapes", "returns a dict with all nine keys, each a tuple of ints")
def _shapes_keys(fn: Callable) -> None:
    got = fn(2, 5, 48, 6, 3, 16, 100)
    _expect_every_key(got, "predict_shapes", tr("; expected {keys}", keys=SHAPE_KEYS))
    for key in SHAPE_KEYS:
        expect(_as_shape(got[key]) is not None,
               tr("{where}[{key!r}] should be {want}", where="predict_shapes(...)", key=key,
                  want=_not_a_shape(got[key])))


@exercise("ch03.predict_shapes", "gets the pen-and-paper example's config as a batch of 2 "
          "prompts of 5 tokens (C=32, Hq=4, Hkv=2, D=8, V=64)")
def _shapes_paper(fn: Callable) -> None:
    _compare_shapes(fn, (2, 5, 32, 4, 2, 8, 64))  # the chapter measures B=1, T=3 only


@exercise("ch03.predict_shapes", "gets every shape right for 12 configs you have not seen")
def _shapes_random(fn: Callable) -> None:
    fixed = [
        (2, 4, 32, 4, 1, 8, 64),  # MQA (the chapter measures it at B=1, T=3)
        (3, 7, 64, 4, 4, 16, 50),  # MHA, Hq * D == C
        (2, 5, 64, 4, 2, 32, 151936),  # tiny: Hq * D = 128 != C
        (1, 1, 40, 8, 2, 10, 33),  # a single token
    ]
    drawn = []
    for _ in range(8):
        Hkv = int(torch.randint(1, 5, ()))
        Hq = Hkv * int(torch.randint(1, 5, ()))
        drawn.append((
            int(torch.randint(1, 5, ())), int(torch.randint(1, 12, ())),
            int(torch.randint(8, 200, ())), Hq, Hkv, 2 * int(torch.randint(1, 40, ())),
            int(torch.randint(10, 1000, ())),
        ))
    for config in fixed + drawn:
        _compare_shapes(fn, config)
