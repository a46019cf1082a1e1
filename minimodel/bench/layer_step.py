"""One step of one engine decoder layer, ready to time: the roofline's measured points.

The layer is the engine's own (`engine/model.py`'s Qwen3DecoderLayer: merged qkv and gate_up,
QK-norm, RoPE, o and down, the fused residual norms) with random weights, and its attention runs
in the engine's torch backend over a paged KV cache of its own, through the same metadata a real
step builds. Only the embedding, the other layers and the LM head are missing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch

from minimodel.config import Qwen3Config
from minimodel.engine.attention import TorchBackend, build_metadata
from minimodel.engine.kv_cache import KVCache, pages_needed
from minimodel.engine.model import Qwen3DecoderLayer
from minimodel.ops import rope_cos_sin


class LayerStep:
    """Layer 0 of a model of shape `cfg`, random weights: `prepare(q_len, kv_len, batch)` sets
    up a step of `batch` requests, each bringing q_len new tokens that end at token kv_len, and
    returns the call that runs it (the cache holds kv_len - q_len earlier tokens of noise)."""

    def __init__(self, cfg: Qwen3Config, dtype: torch.dtype = torch.float32,
                 device: str = "cpu", page_size: int = 16) -> None:
        self.cfg = dataclasses.replace(cfg, num_hidden_layers=1)
        self.dtype, self.device, self.page_size = dtype, device, page_size
        self.layer = Qwen3DecoderLayer(self.cfg, 0).to(device=device, dtype=dtype).eval()
        std = 1 / math.sqrt(cfg.hidden_size)
        with torch.no_grad():
            for name, param in self.layer.named_parameters():
                if not name.endswith("norm.weight"):  # norms keep their ones
                    param.normal_(0.0, std)

    def prepare(self, q_len: int, kv_len: int, batch: int = 1) -> Callable[[], torch.Tensor]:
        """The step, planned: the result runs the layer once -> hidden [batch * q_len, C].
        Its pool is `self.kv_cache` until the next call."""
        S = self.page_size
        per_request = pages_needed(kv_len, S)
        kv_cache = KVCache(self.cfg, batch * per_request, S, self.dtype, self.device)
        kv_cache.pools[0].normal_()
        self.kv_cache = kv_cache
        backend = TorchBackend(kv_cache, self.cfg.num_attention_heads, self.dtype)
        tables = [list(range(b * per_request, (b + 1) * per_request)) for b in range(batch)]
        backend.plan(build_metadata(tables, [kv_len] * batch, [q_len] * batch, S, self.device))
        cos, sin = rope_cos_sin(backend.meta.positions, self.cfg.head_dim, self.cfg.rope_theta)
        x = torch.randn(batch * q_len, self.cfg.hidden_size, device=self.device).to(self.dtype)

        def run() -> torch.Tensor:
            with torch.inference_mode():
                out, _ = self.layer(x, None, cos, sin, backend)
            return out

        return run
