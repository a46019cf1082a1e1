"""Qwen3 written the plain way: [B, T, C] tensors, an explicit causal mask, no KV cache.

Names of modules and parameters match the Hugging Face checkpoint, so weights load by name.
Shapes: B batch, T tokens, C hidden, Hq/Hkv query/KV heads, D head dim, V vocab.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from minimodel.config import Qwen3Config
from minimodel.hub import resolve_model
from minimodel.layers.layernorm import RMSNorm
from minimodel.ops import apply_rope, rope_cos_sin, silu_and_mul, softmax_attention
from minimodel.weights import build_model


def causal_mask(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Bool [T, T], True where query t may attend to key s (s <= t)."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """[B, Hkv, S, D] -> [B, Hkv*groups, S, D]: query head h reads KV head h // groups."""
    return x.repeat_interleave(groups, dim=1)


class Qwen3Attention(nn.Module):
    """Multi-head attention with GQA, QK-norm and RoPE."""

    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.cfg = cfg
        C, D = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(C, cfg.q_size, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(C, cfg.kv_size, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(C, cfg.kv_size, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(cfg.q_size, C, bias=False)
        self.q_norm = RMSNorm(D, cfg.rms_norm_eps)  # QK-norm: normalise each head's q and k
        self.k_norm = RMSNorm(D, cfg.rms_norm_eps)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """x: [B, T, C]; cos/sin: [B, T, D]; mask: Bool [B, 1, T, T] -> [B, T, C]."""
        B, T, _ = x.shape
        Hq, Hkv, D = self.cfg.num_attention_heads, self.cfg.num_key_value_heads, self.cfg.head_dim
        q = self.q_norm(self.q_proj(x).view(B, T, Hq, D))  # [B, T, Hq, D]
        k = self.k_norm(self.k_proj(x).view(B, T, Hkv, D))  # [B, T, Hkv, D]
        v = self.v_proj(x).view(B, T, Hkv, D)  # [B, T, Hkv, D]; V gets no RoPE
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, D]
        k = repeat_kv(k, self.cfg.num_kv_groups)  # [B, Hq, T, D]
        v = repeat_kv(v, self.cfg.num_kv_groups)
        out = softmax_attention(q, k, v, mask, scale=1.0 / math.sqrt(D))  # [B, Hq, T, D]
        return self.o_proj(out.transpose(1, 2).reshape(B, T, Hq * D))


class Qwen3MLP(nn.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        C, I = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(C, I, bias=False)
        self.up_proj = nn.Linear(C, I, bias=False)
        self.down_proj = nn.Linear(I, C, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = torch.cat([self.gate_proj(x), self.up_proj(x)], dim=-1)  # [..., 2I]
        return self.down_proj(silu_and_mul(gate_up))


class Qwen3DecoderLayer(nn.Module):
    """Pre-norm block with the residual adds written out: x + attn(norm(x)), then + mlp."""

    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Qwen3Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = Qwen3MLP(cfg)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x


class Qwen3Model(nn.Module):
    """Embeddings, L decoder layers and the final norm: ids [B, T] -> hidden [B, T, C]."""

    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Qwen3DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        B, T = input_ids.shape
        if attention_mask is None:
            positions = torch.arange(T, device=input_ids.device).expand(B, T)
            mask = causal_mask(T, input_ids.device)[None, None]  # [1, 1, T, T]
        else:
            real = attention_mask.bool()  # [B, T], False on padding
            # Each row counts positions over its own real tokens, so padding shifts nothing.
            positions = (real.long().cumsum(-1) - 1).clamp(min=0)
            mask = causal_mask(T, input_ids.device)[None] & real[:, None, :]  # [B, T, T]
            mask = mask[:, None]  # [B, 1, T, T]
        cos, sin = rope_cos_sin(positions.reshape(-1), self.cfg.head_dim, self.cfg.rope_theta)
        cos, sin = cos.view(B, T, -1), sin.view(B, T, -1)  # [B, T, D]
        x = self.embed_tokens(input_ids)  # [B, T, C]
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.norm(x)


class Qwen3ForCausalLM(nn.Module):
    """The naive Qwen3: ids [B, T] -> logits [B, T, V], recomputing everything each call."""

    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = Qwen3Model(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @torch.no_grad()
    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """input_ids: Long [B, T]; attention_mask: [B, T] with 0 on padding -> [B, T, V]."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [B, T], got shape {tuple(input_ids.shape)}.")
        bad = (input_ids < 0) | (input_ids >= self.cfg.vocab_size)
        if bad.any():
            raise ValueError(
                f"token id {int(input_ids[bad][0])} is outside the vocabulary "
                f"[0, {self.cfg.vocab_size})."
            )
        return self.lm_head(self.model(input_ids, attention_mask))

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> Qwen3ForCausalLM:
        """Load a checkpoint folder (or model name such as "tiny") into the reference model."""
        return build_model(cls, resolve_model(path), dtype, device).eval()
