"""Checks of ch02.interleave_permutation: a checkpoint trained with rotate-half, converted for a
model that uses interleaved RoPE. Graded on behaviour: the converted layer must give the same
scores and outputs, whatever reordering (or sign flips) the learner found.

Shapes: T tokens, C hidden size, Hq query heads, Hkv key/value heads, D head dim.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.ch02.common import (
    THETAS,
    _pos_text,
    _rope_half_reference,
    rope_interleaved_reference,
)
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import Text, tr
from minimodel.ops import rms_norm

ATTN_KEYS = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
             "q_norm.weight", "k_norm.weight")
# (Hq, Hkv, D, C): one head first (so a mix-up between heads can be named), then GQA layouts,
# head dims 2 to 128, and hidden sizes that are not Hq * D.
PERM_SHAPES = [(1, 1, 8, 16), (1, 1, 32, 24), (2, 2, 2, 8), (2, 1, 4, 12), (4, 2, 16, 32),
               (4, 4, 64, 48), (6, 3, 32, 40), (8, 2, 128, 64)]
PERM_ATOL = 1e-4  # the same sums in another order; the mistakes are off by 0.1 or more


def _layer_weights(Hq: int, Hkv: int, D: int, C: int,
                   dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """One attention layer's weights, Hugging Face names without the layer prefix."""
    w = {
        "q_proj.weight": torch.randn(Hq * D, C) / C**0.5,  # [Hq*D, C]
        "k_proj.weight": torch.randn(Hkv * D, C) / C**0.5,  # [Hkv*D, C]
        "v_proj.weight": torch.randn(Hkv * D, C) / C**0.5,  # [Hkv*D, C]
        "o_proj.weight": torch.randn(C, Hq * D) / (Hq * D) ** 0.5,  # [C, Hq*D]
        "q_norm.weight": 0.5 + torch.rand(D),  # [D]: every dimension its own scale, as trained
        "k_norm.weight": 0.5 + torch.rand(D),  # [D]
    }
    return {k: v.to(dtype) for k, v in w.items()}


def _attention_layer(w: dict[str, torch.Tensor], x: torch.Tensor, positions: torch.Tensor,
                     theta: float, D: int, interleaved: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen3's attention layer on x [T, C] -> (causal scores [Hq, T, T], output [T, C])."""
    T = x.shape[0]
    f = {k: v.float() for k, v in w.items()}
    q = (x @ f["q_proj.weight"].T).view(T, -1, D)  # [T, Hq, D]
    k = (x @ f["k_proj.weight"].T).view(T, -1, D)  # [T, Hkv, D]
    v = (x @ f["v_proj.weight"].T).view(T, -1, D)  # [T, Hkv, D]
    q, k = rms_norm(q, f["q_norm.weight"], 1e-6), rms_norm(k, f["k_norm.weight"], 1e-6)
    rope = rope_interleaved_reference if interleaved else _rope_half_reference
    q, k = rope(q, positions, theta), rope(k, positions, theta)
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)  # [T, Hq, D]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    scores = torch.einsum("thd,shd->hts", q, k) / D**0.5  # [Hq, T, T]
    probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    out = torch.einsum("hts,shd->thd", probs, v).reshape(T, -1) @ f["o_proj.weight"].T
    return scores.masked_fill(~causal, 0.0), out  # [Hq, T, T], [T, C]


def _perm_what(w: dict[str, torch.Tensor], D: int) -> Text:
    """How a call on the layer `w` is written in a message."""
    Hq, C = w["q_proj.weight"].shape[0] // D, w["q_proj.weight"].shape[1]
    Hkv = w["k_proj.weight"].shape[0] // D
    return tr("interleave_permutation(weights of Hq={Hq}, Hkv={Hkv}, C={C}, head_dim={D})",
              Hq=Hq, Hkv=Hkv, C=C, D=D)


def _call_perm(fn: Callable, w: dict[str, torch.Tensor], D: int) -> tuple[dict, Text]:
    """The learner's converted weights and how the call is written; fails unless every weight of
    the layer comes back with its shape and dtype."""
    what = _perm_what(w, D)
    out = fn({k: v.clone() for k, v in w.items()}, D)
    expect(isinstance(out, dict), tr("{what} should return a dict of weights, got {got}",
                                     what=what, got=type(out).__name__))
    missing = [k for k in ATTN_KEYS if k not in out]
    expect(not missing, tr("{what}: the result lacks {missing}; return every weight of the "
                           "layer, changed or not", what=what, missing=missing))
    for k in ATTN_KEYS:
        expect_shape(out[k], tuple(w[k].shape), tr("{what}: {name}", what=what, name=k))
        expect(out[k].dtype == w[k].dtype, tr("{what}: {name} should stay {want}, got {got}",
                                              what=what, name=k, want=w[k].dtype,
                                              got=out[k].dtype))
    return out, what


def _perm_inputs() -> list[tuple[int, int, int, int, torch.Tensor, float]]:
    """(Hq, Hkv, D, C, positions, theta): positions of a later chunk, never from 0."""
    cases = []
    for n, (Hq, Hkv, D, C) in enumerate(PERM_SHAPES):
        T = int(torch.randint(3, 9, ()))
        positions = torch.arange(T) + int(torch.randint(1, 3000, ()))
        cases.append((Hq, Hkv, D, C, positions, THETAS[n % 2]))
    return cases


def _score_hint(w: dict, out: dict, x: torch.Tensor, positions: torch.Tensor, theta: float,
                D: int, one_head_passed: bool) -> Text:
    """What a converted layer whose scores are wrong most likely did."""
    def kept(key: str) -> bool:
        return torch.equal(out[key].float(), w[key].float())

    if kept("q_proj.weight") and kept("k_proj.weight"):
        return tr("; q_proj and k_proj came back as they were: interleaved RoPE pairs up "
                  "other dimensions than rotate-half does, so unmoved rows no longer meet their "
                  "partners")
    for a, b in (("q", "k"), ("k", "q")):
        if kept(f"{a}_proj.weight"):
            return tr("; {a}_proj.weight came back as it was while {b}_proj's rows moved: a "
                      "score multiplies dimension j of q with dimension j of k, so both need "
                      "the same reordering", a=a, b=b)
    def rows_moved(key: str) -> bool:  # the same rows (up to sign), in another order
        a, b = out[key].float().abs().sort(0).values, w[key].float().abs().sort(0).values
        return torch.equal(a, b)

    for a in ("q", "k"):  # with D = 2 nothing has to move
        if D > 2 and kept(f"{a}_norm.weight") and rows_moved(f"{a}_proj.weight"):
            return tr("; {a}_norm.weight stayed where it was while the rows of {a}_proj "
                      "moved: each of its D weights scales one dimension of a head, so it "
                      "belongs with that dimension", a=a)
    backwards, _ = _attention_layer(w, x, -positions, theta, D, interleaved=False)
    ours, _ = _attention_layer(out, x, positions, theta, D, interleaved=True)
    if torch.allclose(ours, backwards, atol=PERM_ATOL, rtol=PERM_ATOL):
        return tr("; every pair turns the opposite way (the scores are rotate-half's at minus "
                  "the positions): within each pair the two dimensions sit in swapped order")
    if one_head_passed and w["q_proj.weight"].shape[0] > D:
        return tr("; it is right with one head and wrong with several: each head is D rows of "
                  "its own, and the reordering happens inside every head")
    return tr("; the reordering does not bring the two dimensions of each rotate-half pair "
              "(i, i + D/2) to where interleaved RoPE turns them together, at frequency f_i")


def _output_hint(w: dict, out: dict) -> Text:
    """What a converted layer with right scores but a wrong output most likely did."""
    v_moved = not torch.equal(out["v_proj.weight"].float(), w["v_proj.weight"].float())
    o_moved = not torch.equal(out["o_proj.weight"].float(), w["o_proj.weight"].float())
    if v_moved and not o_moved:
        return tr("; v_proj's rows moved but o_proj's columns did not, so o_proj reads every "
                  "value dimension from the wrong place (and RoPE never touches v)")
    if o_moved and not v_moved:
        return tr("; o_proj's columns moved but v_proj's rows did not, so o_proj reads every "
                  "value dimension from the wrong place (and RoPE never touches v)")
    return tr("; v_proj and o_proj no longer fit together: column j of o_proj reads value "
              "dim j")


@exercise("ch02.interleave_permutation",
          "returns the six weights of the layer with their shapes and dtypes")
def _perm_shape(fn: Callable) -> str:
    n = 0
    for dtype in (torch.float32, torch.bfloat16):
        for Hq, Hkv, D, C in PERM_SHAPES:
            _call_perm(fn, _layer_weights(Hq, Hkv, D, C, dtype), D)
            n += 1
    return tr("{n} layers", n=n)


@exercise("ch02.interleave_permutation",
          "with interleaved RoPE, every q·k score equals rotate-half's (head dims 2 to 128, GQA)")
def _perm_scores(fn: Callable) -> str:
    one_head_passed = False
    cases = _perm_inputs()
    for Hq, Hkv, D, C, positions, theta in cases:
        for dtype in (torch.float32, torch.bfloat16):
            w = _layer_weights(Hq, Hkv, D, C, dtype)
            x = torch.randn(len(positions), C)  # [T, C]
            out, what = _call_perm(fn, w, D)
            want, _ = _attention_layer(w, x, positions, theta, D, interleaved=False)
            got, _ = _attention_layer(out, x, positions, theta, D, interleaved=True)
            if not torch.allclose(got, want, atol=PERM_ATOL, rtol=PERM_ATOL):
                worst = float((got - want).abs().max())
                raise CheckFailed(tr(
                    "{what}, positions {positions}, theta {theta:g}: the scores of the "
                    "converted layer with interleaved RoPE differ from the original's with "
                    "rotate-half by up to {worst:.3g}{hint}", what=what,
                    positions=_pos_text(positions), theta=theta, worst=worst,
                    hint=_score_hint(w, out, x, positions, theta, D, one_head_passed)))
            one_head_passed = one_head_passed or Hq == 1
    return tr("{n} layers, float32 and bfloat16 weights", n=len(cases) * 2)


@exercise("ch02.interleave_permutation",
          "with interleaved RoPE, the layer's output equals rotate-half's")
def _perm_output(fn: Callable) -> str:
    cases = _perm_inputs()
    for Hq, Hkv, D, C, positions, theta in cases:
        w = _layer_weights(Hq, Hkv, D, C)
        x = torch.randn(len(positions), C)
        out, what = _call_perm(fn, w, D)
        want_scores, want = _attention_layer(w, x, positions, theta, D, interleaved=False)
        got_scores, got = _attention_layer(out, x, positions, theta, D, interleaved=True)
        if not torch.allclose(got, want, atol=PERM_ATOL, rtol=PERM_ATOL):
            same_scores = torch.allclose(got_scores, want_scores, atol=PERM_ATOL, rtol=PERM_ATOL)
            raise CheckFailed(tr(
                "{what}, positions {positions}, theta {theta:g}: the output of the converted "
                "layer differs from the original's by up to {worst:.3g}{hint}", what=what,
                positions=_pos_text(positions), theta=theta,
                worst=float((got - want).abs().max()),
                hint=_output_hint(w, out) if same_scores else tr(
                    " (its scores differ already: see the check of the scores)")))
    return tr("{n} layers", n=len(cases))


@exercise("ch02.interleave_permutation", "leaves the given weights unchanged")
def _perm_pure(fn: Callable) -> None:
    w = _layer_weights(4, 2, 16, 32)
    before = {k: v.clone() for k, v in w.items()}
    fn(w, 16)
    changed = [k for k in ATTN_KEYS if not torch.equal(w[k], before[k])]
    expect(not changed, tr("interleave_permutation changed the weights it was given: {changed} "
                           "(the original checkpoint must stay usable)", changed=changed))
