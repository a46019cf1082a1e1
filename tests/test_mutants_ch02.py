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
    (rope_returns_float32, "cast back"),
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


def test_stub_is_not_implemented():
    def stub(*args):
        raise NotImplementedError("your code here")

    for name in ("ch02.rope_tables", "ch02.apply_rope", "ch02.rope_qkv"):
        result = check(name, stub)
        assert not result.implemented and not result.passed
