"""Chapter 04's checks: every wrong implementation fails, every right one (in any style) passes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from minimodel.grading import check

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
