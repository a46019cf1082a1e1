"""Decode steps in fewer calls on a CPU: the draft model's (`LeanDecoder`) and the engine's own
(`InlineDecoder`).

A draft model is chosen small, so on a CPU its decode step is bound neither by bytes
(bard-draft's two blocks are 1.6 MB) nor by arithmetic, but by the number of tensor ops it
launches, each a few microseconds of dispatch. The engine's model is written to teach and to
serve any step (packed rows, prefill and decode mixed, tensor parallelism, any attention
backend); a draft proposes k tokens one forward at a time, so every op it launches is paid k
times a step. `LeanDecoder` computes the same decode step (one new token per request, or a
few for one request catching up; one rank) with about a third of the ops:

- each product one `x @ W.t()` (a view: no weight is copied);
- RMSNorm as x * rsqrt(sum(x^2) + C * eps) * (w * sqrt(C)): the mean's division folded into
  the weight and eps;
- the q and k norms of a layer in one go over all heads, the softmax scale folded into q's
  weight;
- RoPE as x * cos + roll(x, D/2) * sin', rotate_half's sign folded into a sin' table;
- attention as two batched matmuls over the gathered pages, with no mask for one request's
  one token (its pages are cut at its length).

Same weights, same K/V written into the same slots of the same pool (so the engine's model can
read them back, and the other way round); the hidden states equal the model's within float
rounding (tests/test_spec_decode.py). The model's own forward still runs every step this one
does not cover: prefills, and several requests of which one brings several tokens.

`InlineDecoder` is the engine's model itself, for its decode steps on a CPU (one process, the
torch backend): the same ops in the same order, so the same bits, only without the module
calls and with the q/k norms and RoPE each in one call (see its docstring). A batch-1 decode
step of bard on a CPU spends about as long outside its matrix products as in them; the
inlined step takes back part of that time (docs/benchmarks.md).
"""

from __future__ import annotations

import torch

from minimodel.engine.attention import AttentionMetadata, TorchBackend
from minimodel.engine.kv_cache import KVCache, pages_needed
from minimodel.engine.model import PackedQwen3ForCausalLM
from minimodel.ops import causal_mask, rms_norm


class LeanDecoder:
    """`decode(ids, page_tables, kv_lens)` -> hidden [N, C]: model(ids) for B requests that
    each bring their last token (position kv_lens[i] - 1), or for one request that brings its
    last N tokens; their K/V written into their pages."""

    def __init__(self, model: PackedQwen3ForCausalLM, kv_cache: KVCache) -> None:
        if model.tp_size != 1:
            raise ValueError("LeanDecoder runs one rank's whole model (tensor_parallel_size=1).")
        assert model.rope_cos is not None and model.rope_sin is not None
        cfg = model.cfg
        attn = model.model.layers[0].self_attn
        self.Hq, self.Hkv, self.D = attn.num_heads, attn.num_kv_heads, attn.head_dim
        self.C = cfg.hidden_size
        self.c_eps = cfg.hidden_size * cfg.rms_norm_eps  # sum-of-squares form of eps
        self.d_eps = self.D * cfg.rms_norm_eps
        self.kv_cache = kv_cache
        self.embed = model.model.embed_tokens.weight
        self.cos = model.rope_cos
        half = self.D // 2
        sign = torch.cat([-torch.ones(half), torch.ones(half)]).to(model.rope_sin)
        self.sin = model.rope_sin * sign  # rotate_half(x) = roll(x, D/2) * sign
        root_c, root_d = self.C ** 0.5, self.D ** 0.5

        def t(w: torch.Tensor) -> torch.Tensor:  # a view: a large draft's weights not copied
            return w.detach().t()

        self.layers = []
        for layer in model.model.layers:
            a, mlp = layer.self_attn, layer.mlp
            q_w = a.q_norm.weight.detach() * root_d * self.D ** -0.5  # times the softmax scale
            k_w = a.k_norm.weight.detach() * root_d
            self.layers.append((
                layer.input_layernorm.weight.detach() * root_c,
                t(a.qkv_proj.weight),
                None if a.qkv_proj.bias is None else a.qkv_proj.bias.detach(),
                torch.cat([q_w.expand(self.Hq, self.D), k_w.expand(self.Hkv, self.D)]),
                t(a.o_proj.weight),
                layer.post_attention_layernorm.weight.detach() * root_c,
                t(mlp.gate_up_proj.weight),
                t(mlp.down_proj.weight),
            ))
        self.final_w = model.model.norm.weight.detach() * root_c
        self.I = model.model.layers[0].mlp.down_proj.weight.shape[1]

    def _rms(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        """Qwen3's RMSNorm (in float32, back in x's dtype), w already times sqrt(width)."""
        x32 = x.float()
        return (x32 * torch.rsqrt((x32 * x32).sum(-1, keepdim=True) + eps)).to(x.dtype) * w

    @torch.inference_mode()
    def decode(self, ids: torch.Tensor, page_tables: list[list[int]],
               kv_lens: list[int]) -> torch.Tensor:
        """ids: Long [N] (rows of the model's embedding), the last new token of each request
        (N = B), or one request's last N tokens (B = 1: a draft catching up); they go to the
        positions before kv_lens[i] in page_tables[i] -> hidden [N, C], the model's final norm
        applied."""
        B, N, S = len(kv_lens), ids.shape[0], self.kv_cache.page_size
        Hq, Hkv, D, device = self.Hq, self.Hkv, self.D, ids.device
        G = Hq // Hkv
        if N != B and B != 1:
            raise ValueError(f"{N} new tokens for {B} requests: one each, or all of one.")
        positions, k_rows, page_ids = [], [], []
        max_pages = max(pages_needed(k, S) for k in kv_lens)
        for pages, kv_len in zip(page_tables, kv_lens, strict=True):
            n = pages_needed(kv_len, S)
            if not N // B <= kv_len <= len(pages) * S:
                raise ValueError(f"need {N // B} <= kv_len ({kv_len}) <= pages * page_size "
                                 f"({len(pages)} * {S}).")
            for pos in range(kv_len - N // B, kv_len):
                positions.append(pos)
                k_rows.append(pages[pos // S] * 2 * S + pos % S)  # KVCache.k_rows of its slot
            page_ids += pages[:n] + pages[n - 1:n] * (max_pages - n)
        pos_t = torch.tensor(positions, device=device)
        k_rows_t = torch.tensor(k_rows, device=device)
        v_rows_t = k_rows_t + S
        page_ids_t = torch.tensor(page_ids, device=device)
        cos, sin = self.cos[pos_t][:, None], self.sin[pos_t][:, None]  # [N, 1, D]
        L = max_pages * S
        mask = None  # added to the scores [B, Hkv, G, T, L]: 0 where a key is seen, else -inf
        if B > 1:  # past each request's length
            span = torch.arange(L, device=device)
            lens = torch.tensor(kv_lens, device=device)
            mask = torch.zeros(B, 1, 1, 1, L, dtype=self.embed.dtype, device=device)
            mask.masked_fill_((span[None, :] >= lens[:, None])[:, None, None, None, :],
                              float("-inf"))
        elif N > 1:  # causal: new token j sees keys up to kv_len - N + j
            mask = torch.zeros(N, kv_lens[0], dtype=self.embed.dtype, device=device)
            mask.masked_fill_(~causal_mask(N, kv_lens[0], device), float("-inf"))
        T = N // B  # new tokens per request
        x = torch.nn.functional.embedding(ids, self.embed)  # [N, C]
        residual = None
        for li, (w_in, qkv_t, qkv_b, qk_w, o_t, w_post, gate_up_t, down_t) in enumerate(
                self.layers):
            residual = x if residual is None else x + residual
            h = self._rms(residual, w_in, self.c_eps)
            qkv = h @ qkv_t if qkv_b is None else torch.addmm(qkv_b, h, qkv_t)  # [N, (Hq+2Hkv)D]
            qk = self._rms(qkv[:, :(Hq + Hkv) * D].view(N, Hq + Hkv, D), qk_w, self.d_eps)
            # RoPE, in float32 as the model does it (the tables are float32)
            qk = torch.addcmul(qk * cos, qk.roll(D // 2, -1), sin).to(qkv.dtype)
            v = qkv[:, (Hq + Hkv) * D:].view(N, Hkv, D)
            rows = self.kv_cache.rows(li)
            rows.index_copy_(0, k_rows_t, qk[:, Hq:])
            rows.index_copy_(0, v_rows_t, v)
            keys = self.kv_cache.keys(li).index_select(0, page_ids_t).view(B, L, Hkv, D)
            values = self.kv_cache.values(li).index_select(0, page_ids_t).view(B, L, Hkv, D)
            if B == 1:  # one request: its keys end at its length
                keys, values = keys[:, :kv_lens[0]], values[:, :kv_lens[0]]
            q = qk[:, :Hq].view(B, T, Hkv, G, D).permute(0, 2, 3, 1, 4)  # [B, Hkv, G, T, D]
            scores = torch.matmul(q, keys.permute(0, 2, 3, 1)[:, :, None])  # [B, Hkv, G, T, L]
            if mask is not None:
                scores = scores + mask
            out = torch.matmul(scores.softmax(-1), values.transpose(1, 2)[:, :, None])
            out = out.permute(0, 3, 1, 2, 4).reshape(N, Hq * D)  # [B, Hkv, G, T, D] -> [N, .]
            residual = out @ o_t + residual
            gate_up = self._rms(residual, w_post, self.c_eps) @ gate_up_t
            x = (torch.nn.functional.silu(gate_up[:, :self.I]) * gate_up[:, self.I:]) @ down_t
        return self._rms(x + residual, self.final_w, self.c_eps)


class InlineDecoder:
    """The engine's own decode forward on a CPU, inlined: the model's ops in the model's order,
    so its hidden states equal `model(ids, positions, backend)` bit for bit, with fewer calls.

    A decode step of a small model on a CPU is short enough (bard's: a few ms) that the
    hundreds of calls around its products count: each module call and each small tensor op.
    `__call__(ids, metadata)` computes a pure decode step
    (one new token per request; one rank; the torch backend's paged attention) with

    - the layers' own products (`product`: the kernel measured fastest for the row count);
    - the q and k norms of a layer as one norm over all heads (their weights multiplied in
      after, q's and k's), and RoPE on q and k at once, rotate_half as a roll and its sign
      folded into the sin table ((-a) * b equals a * (-b) exactly): elementwise, so each value
      is computed as before;
    - the attention inputs (page ids, the mask past each request's length, the K/V rows)
      from `TorchBackend.plan`, once per step, and the same `scaled_dot_product_attention`
      call;
    - no module calls.

    It holds no copy: every weight and table is the model's, read at each step.
    Prefills and mixed steps run the model (`ModelRunner.forward`)."""

    def __init__(self, model: PackedQwen3ForCausalLM, backend: TorchBackend) -> None:
        if model.tp_size != 1:
            raise ValueError("InlineDecoder runs one rank's whole model "
                             "(tensor_parallel_size=1).")
        attn = model.model.layers[0].self_attn
        self.Hq, self.Hkv, self.D = attn.num_heads, attn.num_kv_heads, attn.head_dim
        self.eps = model.cfg.rms_norm_eps
        self.backend = backend
        # The model's weights and tables are read at every step, never copied: a weight
        # changed in place, or the RoPE tables rebuilt, is what the next step computes with.
        self.model = model
        half = self.D // 2
        self.sign = torch.cat([-torch.ones(half), torch.ones(half)])  # rotate_half's signs

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor, metadata: AttentionMetadata) -> torch.Tensor:
        """ids: Long [B], one new token per request of a decode step's `metadata` -> hidden
        [B, C], the final norm applied; each token's K/V written into its slot."""
        if not metadata.is_decode:
            raise ValueError("InlineDecoder runs decode steps only (one new token per "
                             f"request); got q_lens {metadata.q_lens}.")
        B, Hq, Hkv, D = len(metadata.kv_lens), self.Hq, self.Hkv, self.D
        G, eps, backend = Hq // Hkv, self.eps, self.backend
        # the backend's own plan: each request's pages padded to the longest, the mask past
        # each request's length, the new K/V's rows
        backend.plan(metadata)
        kv_cache, page_ids, mask = backend.kv_cache, backend.page_ids, backend.mask
        k_rows = backend.new_k_rows
        v_rows = k_rows + metadata.page_size
        model, positions = self.model.model, metadata.positions
        assert self.model.rope_cos is not None and self.model.rope_sin is not None
        cos = self.model.rope_cos[positions][:, None]  # [B, 1, D]
        sin = (self.model.rope_sin[positions] * self.sign.to(self.model.rope_sin))[:, None]
        x, residual = torch.nn.functional.embedding(ids, model.embed_tokens.weight), None
        for li, layer in enumerate(model.layers):
            a, mlp = layer.self_attn, layer.mlp
            residual = x if residual is None else x + residual
            qkv = a.qkv_proj.product(rms_norm(residual, layer.input_layernorm.weight, eps),
                                     a.qkv_proj.bias)
            # the q and k norms as one, but for their weights (w * y equals y * w exactly)
            qk32 = qkv[:, :(Hq + Hkv) * D].view(B, Hq + Hkv, D).float()
            qk = (qk32 * torch.rsqrt(qk32.pow(2).mean(dim=-1, keepdim=True) + eps)
                  ).to(qkv.dtype)
            qk[:, :Hq].mul_(a.q_norm.weight)
            qk[:, Hq:].mul_(a.k_norm.weight)
            qk32 = qk.float()
            qk = (qk32 * cos + qk32.roll(D // 2, -1) * sin).to(qk.dtype)  # RoPE, q and k
            rows = kv_cache.rows(li)
            rows.index_copy_(0, k_rows, qk[:, Hq:])
            rows.index_copy_(0, v_rows, qkv[:, (Hq + Hkv) * D:].view(B, Hkv, D))
            keys = kv_cache.keys(li).index_select(0, page_ids).view(B, -1, Hkv, D)
            values = kv_cache.values(li).index_select(0, page_ids).view(B, -1, Hkv, D)
            out = torch.nn.functional.scaled_dot_product_attention(
                qk[:, :Hq].reshape(B, Hkv, G, D), keys.transpose(1, 2), values.transpose(1, 2),
                attn_mask=mask, scale=backend.scale)  # [B, Hkv, G, D]
            h = a.o_proj.product(out.reshape(B, Hq * D), None)
            residual = h + residual
            gate_up = mlp.gate_up_proj.product(
                rms_norm(residual, layer.post_attention_layernorm.weight, eps), None)
            gate, up = gate_up.chunk(2, dim=-1)
            x = mlp.down_proj.product(torch.nn.functional.silu(gate) * up, None)
        x = x + residual
        return rms_norm(x, model.norm.weight, eps)
