"""Chapter 03's checks: every wrong implementation fails, every right one (in any style) passes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from minimodel.grading import check

# --- causal_mask ---------------------------------------------------------------------------


def mask_ok(T):
    return torch.ones(T, T, dtype=torch.bool).tril()


def mask_ok_arange(T):
    pos = torch.arange(T)
    return pos[:, None] >= pos[None, :]


def mask_ok_triu(T):
    return ~torch.ones(T, T, dtype=torch.bool).triu(1)


MASK_MUTANTS = {
    "diagonal excluded": lambda T: torch.ones(T, T, dtype=torch.bool).tril(-1),
    "one future token allowed": lambda T: torch.ones(T, T, dtype=torch.bool).tril(1),
    "transposed": lambda T: torch.ones(T, T, dtype=torch.bool).triu(),
    "float 0/1 mask": lambda T: torch.ones(T, T).tril(),
    "additive -inf mask": lambda T: torch.full((T, T), float("-inf")).triu(1),
    "all True": lambda T: torch.ones(T, T, dtype=torch.bool),
    "only the diagonal": lambda T: torch.eye(T, dtype=torch.bool),
    "fixed size": lambda T: torch.ones(4, 4, dtype=torch.bool).tril(),
    "int mask": lambda T: torch.ones(T, T, dtype=torch.long).tril(),
}


@pytest.mark.parametrize("fn", [mask_ok, mask_ok_arange, mask_ok_triu])
def test_causal_mask_correct(fn):
    assert check("ch03.causal_mask", fn).passed


@pytest.mark.parametrize("name", MASK_MUTANTS)
def test_causal_mask_mutants(name):
    assert not check("ch03.causal_mask", MASK_MUTANTS[name]).passed


# --- sliding_window_mask -------------------------------------------------------------------


def _check_window(window):
    if window < 1:
        raise ValueError(f"the window must be at least 1 token, got {window}")


def window_ok(T, window):
    _check_window(window)
    t = torch.arange(T)
    return (t[:, None] >= t[None, :]) & (t[:, None] - t[None, :] < window)


def window_ok_tril(T, window):
    _check_window(window)
    ones = torch.ones(T, T, dtype=torch.bool)
    return ones.tril() & ~ones.tril(-window)


def window_ok_loop(T, window):
    if window <= 0:
        raise ValueError("window must be positive")
    m = torch.zeros(T, T, dtype=torch.bool)
    for t in range(T):
        m[t, max(0, t - window + 1): t + 1] = True
    return m


def _window_mutant(keep):
    def fn(T, window):
        _check_window(window)
        t = torch.arange(T)
        return keep(t[:, None], t[None, :], window)

    return fn


WINDOW_MUTANTS = {
    "window + 1 keys": _window_mutant(lambda t, s, w: (s <= t) & (t - s <= w)),
    "window - 1 keys": _window_mutant(lambda t, s, w: (s <= t) & (t - s < w - 1)),
    "window ignored": _window_mutant(lambda t, s, w: s <= t),
    "not causal (both sides)": _window_mutant(lambda t, s, w: (t - s).abs() < w),
    "transposed": _window_mutant(lambda t, s, w: (t <= s) & (s - t < w)),
    "diagonal excluded": _window_mutant(lambda t, s, w: (s < t) & (t - s <= w)),
    "window from the start": _window_mutant(lambda t, s, w: (s <= t) & (s < w)),
    "float mask": lambda T, w: window_ok(T, w).float(),
    "no error for window 0 (all False rows)": lambda T, w: window_ok(T, 1) & (w > 0),
    "window 0 clamped to 1": lambda T, w: window_ok(T, max(w, 1)),
    "fixed size": lambda T, w: window_ok(8, w),
}


@pytest.mark.parametrize("fn", [window_ok, window_ok_tril, window_ok_loop])
def test_sliding_window_correct(fn):
    assert check("ch03.sliding_window_mask", fn).passed


@pytest.mark.parametrize("name", WINDOW_MUTANTS)
def test_sliding_window_mutants(name):
    assert not check("ch03.sliding_window_mask", WINDOW_MUTANTS[name]).passed


def test_sliding_window_hint_names_the_off_by_one():
    result = check("ch03.sliding_window_mask", WINDOW_MUTANTS["window + 1 keys"])
    assert any("counts the query itself" in o.message for o in result.outcomes if not o.passed)


# --- repeat_kv -----------------------------------------------------------------------------


def kv_ok(x, groups):
    return x.repeat_interleave(groups, dim=1)


def kv_ok_expand(x, groups):
    B, H, S, D = x.shape
    return x[:, :, None].expand(B, H, groups, S, D).reshape(B, H * groups, S, D)


def kv_ok_loop(x, groups):
    return torch.stack([x[:, h // groups] for h in range(x.shape[1] * groups)], dim=1)


KV_MUTANTS = {
    "repeat instead of repeat_interleave": lambda x, g: x.repeat(1, g, 1, 1),
    "tile via cat": lambda x, g: torch.cat([x] * g, dim=1),
    "repeat on the wrong dim": lambda x, g: x.repeat_interleave(g, dim=2),
    "no repeat": lambda x, g: x,
    "expand in the wrong order": lambda x, g: x[:, None].expand(
        x.shape[0], g, *x.shape[1:]).reshape(x.shape[0], -1, *x.shape[2:]),
    "casts to float32": lambda x, g: x.float().repeat_interleave(g, dim=1),
    "groups + 1": lambda x, g: x.repeat_interleave(g + 1, dim=1)[:, : x.shape[1] * g],
}


@pytest.mark.parametrize("fn", [kv_ok, kv_ok_expand, kv_ok_loop])
def test_repeat_kv_correct(fn):
    assert check("ch03.repeat_kv", fn).passed


@pytest.mark.parametrize("name", KV_MUTANTS)
def test_repeat_kv_mutants(name):
    assert not check("ch03.repeat_kv", KV_MUTANTS[name]).passed


# --- attention -----------------------------------------------------------------------------


def attn_ok(q, k, v, mask):
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1) @ v


def attn_ok_sdpa(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def attn_ok_float32(q, k, v, mask):
    """Upcasts to float32, adds an additive mask, loops over KV groups, casts back."""
    B, Hq, T, D = q.shape
    Hkv = k.shape[1]
    qg = q.float().view(B, Hkv, Hq // Hkv, T, D)  # query heads grouped by their KV head
    scores = torch.einsum("bhgtd,bhsd->bhgts", qg, k.float()) * D**-0.5
    if mask is not None:
        scores = scores + torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    out = torch.einsum("bhgts,bhsd->bhgtd", scores.softmax(-1), v.float())
    return out.reshape(B, Hq, T, D).to(q.dtype)


def _attn_mutant(scale=None, axis=-1, order="interleave", mask_mode="ok"):
    def fn(q, k, v, mask):
        D = q.shape[-1]
        groups = q.shape[1] // k.shape[1]
        if order == "interleave":
            k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        else:
            k, v = k.repeat(1, groups, 1, 1), v.repeat(1, groups, 1, 1)
        s = q @ k.transpose(-1, -2) * (D**-0.5 if scale is None else scale(D))
        if mask is not None and mask_mode != "ignore":
            m = {"ok": mask, "inverted": ~mask, "transposed": mask.T}[mask_mode]
            if m.shape != mask.shape:
                m = mask
            s = s.masked_fill(~m, float("-inf"))
        return s.softmax(axis) @ v

    return fn


def attn_additive_zero_mask(q, k, v, mask):
    """Multiplies the scores by the mask instead of filling -inf: masked keys still get weight."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s * mask
    return s.softmax(-1) @ v


def attn_returns_float32(q, k, v, mask):
    return attn_ok(q.float(), k.float(), v.float(), mask)


def attn_no_gqa(q, k, v, mask):
    """Uses only the first KV head for every query head."""
    Hq = q.shape[1]
    return attn_ok(q, k[:, :1].expand(-1, Hq, -1, -1), v[:, :1].expand(-1, Hq, -1, -1), mask)


def attn_sqrt_of_hq_dim(q, k, v, mask):
    """Scales by 1/sqrt(Hq * D) as if the heads were not split."""
    return _attn_mutant(scale=lambda D: (q.shape[1] * D) ** -0.5)(q, k, v, mask)


ATTN_MUTANTS = {
    "missing 1/sqrt(D)": _attn_mutant(scale=lambda D: 1.0),
    "scale 1/D": _attn_mutant(scale=lambda D: 1.0 / D),
    "scale sqrt(D)": _attn_mutant(scale=lambda D: math.sqrt(D)),
    "softmax over the query axis": _attn_mutant(axis=-2),
    "softmax over all keys and queries": lambda q, k, v, m: _softmax_flat(q, k, v, m),
    "K/V repeated in the wrong order": _attn_mutant(order="tile"),
    "mask inverted": _attn_mutant(mask_mode="inverted"),
    "mask transposed": _attn_mutant(mask_mode="transposed"),
    "mask ignored": _attn_mutant(mask_mode="ignore"),
    "mask multiplied into the scores": attn_additive_zero_mask,
    "returns float32 for half inputs": attn_returns_float32,
    "only the first KV head": attn_no_gqa,
    "scale 1/sqrt(Hq*D)": attn_sqrt_of_hq_dim,
}


def _softmax_flat(q, k, v, mask):
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    p = s.flatten(-2).softmax(-1).view_as(s)
    return p @ v


@pytest.mark.parametrize("fn", [attn_ok, attn_ok_sdpa, attn_ok_float32])
def test_attention_correct(fn):
    assert check("ch03.attention", fn).passed


@pytest.mark.parametrize("name", ATTN_MUTANTS)
def test_attention_mutants(name):
    assert not check("ch03.attention", ATTN_MUTANTS[name]).passed


def test_attention_hint_names_the_mistake():
    result = check("ch03.attention", ATTN_MUTANTS["missing 1/sqrt(D)"])
    assert any("1/sqrt(D)" in o.message for o in result.outcomes if not o.passed)
    result = check("ch03.attention", ATTN_MUTANTS["K/V repeated in the wrong order"])
    assert any("0,1,0,1" in o.message for o in result.outcomes if not o.passed)


def test_hints_do_not_hand_over_the_fix():
    """A hint says what is wrong and why, never the call that fixes it."""
    messages = []
    for exercise, mutants in (("ch03.causal_mask", MASK_MUTANTS), ("ch03.repeat_kv", KV_MUTANTS),
                              ("ch03.attention", ATTN_MUTANTS),
                              ("ch03.sliding_window_mask", WINDOW_MUTANTS)):
        for fn in mutants.values():
            messages += [o.message for o in check(exercise, fn).outcomes if not o.passed]
    for fix in ("tril(", "triu(", "repeat_interleave", "masked_fill(", "torch.ones("):
        assert not any(fix in m for m in messages), fix


# --- is_causal -----------------------------------------------------------------------------


def causal_ok(fn, C):
    B, T = 2, 10
    x = torch.randn(B, T, C)
    y = fn(x)
    for t in range(1, T):
        x2 = x.clone()
        x2[:, t:] = torch.randn(B, T - t, C)
        if not torch.allclose(fn(x2)[:, :t], y[:, :t], rtol=0, atol=1e-6):
            return False
    return True


def causal_ok_prefix(fn, C):
    """Runs every prefix alone: outputs of a causal fn on x[:, :t] equal fn(x)[:, :t]."""
    x = torch.randn(3, 9, C, dtype=torch.float64)
    y = fn(x)
    return all(torch.allclose(fn(x[:, :t]), y[:, :t], atol=1e-9, rtol=0) for t in range(1, 10))


def causal_ok_jacobian(fn, C):
    """d out[t] / d x[s] must be zero for every s > t."""
    T = 6
    x = torch.randn(1, T, C, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda z: fn(z), x)  # [1, T, C, 1, T, C]
    dep = jac.abs().sum(dim=(0, 2, 3, 5))  # [T_out, T_in]
    return bool((dep.triu(1) == 0).all())


def causal_ok_exact(fn, C):
    x = torch.randn(2, 12, C)
    for t in range(12):
        x2 = x.clone()
        x2[:, t:] += torch.randn_like(x2[:, t:])
        if not torch.equal(fn(x)[:, :t], fn(x2)[:, :t]):
            return False
    return True


def causal_only_last(fn, C):
    x = torch.randn(2, 10, C)
    x2 = x.clone()
    x2[:, -1] = torch.randn(2, C)
    return torch.allclose(fn(x)[:, :-1], fn(x2)[:, :-1])


def causal_only_first_output(fn, C):
    x = torch.randn(2, 10, C)
    x2 = x.clone()
    x2[:, 1:] = torch.randn(2, 9, C)
    return torch.allclose(fn(x)[:, :1], fn(x2)[:, :1])


def causal_loose(fn, C):
    x = torch.randn(2, 10, C)
    for t in range(1, 10):
        x2 = x.clone()
        x2[:, t:] = torch.randn(2, 10 - t, C)
        if not torch.allclose(fn(x)[:, :t], fn(x2)[:, :t], atol=1e-2):
            return False
    return True


def causal_one_position(fn, C):
    """Changes only the token right after each t, never the ones further ahead."""
    x = torch.randn(2, 10, C)
    for t in range(1, 10):
        x2 = x.clone()
        x2[:, t] = torch.randn(2, C)
        if not torch.allclose(fn(x)[:, t - 1], fn(x2)[:, t - 1], atol=1e-6):
            return False
    return True


def causal_short(fn, C):
    x = torch.randn(1, 2, C)
    x2 = x.clone()
    x2[:, 1] += 1
    return torch.allclose(fn(x)[:, 0], fn(x2)[:, 0], atol=1e-6)


def causal_channel0(fn, C):
    """Perturbs only channel 0 of the later tokens."""
    x = torch.randn(2, 10, C)
    for t in range(1, 10):
        x2 = x.clone()
        x2[:, t:, 0] += 1.0
        if not torch.allclose(fn(x)[:, :t], fn(x2)[:, :t], atol=1e-6):
            return False
    return True


def causal_too_strict(fn, C):
    """Also requires outputs at and after t to change: wrong for e.g. shift-right."""
    x = torch.randn(2, 10, C)
    for t in range(1, 10):
        x2 = x.clone()
        x2[:, t:] = torch.randn(2, 10 - t, C)
        y, y2 = fn(x), fn(x2)
        if not torch.allclose(y[:, :t], y2[:, :t], atol=1e-6) or torch.allclose(y[:, t], y2[:, t]):
            return False
    return True


def causal_relative(fn, C):
    """A relative tolerance of 1e-2 of the output size: misses the 1e-3 leak."""
    x = torch.randn(2, 10, C)
    for t in range(1, 10):
        x2 = x.clone()
        x2[:, t:] = torch.randn(2, 10 - t, C)
        y, y2 = fn(x)[:, :t], fn(x2)[:, :t]
        if (y - y2).abs().max() > 1e-2 * y.abs().max():
            return False
    return True


IS_CAUSAL_MUTANTS = {
    "always True": lambda fn, C: True,
    "always False": lambda fn, C: False,
    "changes only the last token": causal_only_last,
    "checks only output position 0": causal_only_first_output,
    "tolerance 1e-2 ignores small leaks": causal_loose,
    "perturbs only the next token": causal_one_position,
    "tests T=2 only": causal_short,
    "perturbs only channel 0": causal_channel0,
    "also demands later outputs change": causal_too_strict,
    "relative tolerance": causal_relative,
    "returns a tensor of bools": lambda fn, C: torch.tensor([True, False]),
}


@pytest.mark.parametrize("fn", [causal_ok, causal_ok_prefix, causal_ok_jacobian, causal_ok_exact])
def test_is_causal_correct(fn):
    assert check("ch03.is_causal", fn).passed


@pytest.mark.parametrize("name", IS_CAUSAL_MUTANTS)
def test_is_causal_mutants(name):
    assert not check("ch03.is_causal", IS_CAUSAL_MUTANTS[name]).passed


# --- predict_shapes ------------------------------------------------------------------------


def shapes_ok(B, T, C, Hq, Hkv, D, V):
    return {
        "input_ids": (B, T), "embeddings": (B, T, C), "q": (B, Hq, T, D), "k": (B, Hkv, T, D),
        "v": (B, Hkv, T, D), "scores": (B, Hq, T, T), "attn_output": (B, T, C),
        "logits": (B, T, V), "next_token_logits": (B, V),
    }


def shapes_ok_lists(B, T, C, Hq, Hkv, D, V):
    out = {k: list(v) for k, v in shapes_ok(B, T, C, Hq, Hkv, D, V).items()}
    out["note"] = "extra keys are fine"
    return out


def shapes_ok_measured(B, T, C, Hq, Hkv, D, V):
    """Measures the shapes by running the math on random tensors."""
    ids = torch.zeros(B, T, dtype=torch.long)
    x = torch.nn.Embedding(V, C)(ids)
    q = torch.nn.Linear(C, Hq * D)(x).view(B, T, Hq, D).transpose(1, 2)
    k = torch.nn.Linear(C, Hkv * D)(x).view(B, T, Hkv, D).transpose(1, 2)
    scores = q @ k.repeat_interleave(Hq // Hkv, 1).transpose(-1, -2)
    o = torch.nn.Linear(Hq * D, C)((scores.softmax(-1) @ q).transpose(1, 2).reshape(B, T, -1))
    logits = torch.nn.Linear(C, V)(o)
    return {
        "input_ids": ids.shape, "embeddings": x.shape, "q": q.shape, "k": k.shape,
        "v": k.shape, "scores": scores.shape, "attn_output": o.shape, "logits": logits.shape,
        "next_token_logits": logits[:, -1].shape,
    }


def _shapes_with(**changes):
    def fn(B, T, C, Hq, Hkv, D, V):
        out = shapes_ok(B, T, C, Hq, Hkv, D, V)
        loc = {"B": B, "T": T, "C": C, "Hq": Hq, "Hkv": Hkv, "D": D, "V": V}
        for key, expr in changes.items():
            out[key] = eval(expr, {}, loc)
        return out

    return fn


SHAPE_MUTANTS = {
    "forgets GQA for k/v": _shapes_with(k="(B, Hq, T, D)", v="(B, Hq, T, D)"),
    "C for Hq*D after o_proj": _shapes_with(attn_output="(B, T, Hq * D)"),
    "head dim C // Hq": _shapes_with(q="(B, Hq, T, C // Hq)", k="(B, Hkv, T, C // Hq)",
                                     v="(B, Hkv, T, C // Hq)"),
    "scores with D": _shapes_with(scores="(B, Hq, T, D)"),
    "scores with Hkv heads": _shapes_with(scores="(B, Hkv, T, T)"),
    "next token keeps T": _shapes_with(next_token_logits="(B, 1, V)"),
    "[B, T, H, D] layout": _shapes_with(q="(B, T, Hq, D)", k="(B, T, Hkv, D)",
                                        v="(B, T, Hkv, D)"),
    "drops the batch dim": _shapes_with(input_ids="(T,)", embeddings="(T, C)"),
    "logits over C": _shapes_with(logits="(B, T, C)"),
    "hard-coded seed table": lambda *a: shapes_ok(1, 3, 32, 4, 2, 8, 64),
    "batch fixed at 1 (the chapter's B)": lambda B, *a: shapes_ok(1, *a),
    "B and T swapped": lambda B, T, *a: shapes_ok(T, B, *a),
    "missing key": lambda *a: {k: v for k, v in shapes_ok(*a).items() if k != "scores"},
    "tensors instead of shapes": lambda *a: {k: torch.zeros(v) for k, v in shapes_ok(*a).items()},
}


@pytest.mark.parametrize("fn", [shapes_ok, shapes_ok_lists, shapes_ok_measured])
def test_predict_shapes_correct(fn):
    assert check("ch03.predict_shapes", fn).passed


@pytest.mark.parametrize("name", SHAPE_MUTANTS)
def test_predict_shapes_mutants(name):
    assert not check("ch03.predict_shapes", SHAPE_MUTANTS[name]).passed
