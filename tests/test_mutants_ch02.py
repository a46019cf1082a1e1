"""Chapter 02's checks: every wrong RoPE learners write fails, every right one passes."""

from __future__ import annotations

import math

import pytest
import torch

from minimodel import ops
from minimodel.grading import check

# --- ch02.rope_tables ----------------------------------------------------------------------


def tables_solution(positions, head_dim, theta):
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)  # [D/2]
    angles = positions.float()[:, None] * inv_freq  # [T, D/2]
    angles = torch.cat([angles, angles], dim=-1)  # [T, D]
    return angles.cos(), angles.sin()


def tables_float64(positions, head_dim, theta):
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    angles = torch.outer(positions.double(), theta ** (-2 * i / head_dim)).repeat(1, 2)
    return angles.cos().float(), angles.sin().float()


def tables_exp_log(positions, head_dim, theta):
    i = torch.arange(head_dim // 2)
    inv_freq = torch.exp(-math.log(theta) * 2 * i / head_dim)
    angles = torch.einsum("t,f->tf", positions.to(torch.float32), inv_freq)
    return torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)


def tables_keeps_float64(positions, head_dim, theta):  # float64 out: allowed
    i = torch.arange(0, head_dim, 2, dtype=torch.float64)
    angles = positions.double()[:, None] / theta ** (i / head_dim)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def tables_package(positions, head_dim, theta):
    return ops.rope_cos_sin(positions, head_dim, theta)


CORRECT_TABLES = [
    tables_solution, tables_float64, tables_exp_log, tables_keeps_float64, tables_package,
]


def _angles(positions, head_dim, theta, exponent=2.0):
    i = torch.arange(head_dim // 2, dtype=torch.float32)
    return positions.float()[:, None] * theta ** (-exponent * i / head_dim)  # [T, D/2]


def tables_interleaved(positions, head_dim, theta):  # RoFormer / GPT-J pairs (2i, 2i+1)
    a = _angles(positions, head_dim, theta).repeat_interleave(2, dim=-1)
    return a.cos(), a.sin()


def tables_exponent_i_over_d(positions, head_dim, theta):
    a = _angles(positions, head_dim, theta, exponent=1.0).repeat(1, 2)
    return a.cos(), a.sin()


def tables_positive_exponent(positions, head_dim, theta):
    a = _angles(positions, head_dim, theta, exponent=-2.0).repeat(1, 2)
    return a.cos(), a.sin()


def tables_integer_division(positions, head_dim, theta):  # arange(0, D, 2) // D == 0
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2) // head_dim)
    a = (positions[:, None] * inv_freq).float().repeat(1, 2)
    return a.cos(), a.sin()


def tables_linspace(positions, head_dim, theta):  # exponents 0..1 inclusive
    inv_freq = theta ** -torch.linspace(0, 1, head_dim // 2)
    a = (positions.float()[:, None] * inv_freq).repeat(1, 2)
    return a.cos(), a.sin()


def tables_theta_10000(positions, head_dim, theta):  # the RoFormer default, hard-coded
    return tables_solution(positions, head_dim, 10_000.0)


def tables_theta_1e6(positions, head_dim, theta):  # Qwen3's value, hard-coded
    return tables_solution(positions, head_dim, 1_000_000.0)


def tables_arange(positions, head_dim, theta):  # positions ignored
    return tables_solution(torch.arange(len(positions)), head_dim, theta)


def tables_one_ahead(positions, head_dim, theta):
    return tables_solution(positions + 1, head_dim, theta)


def tables_swapped(positions, head_dim, theta):
    cos, sin = tables_solution(positions, head_dim, theta)
    return sin, cos


def tables_negated_half(positions, head_dim, theta):  # puts rotate_half's sign in the table
    cos, sin = tables_solution(positions, head_dim, theta)
    h = head_dim // 2
    return cos, torch.cat([-sin[:, :h], sin[:, h:]], dim=-1)


def tables_half_width(positions, head_dim, theta):  # forgets to lay the angles out twice
    a = _angles(positions, head_dim, theta)
    return a.cos(), a.sin()


def tables_bfloat16(positions, head_dim, theta):
    cos, sin = tables_solution(positions, head_dim, theta)
    return cos.bfloat16(), sin.bfloat16()


def tables_angles_in_bfloat16(positions, head_dim, theta):  # positions lose digits
    i = torch.arange(0, head_dim, 2, dtype=torch.float32)
    inv = (1.0 / theta ** (i / head_dim)).bfloat16()
    a = (positions.bfloat16()[:, None] * inv).float().repeat(1, 2)
    return a.cos(), a.sin()


def tables_degrees(positions, head_dim, theta):  # converts to radians twice
    a = torch.deg2rad(_angles(positions, head_dim, theta)).repeat(1, 2)
    return a.cos(), a.sin()


WRONG_TABLES = [
    tables_interleaved, tables_exponent_i_over_d, tables_positive_exponent,
    tables_integer_division, tables_linspace, tables_theta_10000, tables_theta_1e6,
    tables_arange, tables_one_ahead, tables_swapped, tables_negated_half, tables_half_width,
    tables_bfloat16, tables_angles_in_bfloat16, tables_degrees,
]


@pytest.mark.parametrize("fn", CORRECT_TABLES, ids=lambda f: f.__name__)
def test_tables_correct_passes(fn):
    result = check("ch02.rope_tables", fn)
    assert result.passed, str(result)


@pytest.mark.parametrize("fn", WRONG_TABLES, ids=lambda f: f.__name__)
def test_tables_mutant_fails(fn):
    assert not check("ch02.rope_tables", fn).passed


@pytest.mark.parametrize("fn, words", [
    (tables_interleaved, "i + D/2"),
    (tables_exponent_i_over_d, "exponent i/D"),
    (tables_arange, "ignores the positions"),
    (tables_swapped, "swaps cos and sin"),
    (tables_one_ahead, "one position ahead"),
])
def test_tables_hints(fn, words):
    assert words in str(check("ch02.rope_tables", fn))


# --- ch02.apply_rope -----------------------------------------------------------------------


def rope_solution(x, positions, theta):
    cos, sin = tables_solution(positions, x.shape[-1], theta)  # [T, D]
    cos, sin = cos[:, None, :], sin[:, None, :]  # [T, 1, D]
    x1, x2 = x.float().chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x.float() * cos + rotated * sin).to(x.dtype)


def rope_complex(x, positions, theta):  # (x_i + i x_{i+D/2}) * e^{i angle}
    D = x.shape[-1]
    h = D // 2
    a = _angles(positions, D, theta)[:, None, :]  # [T, 1, D/2]
    z = torch.complex(x[..., :h].float(), x[..., h:].float()) * torch.polar(torch.ones_like(a), a)
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)


def rope_matrix(x, positions, theta):  # one explicit D x D rotation per position
    T, H, D = x.shape
    h = D // 2
    a = _angles(positions, D, theta)  # [T, D/2]
    R = torch.zeros(T, D, D)
    idx = torch.arange(h)
    R[:, idx, idx] = a.cos()
    R[:, idx + h, idx + h] = a.cos()
    R[:, idx, idx + h] = -a.sin()
    R[:, idx + h, idx] = a.sin()
    return torch.einsum("tij,thj->thi", R, x.float()).to(x.dtype)


def rope_native_dtype(x, positions, theta):  # float32 tables, arithmetic in x's dtype
    cos, sin = tables_solution(positions, x.shape[-1], theta)
    cos, sin = cos.to(x.dtype)[:, None], sin.to(x.dtype)[:, None]
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def rope_package(x, positions, theta):
    return ops.apply_rope(x, *ops.rope_cos_sin(positions, x.shape[-1], theta))


def rope_pairs(x, positions, theta):  # rotate each (x1, x2) half-pair with explicit formulas
    a = _angles(positions, x.shape[-1], theta)[:, None, :]
    x1, x2 = x.float().chunk(2, dim=-1)
    c, s = a.cos(), a.sin()
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).to(x.dtype)


CORRECT_ROPE = [rope_solution, rope_complex, rope_matrix, rope_native_dtype, rope_package,
                rope_pairs]


def _with_tables(tables):
    def rope(x, positions, theta):
        cos, sin = tables(positions, x.shape[-1], theta)
        x1, x2 = x.float().chunk(2, dim=-1)
        out = x.float() * cos.float()[:, None] + torch.cat([-x2, x1], -1) * sin.float()[:, None]
        return out.to(x.dtype)

    rope.__name__ = "rope_with_" + tables.__name__
    return rope


def rope_interleaved(x, positions, theta):  # GPT-J style: rotate neighbours
    cos, sin = tables_interleaved(positions, x.shape[-1], theta)
    x1, x2 = x.float()[..., 0::2], x.float()[..., 1::2]
    rotated = torch.stack([-x2, x1], dim=-1).flatten(-2)
    return (x.float() * cos[:, None] + rotated * sin[:, None]).to(x.dtype)


def rope_sin_flipped(x, positions, theta):
    cos, sin = tables_solution(positions, x.shape[-1], theta)
    x1, x2 = x.float().chunk(2, dim=-1)
    return (x.float() * cos[:, None] - torch.cat([-x2, x1], -1) * sin[:, None]).to(x.dtype)


def rope_rotate_half_swapped(x, positions, theta):  # [x2, -x1] instead of [-x2, x1]
    cos, sin = tables_solution(positions, x.shape[-1], theta)
    x1, x2 = x.float().chunk(2, dim=-1)
    return (x.float() * cos[:, None] + torch.cat([x2, -x1], -1) * sin[:, None]).to(x.dtype)


def rope_returns_float32(x, positions, theta):
    return rope_solution(x, positions, theta).float()


def rope_bfloat16_angles(x, positions, theta):  # the tables built in x's dtype
    D = x.shape[-1]
    inv = (1.0 / theta ** (torch.arange(0, D, 2).float() / D)).to(x.dtype)
    a = (positions.to(x.dtype)[:, None] * inv).repeat(1, 2)
    cos, sin = a.cos()[:, None], a.sin()[:, None]
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


def rope_over_heads(x, positions, theta):  # rotates across the head axis
    y = rope_solution(x.transpose(1, 2), positions, theta) if x.shape[1] % 2 == 0 else x
    return y.transpose(1, 2) if x.shape[1] % 2 == 0 else x


def rope_first_half_only(x, positions, theta):  # writes the rotated x1 and keeps x2
    a = _angles(positions, x.shape[-1], theta)[:, None, :]
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * a.cos() - x2 * a.sin(), x2], dim=-1).to(x.dtype)


def rope_identity(x, positions, theta):
    return x.clone()


def rope_in_place(x, positions, theta):
    out = rope_solution(x, positions, theta)
    x.copy_(out)
    return x


def rope_add_sinusoid(x, positions, theta):  # the original Transformer's additive encoding
    cos, sin = tables_solution(positions, x.shape[-1], theta)
    h = x.shape[-1] // 2
    pe = torch.cat([sin[:, :h], cos[:, :h]], dim=-1)[:, None]
    return (x.float() + pe).to(x.dtype)


WRONG_ROPE = [
    rope_interleaved, rope_sin_flipped, rope_rotate_half_swapped, rope_returns_float32,
    rope_bfloat16_angles, rope_over_heads, rope_first_half_only, rope_identity, rope_in_place,
    rope_add_sinusoid,
    *(_with_tables(t) for t in (
        tables_interleaved, tables_exponent_i_over_d, tables_theta_10000, tables_theta_1e6,
        tables_arange, tables_one_ahead, tables_swapped, tables_negated_half,
        tables_integer_division, tables_linspace, tables_angles_in_bfloat16,
    )),
]


@pytest.mark.parametrize("fn", CORRECT_ROPE, ids=lambda f: f.__name__)
def test_rope_correct_passes(fn):
    result = check("ch02.apply_rope", fn)
    assert result.passed, str(result)


@pytest.mark.parametrize("fn", WRONG_ROPE, ids=lambda f: f.__name__)
def test_rope_mutant_fails(fn):
    assert not check("ch02.apply_rope", fn).passed


@pytest.mark.parametrize("fn, words", [
    (rope_interleaved, "i + D/2"),
    (rope_sin_flipped, "rotates the wrong way"),
    (rope_returns_float32, "like x"),
    (rope_identity, "unrotated"),
])
def test_rope_hints(fn, words):
    assert words in str(check("ch02.apply_rope", fn))


# --- ch02.rope_qkv -------------------------------------------------------------------------


def qkv_solution(q, k, v, positions, theta):
    return rope_solution(q, positions, theta), rope_solution(k, positions, theta), v


def qkv_shared_tables(q, k, v, positions, theta):  # one table for both, via the package
    cos, sin = ops.rope_cos_sin(positions, q.shape[-1], theta)
    return ops.apply_rope(q, cos, sin), ops.apply_rope(k, cos, sin), v.clone()


def qkv_concat_heads(q, k, v, positions, theta):  # rotate q and k in one call
    Hq = q.shape[1]
    qk = rope_complex(torch.cat([q, k], dim=1), positions, theta)
    return qk[:, :Hq], qk[:, Hq:], v


CORRECT_QKV = [qkv_solution, qkv_shared_tables, qkv_concat_heads]


def qkv_rotates_v(q, k, v, positions, theta):
    return tuple(rope_solution(t, positions, theta) for t in (q, k, v))


def qkv_only_q(q, k, v, positions, theta):
    return rope_solution(q, positions, theta), k, v


def qkv_k_from_zero(q, k, v, positions, theta):  # keys counted from 0 while queries are not
    return (rope_solution(q, positions, theta),
            rope_solution(k, torch.arange(len(positions)), theta), v)


def qkv_repeated_kv(q, k, v, positions, theta):  # expands GQA heads too early
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    return rope_solution(q, positions, theta), rope_solution(k, positions, theta), v


def qkv_k_opposite(q, k, v, positions, theta):  # turns k the other way, "to undo q"
    return rope_solution(q, positions, theta), rope_sin_flipped(k, positions, theta), v


def qkv_float32(q, k, v, positions, theta):
    return (rope_solution(q, positions, theta).float(), rope_solution(k, positions, theta).float(),
            v.float())


def qkv_v_scaled(q, k, v, positions, theta):  # "normalises" v
    return (rope_solution(q, positions, theta), rope_solution(k, positions, theta),
            v / v.shape[-1] ** 0.5)


WRONG_QKV = [qkv_rotates_v, qkv_only_q, qkv_k_from_zero, qkv_repeated_kv, qkv_k_opposite,
             qkv_float32, qkv_v_scaled]


@pytest.mark.parametrize("fn", CORRECT_QKV, ids=lambda f: f.__name__)
def test_qkv_correct_passes(fn):
    result = check("ch02.rope_qkv", fn)
    assert result.passed, str(result)


@pytest.mark.parametrize("fn", WRONG_QKV, ids=lambda f: f.__name__)
def test_qkv_mutant_fails(fn):
    assert not check("ch02.rope_qkv", fn).passed


# --- ch02.rope_interleaved -----------------------------------------------------------------


def interleaved_solution(x, positions, theta):
    D = x.shape[-1]
    a = _angles(positions, D, theta).repeat_interleave(2, dim=-1)[:, None, :]  # [T, 1, D]
    even, odd = x.float()[..., 0::2], x.float()[..., 1::2]
    turned = torch.stack([-odd, even], dim=-1).flatten(-2)  # [-x1, x0, -x3, x2, ...]
    return (x.float() * a.cos() + turned * a.sin()).to(x.dtype)


def interleaved_complex(x, positions, theta):  # Meta's Llama code: view_as_complex
    T, H, D = x.shape
    a = _angles(positions, D, theta)[:, None, :]  # [T, 1, D/2]
    z = torch.view_as_complex(x.float().reshape(T, H, D // 2, 2).contiguous())
    z = z * torch.polar(torch.ones_like(a), a)
    return torch.view_as_real(z).reshape(T, H, D).to(x.dtype)


def interleaved_via_half(x, positions, theta):  # reorder, use rotate-half, reorder back
    D = x.shape[-1]
    to_half = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])  # 0 2 4 .. 1 3 5 ..
    back = torch.argsort(to_half)
    y = ops.apply_rope(x[..., to_half], *ops.rope_cos_sin(positions, D, theta))
    return y[..., back]


def interleaved_loop(x, positions, theta):  # one pair at a time, in float64
    D = x.shape[-1]
    out = x.double().clone()
    a = _angles(positions, D, theta).double()[:, None]  # [T, 1, D/2]
    for i in range(D // 2):
        x0, x1 = x[..., 2 * i].double(), x[..., 2 * i + 1].double()
        c, s = a[..., i].cos(), a[..., i].sin()
        out[..., 2 * i], out[..., 2 * i + 1] = x0 * c - x1 * s, x0 * s + x1 * c
    return out.to(x.dtype)


CORRECT_INTERLEAVED = [interleaved_solution, interleaved_complex, interleaved_via_half,
                       interleaved_loop]


def interleaved_is_half(x, positions, theta):  # Qwen3's own convention
    return rope_solution(x, positions, theta)


def interleaved_half_table(x, positions, theta):  # neighbours, but the table of rotate-half
    cos, sin = tables_solution(positions, x.shape[-1], theta)
    even, odd = x.float()[..., 0::2], x.float()[..., 1::2]
    turned = torch.stack([-odd, even], dim=-1).flatten(-2)
    return (x.float() * cos[:, None] + turned * sin[:, None]).to(x.dtype)


def interleaved_wrong_way(x, positions, theta):  # [x1, -x0] instead of [-x1, x0]
    D = x.shape[-1]
    a = _angles(positions, D, theta).repeat_interleave(2, dim=-1)[:, None, :]
    even, odd = x.float()[..., 0::2], x.float()[..., 1::2]
    turned = torch.stack([odd, -even], dim=-1).flatten(-2)
    return (x.float() * a.cos() + turned * a.sin()).to(x.dtype)


def interleaved_concatenated(x, positions, theta):  # rotates the pairs, writes them as halves
    D = x.shape[-1]
    a = _angles(positions, D, theta)[:, None, :]
    even, odd = x.float()[..., 0::2], x.float()[..., 1::2]
    c, s = a.cos(), a.sin()
    return torch.cat([even * c - odd * s, even * s + odd * c], dim=-1).to(x.dtype)


def interleaved_per_dim_frequency(x, positions, theta):  # a frequency for every dim, not pair
    D = x.shape[-1]
    a = positions.float()[:, None, None] * theta ** (-torch.arange(D).float() / D)  # [T, 1, D]
    even, odd = x.float()[..., 0::2], x.float()[..., 1::2]
    turned = torch.stack([-odd, even], dim=-1).flatten(-2)
    return (x.float() * a.cos() + turned * a.sin()).to(x.dtype)


def interleaved_16bit(x, positions, theta):  # the whole computation in x's dtype
    D = x.shape[-1]
    a = (positions.to(x.dtype)[:, None] * (theta ** (-torch.arange(0, D, 2).float() / D))
         .to(x.dtype)).repeat_interleave(2, dim=-1)[:, None, :]
    even, odd = x[..., 0::2], x[..., 1::2]
    return x * a.cos() + torch.stack([-odd, even], dim=-1).flatten(-2) * a.sin()


def interleaved_in_place(x, positions, theta):
    x.copy_(interleaved_solution(x, positions, theta))
    return x


def interleaved_float32_out(x, positions, theta):
    return interleaved_solution(x.float(), positions, theta)


WRONG_INTERLEAVED = [
    interleaved_is_half, interleaved_half_table, interleaved_wrong_way, interleaved_concatenated,
    interleaved_per_dim_frequency, interleaved_16bit, interleaved_in_place,
    interleaved_float32_out, rope_identity,
]


@pytest.mark.parametrize("fn", CORRECT_INTERLEAVED, ids=lambda f: f.__name__)
def test_interleaved_correct_passes(fn):
    result = check("ch02.rope_interleaved", fn)
    assert result.passed, str(result)


@pytest.mark.parametrize("fn", WRONG_INTERLEAVED, ids=lambda f: f.__name__)
def test_interleaved_mutant_fails(fn):
    assert not check("ch02.rope_interleaved", fn).passed


@pytest.mark.parametrize("fn, words", [
    (interleaved_is_half, "rotate-half"),
    (interleaved_half_table, "laid out as for rotate-half"),
    (interleaved_wrong_way, "wrong way"),
    (interleaved_16bit, "precision is lost"),
])
def test_interleaved_hints(fn, words):
    assert words in str(check("ch02.rope_interleaved", fn))


def test_package_rope_is_not_interleaved():
    assert not check("ch02.rope_interleaved", rope_package).passed
    assert not check("ch02.apply_rope", interleaved_solution).passed


# --- ch02.interleave_permutation -----------------------------------------------------------

QK = ("q", "k")


def _to_interleaved(head_dim):
    """Row j of an interleaved head reads row perm[j] of the rotate-half head."""
    h = head_dim // 2
    return torch.stack([torch.arange(h), torch.arange(h) + h], dim=-1).flatten()  # 0 h 1 h+1 ..


def _permute_rows(w, perm, head_dim):
    rows, cols = w.shape
    return w.view(rows // head_dim, head_dim, cols)[:, perm].reshape(rows, cols)


def perm_solution(weights, head_dim):
    perm = _to_interleaved(head_dim)
    out = dict(weights)
    for a in QK:
        out[f"{a}_proj.weight"] = _permute_rows(weights[f"{a}_proj.weight"], perm, head_dim)
        out[f"{a}_norm.weight"] = weights[f"{a}_norm.weight"][perm]
    return out


def perm_transpose_view(weights, head_dim):  # the weight converters' view/transpose idiom
    def convert(w):
        rows, cols = w.shape
        return w.view(rows // head_dim, 2, head_dim // 2, cols).transpose(1, 2).reshape(rows, cols)

    out = {k: v.clone() for k, v in weights.items()}
    for a in QK:
        out[f"{a}_proj.weight"] = convert(weights[f"{a}_proj.weight"])
        out[f"{a}_norm.weight"] = weights[f"{a}_norm.weight"].view(2, -1).T.reshape(-1)
    return out


def perm_loop(weights, head_dim):  # row by row, head by head
    h = head_dim // 2
    out = {k: v.clone() for k, v in weights.items()}
    for a in QK:
        w, n = weights[f"{a}_proj.weight"], weights[f"{a}_norm.weight"]
        new_w, new_n = out[f"{a}_proj.weight"], out[f"{a}_norm.weight"]
        for head in range(w.shape[0] // head_dim):
            base = head * head_dim
            for i in range(h):
                new_w[base + 2 * i] = w[base + i]
                new_w[base + 2 * i + 1] = w[base + i + h]
        for i in range(h):
            new_n[2 * i], new_n[2 * i + 1] = n[i], n[i + h]
    return out


def perm_matrix(weights, head_dim):  # a permutation matrix per head, block-diagonal
    P = torch.eye(head_dim)[_to_interleaved(head_dim)]  # [D, D]
    out = dict(weights)
    for a in QK:
        w = weights[f"{a}_proj.weight"]
        H = w.shape[0] // head_dim
        big = torch.block_diag(*[P] * H).to(w.dtype)
        out[f"{a}_proj.weight"] = big @ w
        out[f"{a}_norm.weight"] = (P @ weights[f"{a}_norm.weight"].float()).to(w.dtype)
    return out


def perm_also_v_and_o(weights, head_dim):  # moves v's dims too, and o_proj's columns with them
    out = perm_solution(weights, head_dim)
    perm = _to_interleaved(head_dim)
    out["v_proj.weight"] = _permute_rows(weights["v_proj.weight"], perm, head_dim)
    o = weights["o_proj.weight"]
    out["o_proj.weight"] = _permute_rows(o.T.contiguous(), perm, head_dim).T.contiguous()
    return out


def perm_with_sign_flips(weights, head_dim):  # pair (a, b) stored as (b, -a): turned by 90°
    h = head_dim // 2
    perm = torch.stack([torch.arange(h) + h, torch.arange(h)], dim=-1).flatten()
    sign = torch.tensor([1.0, -1.0]).repeat(h)  # [D]
    out = dict(weights)
    for a in QK:
        w = weights[f"{a}_proj.weight"]
        rows, cols = w.shape
        out[f"{a}_proj.weight"] = (w.view(-1, head_dim, cols)[:, perm]
                                   * sign[None, :, None].to(w.dtype)).reshape(rows, cols)
        out[f"{a}_norm.weight"] = weights[f"{a}_norm.weight"][perm]
    return out


CORRECT_PERM = [perm_solution, perm_transpose_view, perm_loop, perm_matrix, perm_also_v_and_o,
                perm_with_sign_flips]


def perm_inverse(weights, head_dim):  # the permutation the other way round (interleaved -> half)
    inv = torch.argsort(_to_interleaved(head_dim))
    out = dict(weights)
    for a in QK:
        out[f"{a}_proj.weight"] = _permute_rows(weights[f"{a}_proj.weight"], inv, head_dim)
        out[f"{a}_norm.weight"] = weights[f"{a}_norm.weight"][inv]
    return out


def perm_swapped_in_pair(weights, head_dim):  # i + D/2 -> 2i and i -> 2i + 1
    h = head_dim // 2
    perm = torch.stack([torch.arange(h) + h, torch.arange(h)], dim=-1).flatten()
    out = dict(weights)
    for a in QK:
        out[f"{a}_proj.weight"] = _permute_rows(weights[f"{a}_proj.weight"], perm, head_dim)
        out[f"{a}_norm.weight"] = weights[f"{a}_norm.weight"][perm]
    return out


def perm_forgets_k(weights, head_dim):
    out = perm_solution(weights, head_dim)
    out["k_proj.weight"], out["k_norm.weight"] = weights["k_proj.weight"], weights["k_norm.weight"]
    return out


def perm_forgets_q(weights, head_dim):
    out = perm_solution(weights, head_dim)
    out["q_proj.weight"], out["q_norm.weight"] = weights["q_proj.weight"], weights["q_norm.weight"]
    return out


def perm_forgets_norms(weights, head_dim):
    out = perm_solution(weights, head_dim)
    out["q_norm.weight"], out["k_norm.weight"] = weights["q_norm.weight"], weights["k_norm.weight"]
    return out


def perm_permutes_v(weights, head_dim):  # "q, k and v are all projections": o_proj left alone
    out = perm_solution(weights, head_dim)
    out["v_proj.weight"] = _permute_rows(weights["v_proj.weight"], _to_interleaved(head_dim),
                                         head_dim)
    return out


def perm_across_heads(weights, head_dim):  # treats all H*D rows as one big head
    out = dict(weights)
    for a in QK:
        w = weights[f"{a}_proj.weight"]
        out[f"{a}_proj.weight"] = w[_to_interleaved(w.shape[0])]
        out[f"{a}_norm.weight"] = weights[f"{a}_norm.weight"][_to_interleaved(head_dim)]
    return out


def perm_columns(weights, head_dim):  # permutes the input features instead of the rows
    out = dict(weights)
    for a in QK:
        w = weights[f"{a}_proj.weight"]
        C = w.shape[1]
        out[f"{a}_proj.weight"] = w[:, _to_interleaved(C)] if C % 2 == 0 else w
    return out


def perm_identity(weights, head_dim):
    return dict(weights)


def perm_in_place(weights, head_dim):
    out = perm_solution(weights, head_dim)
    for k in out:
        weights[k].copy_(out[k])
    return weights


def perm_only_q_and_k_keys(weights, head_dim):  # returns just what it changed
    out = perm_solution(weights, head_dim)
    return {k: out[k] for k in ("q_proj.weight", "k_proj.weight", "q_norm.weight",
                                "k_norm.weight")}


def perm_float32_out(weights, head_dim):
    return {k: v.float() for k, v in perm_solution(weights, head_dim).items()}


WRONG_PERM = [
    perm_inverse, perm_swapped_in_pair, perm_forgets_k, perm_forgets_q, perm_forgets_norms,
    perm_permutes_v, perm_across_heads, perm_columns, perm_identity, perm_in_place,
    perm_only_q_and_k_keys, perm_float32_out,
]


@pytest.mark.parametrize("fn", CORRECT_PERM, ids=lambda f: f.__name__)
def test_perm_correct_passes(fn):
    result = check("ch02.interleave_permutation", fn)
    assert result.passed, str(result)


@pytest.mark.parametrize("fn", WRONG_PERM, ids=lambda f: f.__name__)
def test_perm_mutant_fails(fn):
    assert not check("ch02.interleave_permutation", fn).passed


@pytest.mark.parametrize("fn, words", [
    (perm_forgets_k, "k_proj.weight came back as it was"),
    (perm_forgets_q, "q_proj.weight came back as it was"),
    (perm_forgets_norms, "q_norm.weight stayed where it was"),
    (perm_swapped_in_pair, "opposite way"),
    (perm_across_heads, "with one head"),
    (perm_permutes_v, "o_proj's columns did not"),
    (perm_identity, "came back as they were"),
])
def test_perm_hints(fn, words):
    assert words in str(check("ch02.interleave_permutation", fn))


def test_perm_hints_do_not_hand_over_the_permutation():
    for fn in WRONG_PERM:
        text = str(check("ch02.interleave_permutation", fn))
        assert "2i + 1" not in text and "view(" not in text and "transpose" not in text


def test_converted_bard_layer_with_the_learners_pieces():
    """The two exercises compose: interleaved RoPE on converted weights is rotate-half."""
    from minimodel.grading.ch02.permutation import _attention_layer, _layer_weights

    w = _layer_weights(4, 2, 16, 32)
    x, positions = torch.randn(5, 32), torch.arange(5) + 40
    _, want = _attention_layer(w, x, positions, 1e6, 16, interleaved=False)
    _, got = _attention_layer(perm_solution(w, 16), x, positions, 1e6, 16, interleaved=True)
    assert torch.allclose(got, want, atol=1e-5)


def test_stub_is_not_implemented():
    def stub(*args):
        raise NotImplementedError("your code here")

    for name in ("ch02.rope_tables", "ch02.apply_rope", "ch02.rope_qkv", "ch02.rope_interleaved",
                 "ch02.interleave_permutation"):
        result = check(name, stub)
        assert not result.implemented and not result.passed
