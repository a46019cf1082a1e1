"""The math of Qwen3, written once and shared by the reference model and the engine.

Every function works on the last dimension(s) of its input, so it serves the naive
[B, T, C] layout and the engine's packed [N, C] layout alike.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for integers, exactly: -(-a // b) (floor division of the negation)."""
    return -(-a // b)


def causal_mask(q_len: int, kv_len: int,
                device: torch.device | str | None = None) -> torch.Tensor:
    """Bool [Q, K], bottom-right aligned: the Q queries are the last Q of K tokens, so query j
    (token K - Q + j of the sequence) sees keys 0 .. K - Q + j. Q = K is the full square mask
    of a prompt; Q = 1 a decode step, which sees every key; any Q <= K a chunk."""
    query_pos = kv_len - q_len + torch.arange(q_len, device=device)  # [Q]
    return torch.arange(kv_len, device=device)[None, :] <= query_pos[:, None]  # [Q, K]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim: x / sqrt(mean(x^2) + eps) * weight.

    Computed in float32 and returned in x's dtype, as Qwen3 does. x: [..., C], weight: [C].
    """
    dtype = x.dtype
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
    return weight * x32.to(dtype)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Add the residual stream, then normalise: returns (rms_norm(x + residual), x + residual).

    This is where the residual add of a pre-norm block lives in engines: the block's output is
    handed to the next norm together with the running residual. With residual=None (the first
    layer) the input itself becomes the residual.
    """
    residual = x if residual is None else x + residual
    return rms_norm(residual, weight, eps), residual


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SwiGLU activation on a merged projection: silu(gate) * up, with gate_up = [gate | up].

    gate_up: [..., 2*I] -> [..., I].
    """
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def rope_inv_freq(head_dim: int, theta: float) -> torch.Tensor:
    """Rotation speed of each of the D/2 dimension pairs: theta^(-2i/D), float32 [D/2]."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    return 1.0 / (theta**exponents)


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE tables for the given positions: (cos, sin), each float32 [T, D].

    Qwen3 uses the rotate-half convention: dimension i pairs with i + D/2, so the D/2
    frequencies are laid out twice, [f0 .. f_{D/2-1}, f0 .. f_{D/2-1}].
    """
    inv_freq = rope_inv_freq(head_dim, theta).to(positions.device)
    angles = positions.float()[:, None] * inv_freq[None, :]  # [T, D/2]
    angles = torch.cat([angles, angles], dim=-1)  # [T, D]
    return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] -> [-x2, x1] on the last dim, the 90-degree turn of every (i, i + D/2) pair."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate q or k by position: x * cos + rotate_half(x) * sin.

    x: [..., T, H, D] with cos/sin [..., T, D] (they broadcast over the head dim), computed
    in float32 and returned in x's dtype.
    """
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)  # [..., T, 1, D]
    x32 = x.float()
    return (x32 * cos + rotate_half(x32) * sin).to(x.dtype)


def softmax_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v, with a boolean mask (True = may attend).

    q: [..., T, D], k and v: [..., S, D], mask broadcastable to [..., T, S] -> [..., T, D].
    Scores are computed in float32; a row with nothing to attend to yields zeros.
    """
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale  # [..., T, S]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.matmul(probs, v.float()).to(q.dtype)
