"""Attention over the paged KV cache: one metadata format, two backends.

Every step, the engine describes its batch once, in FlashInfer's page-table format
(`AttentionMetadata`), and every layer reads that description. A backend turns it into whatever
its kernels need in `plan(metadata)`, once per step, and then, per layer, `forward(q, k, v,
layer)` writes the new K/V into the pool and attends over each request's pages.

Shapes: B requests, N new tokens in the step (packed), Hq query heads, Hkv KV heads (G = Hq/Hkv
query heads share one), D head dim, S page size.

Causal masking is bottom-right aligned: new token j of a request with kv_len K and q_len Q sees
kv positions 0 .. K - Q + j. Prefill (Q = K), chunked prefill and decode (Q = 1) are the same
rule.
"""

from __future__ import annotations

import array
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from minimodel.engine.kv_cache import KVCache, pages_needed
from minimodel.ops import causal_mask


@dataclass
class AttentionMetadata:
    """One step's batch, built once and shared by all layers (FlashInfer's page-table format).

    Request i's new tokens are rows qo_indptr[i]:qo_indptr[i+1] of the packed batch; its pages
    are kv_indices[kv_indptr[i]:kv_indptr[i+1]], in order; its last page holds
    kv_last_page_len[i] tokens. kv_len counts every token in the cache after this step,
    the new ones included.
    """

    qo_indptr: torch.Tensor  # int32 [B+1]
    kv_indptr: torch.Tensor  # int32 [B+1]
    kv_indices: torch.Tensor  # int32 [kv_indptr[-1]]
    kv_last_page_len: torch.Tensor  # int32 [B], in 1..S
    positions: torch.Tensor  # int64 [N]: each new token's position in its sequence
    slot_mapping: torch.Tensor  # int64 [N]: page * S + offset, where each new K/V goes
    page_size: int
    q_lens: list[int]  # [B] on the host: new tokens per request
    kv_lens: list[int]  # [B] on the host: cached tokens per request after this step

    @property
    def num_requests(self) -> int:
        return len(self.q_lens)

    @property
    def num_tokens(self) -> int:
        """N: new tokens in the packed batch."""
        return int(self.positions.shape[0])

    @property
    def is_decode(self) -> bool:
        """True when every request brings exactly one new token (a pure decode step)."""
        return all(q == 1 for q in self.q_lens)


def build_metadata(
    page_tables: list[list[int]],
    kv_lens: list[int],
    q_lens: list[int],
    page_size: int,
    device: torch.device | str = "cpu",
) -> AttentionMetadata:
    """Describe a batch: request i has kv_lens[i] tokens in pages page_tables[i] after this step,
    and its last q_lens[i] tokens are new (their K/V are written this step).

    A page table may list more pages than needed; only the first ceil(kv_len / S) are used.
    """
    B = len(q_lens)
    if not (len(page_tables) == len(kv_lens) == B):
        raise ValueError("page_tables, kv_lens and q_lens must have one entry per request.")
    for i, (pages, kv_len, q_len) in enumerate(zip(page_tables, kv_lens, q_lens, strict=True)):
        if not 1 <= q_len <= kv_len or len(pages) * page_size < kv_len:
            raise ValueError(
                f"request {i}: need 1 <= q_len ({q_len}) <= kv_len ({kv_len}) <= "
                f"pages * page_size ({len(pages)} * {page_size})."
            )
    q_len_t = torch.tensor(q_lens, dtype=torch.int64)  # [B]
    kv_len_t = torch.tensor(kv_lens, dtype=torch.int64)  # [B]
    num_pages = [pages_needed(k, page_size) for k in kv_lens]
    qo_indptr = torch.zeros(B + 1, dtype=torch.int64)
    qo_indptr[1:] = q_len_t.cumsum(0)
    kv_indptr = torch.zeros(B + 1, dtype=torch.int64)
    kv_indptr[1:] = torch.tensor(num_pages, dtype=torch.int64).cumsum(0)
    kv_indices = torch.tensor(
        [p for pages, n in zip(page_tables, num_pages, strict=True) for p in pages[:n]],
        dtype=torch.int64,
    )
    kv_last_page_len = kv_len_t - (torch.tensor(num_pages) - 1) * page_size

    # Token t of the packed batch belongs to request req[t]; its position counts from the
    # start of that request's cached tokens, and its slot is found through the page table.
    req = torch.repeat_interleave(torch.arange(B), q_len_t)  # [N]
    N = int(qo_indptr[-1])
    positions = (torch.arange(N) - qo_indptr[req]) + (kv_len_t - q_len_t)[req]  # [N]
    pages = kv_indices[kv_indptr[req] + positions // page_size]  # [N]
    slot_mapping = pages * page_size + positions % page_size  # [N]

    def to_dev(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return t.to(device=device, dtype=dtype)

    return AttentionMetadata(
        qo_indptr=to_dev(qo_indptr, torch.int32),
        kv_indptr=to_dev(kv_indptr, torch.int32),
        kv_indices=to_dev(kv_indices, torch.int32),
        kv_last_page_len=to_dev(kv_last_page_len, torch.int32),
        positions=to_dev(positions, torch.int64),
        slot_mapping=to_dev(slot_mapping, torch.int64),
        page_size=page_size,
        q_lens=list(q_lens),
        kv_lens=list(kv_lens),
    )


def host_tensor(values: list[int], dtype: torch.dtype) -> torch.Tensor:
    """A CPU int32 or int64 tensor of a non-empty list, over an array's bytes: no torch call
    (torch.tensor makes four, which the profiler of a short step sees)."""
    return torch.frombuffer(array.array("q" if dtype == torch.int64 else "i", values),
                            dtype=dtype)


def decode_lists(page_tables: list[list[int]], kv_lens: list[int], page_size: int
                 ) -> tuple[list[int], list[int], list[int], list[int]]:
    """The host arithmetic of `decode_metadata`: (kv_indptr, kv_indices, kv_last_page_len,
    slot_mapping) of a pure decode step, as lists (a step run in C reads them so)."""
    S = page_size
    kv_indices, slots, last_page_len, kv_indptr = [], [], [], [0]
    for i, (pages, kv_len) in enumerate(zip(page_tables, kv_lens, strict=True)):
        if not 1 <= kv_len <= len(pages) * S:
            raise ValueError(f"request {i}: need 1 <= kv_len ({kv_len}) <= pages * page_size "
                             f"({len(pages)} * {S}).")
        n = pages_needed(kv_len, S)
        kv_indices += pages[:n]
        kv_indptr.append(kv_indptr[-1] + n)
        last_page_len.append(kv_len - (n - 1) * S)
        slots.append(pages[(kv_len - 1) // S] * S + (kv_len - 1) % S)
    return kv_indptr, kv_indices, last_page_len, slots


def decode_metadata(
    page_tables: list[list[int]],
    kv_lens: list[int],
    page_size: int,
    device: torch.device | str = "cpu",
) -> AttentionMetadata:
    """`build_metadata` for a pure decode step (one new token per request, the last of its
    kv_lens[i]), worked out in host arithmetic: the same tensors, without the dozen small
    tensor ops, which show in the step of a small model (a draft model's step is ~1 ms)."""
    S = page_size
    kv_indptr, kv_indices, last_page_len, slots = decode_lists(page_tables, kv_lens, S)
    on_cpu = torch.device(device).type == "cpu"

    def tensor(values: list[int], dtype: torch.dtype) -> torch.Tensor:
        if not values:
            return torch.empty(0, dtype=dtype, device=device)
        host = host_tensor(values, dtype)
        return host if on_cpu else host.to(device)

    return AttentionMetadata(
        qo_indptr=tensor(list(range(len(kv_lens) + 1)), torch.int32),
        kv_indptr=tensor(kv_indptr, torch.int32),
        kv_indices=tensor(kv_indices, torch.int32),
        kv_last_page_len=tensor(last_page_len, torch.int32),
        positions=tensor([k - 1 for k in kv_lens], torch.int64),
        slot_mapping=tensor(slots, torch.int64),
        page_size=S,
        q_lens=[1] * len(kv_lens),
        kv_lens=list(kv_lens),
    )


class AttentionBackend(ABC):
    """Paged attention for one engine: `plan` once per step, then `forward` once per layer.

    plan(metadata): derive from the step's metadata whatever the kernels need (index tensors,
        masks, kernel schedules). Called once per step, before the model runs.
    forward(q, k, v, layer): store this step's k, v [N, Hkv, D] into layer's pool, then return
        attention of q [N, Hq, D] over each request's cached tokens -> [N, Hq, D].
    """

    name: str = "?"

    def __init__(self, kv_cache: KVCache, num_qo_heads: int, dtype: torch.dtype) -> None:
        self.kv_cache = kv_cache
        self.num_qo_heads = num_qo_heads
        self.num_kv_heads = kv_cache.num_kv_heads
        self.head_dim = kv_cache.head_dim
        self.dtype = dtype
        self.scale = 1.0 / math.sqrt(kv_cache.head_dim)

    @abstractmethod
    def plan(self, metadata: AttentionMetadata) -> None: ...

    @abstractmethod
    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int
    ) -> torch.Tensor: ...


class TorchBackend(AttentionBackend):
    """Pure PyTorch paged attention: runs on any device, and is the oracle for FlashInfer.

    K/V are gathered a whole page at a time (one index_select over kv_indices per layer), and
    attention runs in `scaled_dot_product_attention` with a boolean mask. The G query heads
    that share a KV head attend as G rows against the same keys, so K/V are never repeated.
    Decode steps (one new token per request) run as one batch, padded to the longest request;
    other steps run request by request, each with its own bottom-right causal mask.
    (A hand-written softmax(q k^T) v, as in the reference, made the matmuls copy the gathered
    K/V twice more; SDPA reads them in place, which made CPU decode attention ~6x faster.)
    """

    name = "torch"

    def plan(self, metadata: AttentionMetadata) -> None:
        S, device = metadata.page_size, metadata.positions.device
        self.meta = metadata
        self.new_k_rows = self.kv_cache.k_rows(metadata.slot_mapping)  # [N]
        kv_indptr, kv_indices = metadata.kv_indptr.long(), metadata.kv_indices.long()
        if metadata.is_decode:
            # Page p of request b is kv_indices[kv_indptr[b] + p]; requests with fewer pages
            # repeat their last one, and the mask hides every token past kv_len.
            num_pages = kv_indptr[1:] - kv_indptr[:-1]  # [B]
            p = torch.arange(int(num_pages.max()), device=device)  # [Pmax]
            p = torch.minimum(p[None, :], num_pages[:, None] - 1)  # [B, Pmax]
            self.page_ids = kv_indices[kv_indptr[:-1, None] + p].flatten()  # [B * Pmax]
            kv_len = torch.tensor(metadata.kv_lens, device=device)
            j = torch.arange(p.shape[1] * S, device=device)  # [L = Pmax * S]
            self.mask = (j[None, :] < kv_len[:, None])[:, None, None, :]  # [B, 1, 1, L]
            return
        self.requests: list[tuple[int, int, torch.Tensor, torch.Tensor]] = []
        qo_indptr, page_indptr = metadata.qo_indptr.tolist(), kv_indptr.tolist()
        for i, (q_len, kv_len) in enumerate(zip(metadata.q_lens, metadata.kv_lens, strict=True)):
            pages = kv_indices[page_indptr[i] : page_indptr[i + 1]]  # [ceil(K / S)]
            mask = causal_mask(q_len, kv_len, device)  # [Q, K], bottom-right
            self.requests.append((qo_indptr[i], qo_indptr[i + 1], pages, mask))

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int
    ) -> torch.Tensor:
        Hkv, D = self.num_kv_heads, self.head_dim
        G = self.num_qo_heads // Hkv
        self.kv_cache.store(layer, k, v, self.new_k_rows)
        keys, values = self.kv_cache.keys(layer), self.kv_cache.values(layer)  # [P, S, Hkv, D]
        if self.meta.is_decode:
            B = q.shape[0]
            K = keys.index_select(0, self.page_ids).view(B, -1, Hkv, D)  # [B, L, Hkv, D]
            V = values.index_select(0, self.page_ids).view(B, -1, Hkv, D)
            out = F.scaled_dot_product_attention(
                q.view(B, Hkv, G, D), K.transpose(1, 2), V.transpose(1, 2),
                attn_mask=self.mask, scale=self.scale,
            )  # [B, Hkv, G, D]
            return out.reshape(B, self.num_qo_heads, D)
        out = torch.empty_like(q)
        for start, end, pages, mask in self.requests:
            Q, Kn = end - start, mask.shape[1]
            K = keys.index_select(0, pages).view(-1, Hkv, D)[:Kn].transpose(0, 1)  # [Hkv, K, D]
            V = values.index_select(0, pages).view(-1, Hkv, D)[:Kn].transpose(0, 1)
            qg = q[start:end].view(Q, Hkv, G, D).permute(1, 2, 0, 3).reshape(Hkv, G * Q, D)
            o = F.scaled_dot_product_attention(
                qg, K, V, attn_mask=mask.repeat(G, 1), scale=self.scale  # rows: (g, t)
            )  # [Hkv, G * Q, D]
            out[start:end] = o.view(Hkv, G, Q, D).permute(2, 0, 1, 3).reshape(Q, -1, D)
        return out


WORKSPACE_BYTES = 128 * 1024 * 1024  # FlashInfer's scratch space for split-KV partial results

# What FlashInfer 0.6.1 builds kernels for. Its JIT maps only 16-bit and 8-bit dtypes to CUDA
# types (no float32). On Hopper the prefill wrapper (and the tensor-core decode, which runs the
# prefill kernel) resolves to FA3, whose paged prefill static_asserts head_dim 64, 128 or 256;
# the engine asks for those on every GPU so that a model runs the same everywhere. Its CUDA-core
# decode dispatches the query-group size G = Hq / Hkv over 1, 2, 3, 4 and 8 only.
FLASHINFER_DTYPES = (torch.bfloat16, torch.float16)
FLASHINFER_HEAD_DIMS = (64, 128, 256)


def flashinfer_kernel_problem(dtype: torch.dtype, head_dim: int) -> str | None:
    """Why FlashInfer has no kernel for this model's attention, or None when it has one."""
    if dtype not in FLASHINFER_DTYPES:
        name = str(dtype).removeprefix("torch.")
        return f"{name} has no FlashInfer kernels; use bfloat16 or float16"
    if head_dim not in FLASHINFER_HEAD_DIMS:
        dims = ", ".join(str(d) for d in FLASHINFER_HEAD_DIMS)
        return (f"head_dim {head_dim} has no FlashInfer kernel (FA3 on Hopper takes "
                f"head_dim {dims} only)")
    return None


CUDA_CORE_DECODE_GROUP_SIZES = (1, 2, 3, 4, 8)
TENSOR_CORE_DECODE_MIN_GROUP = 4  # from here on, tensor cores pay off for decode


def decode_uses_tensor_cores(num_qo_heads: int, num_kv_heads: int) -> bool:
    """Whether decode runs FlashInfer's tensor-core kernel: once several query heads share a KV
    head (G >= 4), and for any G that the CUDA-core decode is not built for (e.g. 5)."""
    G = num_qo_heads // num_kv_heads
    return G >= TENSOR_CORE_DECODE_MIN_GROUP or G not in CUDA_CORE_DECODE_GROUP_SIZES


class FlashInferBackend(AttentionBackend):
    """FlashInfer's paged kernels: the batch-prefill wrapper for steps with any request longer
    than one token, the batch-decode wrapper for pure decode steps; planned once per step.

    RoPE is applied by the model (pos_encoding_mode="NONE"); indices are int32 on the GPU.
    """

    name = "flashinfer"

    def __init__(self, kv_cache: KVCache, num_qo_heads: int, dtype: torch.dtype) -> None:
        super().__init__(kv_cache, num_qo_heads, dtype)
        problem = flashinfer_kernel_problem(dtype, kv_cache.head_dim)
        if problem:
            raise ValueError(f"The flashinfer backend cannot run this model: {problem}.")
        import flashinfer

        device = kv_cache.pools[0].device
        # Zeros, as FlashInfer asks: the split-KV merge reads it on its first use.
        self.workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self.prefill_wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            self.workspace, "NHD"
        )
        self.decode_wrapper = self.make_decode_wrapper()
        self.wrapper: Any = None

    def make_decode_wrapper(self, graph_buffers: dict[str, torch.Tensor] | None = None) -> Any:
        """A decode wrapper; with graph_buffers (indptr, indices, last_page_len), one whose
        metadata lives in those fixed tensors so that a CUDA graph can replay it."""
        import flashinfer

        use_tensor_cores = decode_uses_tensor_cores(self.num_qo_heads, self.num_kv_heads)
        if graph_buffers is None:
            return flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                self.workspace, "NHD", use_tensor_cores=use_tensor_cores
            )
        return flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace,
            "NHD",
            use_cuda_graph=True,
            use_tensor_cores=use_tensor_cores,
            paged_kv_indptr_buffer=graph_buffers["kv_indptr"],
            paged_kv_indices_buffer=graph_buffers["kv_indices"],
            paged_kv_last_page_len_buffer=graph_buffers["kv_last_page_len"],
        )

    def plan(self, metadata: AttentionMetadata, decode_wrapper: Any = None) -> None:
        """Plan the step's kernel; decode_wrapper replaces the default one (CUDA graphs)."""
        self.meta = metadata
        self.new_k_rows = self.kv_cache.k_rows(metadata.slot_mapping)
        common = dict(
            num_qo_heads=self.num_qo_heads,
            num_kv_heads=self.num_kv_heads,
            page_size=metadata.page_size,
            pos_encoding_mode="NONE",
            sm_scale=self.scale,
            q_data_type=self.dtype,
            kv_data_type=self.dtype,
        )
        if metadata.is_decode:
            self.wrapper = decode_wrapper or self.decode_wrapper
            self.wrapper.plan(
                metadata.kv_indptr,
                metadata.kv_indices,
                metadata.kv_last_page_len,
                head_dim=self.head_dim,
                **common,
            )
        else:
            self.wrapper = self.prefill_wrapper
            self.wrapper.plan(
                metadata.qo_indptr,
                metadata.kv_indptr,
                metadata.kv_indices,
                metadata.kv_last_page_len,
                head_dim_qk=self.head_dim,
                causal=True,
                **common,
            )

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int
    ) -> torch.Tensor:
        self.kv_cache.store(layer, k, v, self.new_k_rows)
        return self.wrapper.run(q, self.kv_cache.pools[layer])  # [N, Hq, D]


BACKENDS: dict[str, type[AttentionBackend]] = {
    "torch": TorchBackend,
    "flashinfer": FlashInferBackend,
}
