"""The naive reference model of chapters 1-6: [B, T, C] layout, explicit masks, no cache."""

from minimodel.reference.generate import generate
from minimodel.reference.model import (
    Qwen3Attention,
    Qwen3DecoderLayer,
    Qwen3ForCausalLM,
    Qwen3MLP,
    Qwen3Model,
    RMSNorm,
    causal_mask,
    repeat_kv,
)

__all__ = [
    "Qwen3Attention",
    "Qwen3DecoderLayer",
    "Qwen3ForCausalLM",
    "Qwen3MLP",
    "Qwen3Model",
    "RMSNorm",
    "causal_mask",
    "generate",
    "repeat_kv",
]
