"""Qwen3 on the packed layout: all new tokens of a step in one [N, C] tensor, one row each.

Differences from the reference model (minimodel/reference/model.py), each for speed:
- no batch dim and no padding: requests are concatenated, and `AttentionMetadata` says which
  rows belong to which request;
- q/k/v and gate/up are merged into one matmul each (`qkv_proj`, `gate_up_proj`);
- the residual add is fused into the next RMSNorm (`ops.fused_add_rms_norm`);
- RoPE tables are computed once for all positions and looked up by each token's position;
- attention reads and writes the paged KV cache through an `AttentionBackend`;
- the LM head runs only on the rows that are sampled (`compute_logits`).

Every layer comes from `minimodel.layers`, so the same classes run split over N processes
(tensor parallelism, chapter 10): a model built inside `layers.tensor_parallel(rank, N)` holds
rank's shards (its query and KV heads, its slice of the intermediate size and of the
vocabulary) and all-reduces after `o_proj`, after `down_proj` and after the embedding lookup.
Built outside (one rank) it is the plain model and never communicates.

Shapes: N new tokens, C hidden, Hq/Hkv query/KV heads, D head dim, I intermediate, V vocab
(Hq, Hkv and I are per rank: the whole model's divided by the rank count).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from minimodel.config import Qwen3Config
from minimodel.engine.attention import AttentionBackend
from minimodel.layers import (
    MergedColumnParallelLinear,
    ParallelLMHead,
    QKVParallelLinear,
    RMSNorm,
    RowParallelLinear,
    VocabParallelEmbedding,
    get_tp,
)
from minimodel.ops import apply_rope, rope_cos_sin, silu_and_mul
from minimodel.weights import build_model


class Qwen3Attention(nn.Module):
    """GQA attention with QK-norm and RoPE over the paged KV cache."""

    def __init__(self, cfg: Qwen3Config, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.head_dim = cfg.head_dim
        self.qkv_proj = QKVParallelLinear(cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads,
                                          cfg.num_key_value_heads, bias=cfg.attention_bias)
        # this rank's heads (all of them with one rank)
        self.num_heads, self.num_kv_heads = self.qkv_proj.num_heads, self.qkv_proj.num_kv_heads
        q_size, kv_size = self.num_heads * cfg.head_dim, self.num_kv_heads * cfg.head_dim
        self.split = [q_size, kv_size, kv_size]
        self.o_proj = RowParallelLinear(cfg.q_size, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attn: AttentionBackend
    ) -> torch.Tensor:
        """x: [N, C]; cos/sin: [N, D] -> [N, C]."""
        N = x.shape[0]
        q, k, v = self.qkv_proj(x).split(self.split, dim=-1)
        q = self.q_norm(q.view(N, self.num_heads, self.head_dim))  # [N, Hq, D]
        k = self.k_norm(k.view(N, self.num_kv_heads, self.head_dim))  # [N, Hkv, D]
        v = v.view(N, self.num_kv_heads, self.head_dim)  # [N, Hkv, D]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = attn.forward(q, k, v, self.layer)  # [N, Hq, D]
        return self.o_proj(out.reshape(N, self.num_heads * self.head_dim))  # all_reduce inside


class Qwen3MLP(nn.Module):
    """SwiGLU with gate and up projections merged: down(silu_and_mul(gate_up(x)))."""

    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        I = cfg.intermediate_size  # noqa: E741
        self.gate_up_proj = MergedColumnParallelLinear(cfg.hidden_size, [I, I], bias=False)
        self.down_proj = RowParallelLinear(I, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [N, 2I] -> [N, I] -> [N, C], all_reduce inside down_proj
        return self.down_proj(silu_and_mul(self.gate_up_proj(x)))


class Qwen3DecoderLayer(nn.Module):
    """Pre-norm block; the residual add of each half happens inside the following norm."""

    def __init__(self, cfg: Qwen3Config, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Qwen3Attention(cfg, layer)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = Qwen3MLP(cfg)

    def forward(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        cos: torch.Tensor,
        sin: torch.Tensor,
        attn: AttentionBackend,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x: the previous block's output [N, C]; residual: the stream before it (None first)."""
        h, residual = self.input_layernorm.add_forward(x, residual)
        h = self.self_attn(h, cos, sin, attn)
        h, residual = self.post_attention_layernorm.add_forward(h, residual)
        return self.mlp(h), residual


class Qwen3Model(nn.Module):
    """Embeddings, L decoder layers, final norm: ids [N] at positions [N] -> hidden [N, C]."""

    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(
            Qwen3DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers)
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self,
        input_ids: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        attn: AttentionBackend,
    ) -> torch.Tensor:
        x, residual = self.embed_tokens(input_ids), None  # [N, C]
        for layer in self.layers:
            x, residual = layer(x, residual, cos, sin, attn)
        x, _ = self.norm.add_forward(x, residual)
        return x


class PackedQwen3ForCausalLM(nn.Module):
    """The engine's Qwen3: `forward` gives hidden states, `compute_logits` the sampled rows."""

    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = Qwen3Model(cfg)
        self.tp_rank, self.tp_size = get_tp()
        self.lm_head = ParallelLMHead(cfg.vocab_size, cfg.hidden_size)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.rope_cos: torch.Tensor | None = None
        self.rope_sin: torch.Tensor | None = None

    def build_rope_tables(self, max_positions: int) -> None:
        """Precompute cos/sin [max_positions, D] once; each step only looks rows up."""
        device = self.model.embed_tokens.weight.device
        positions = torch.arange(max_positions, device=device)
        self.rope_cos, self.rope_sin = rope_cos_sin(
            positions, self.cfg.head_dim, self.cfg.rope_theta
        )

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionBackend
    ) -> torch.Tensor:
        """input_ids, positions: Long [N]; attn planned for this step -> hidden [N, C]."""
        assert self.rope_cos is not None and self.rope_sin is not None, "build_rope_tables first"
        cos, sin = self.rope_cos[positions], self.rope_sin[positions]  # [N, D] each
        return self.model(input_ids, cos, sin, attn)

    @property
    def num_local_heads(self) -> tuple[int, int]:
        """(query heads, KV heads) this rank computes and caches."""
        attn = self.model.layers[0].self_attn
        return attn.num_heads, attn.num_kv_heads

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor | None:
        """hidden [B, C] (only the rows to sample) -> logits [B, V] (None on ranks > 0)."""
        return self.lm_head(hidden)

    @classmethod
    def from_pretrained(
        cls,
        folder: str | Path,
        dtype: torch.dtype,
        device: torch.device | str,
        max_positions: int | None = None,
    ) -> PackedQwen3ForCausalLM:
        """Load a checkpoint folder, merging q/k/v and gate/up as weights.PACKED_MODULES says."""
        model = build_model(cls, folder, dtype, device)
        model.build_rope_tables(max_positions or model.cfg.max_position_embeddings)
        return model.eval()
