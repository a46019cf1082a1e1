"""CUDA graphs for decode steps: capture the model once per batch size, then replay.

A decode step of a small model is a few hundred tiny kernels; launching them one by one from
Python costs more than running them. A CUDA graph records the launches once and replays them
with one call. A graph has fixed shapes and fixed addresses, so:
- one graph per batch size in `batch_sizes`; a batch is padded up to the next captured size,
  the padding rows being dummy requests of one token on the padding page, a page of the pool
  that the allocator never lends (`LLM` adds it to the pool);
- inputs (ids, positions, K/V rows) are copied into static buffers before each replay;
- the attention kernel is FlashInfer's decode wrapper in graph mode, whose page table lives in
  fixed buffers that `plan` fills before each replay.
Only on CUDA with the flashinfer backend; `LLM(enforce_eager=True)` turns graphs off.
"""

from __future__ import annotations

import torch

from minimodel.engine.attention import AttentionMetadata, FlashInferBackend, build_metadata
from minimodel.engine.model import PackedQwen3ForCausalLM


def graphs_off_reason(enforce_eager: bool, device: torch.device, backend_name: str) -> str | None:
    """Why an engine captures no decode graphs, or None when it captures them."""
    if enforce_eager:
        return "enforce_eager=True"
    if device.type != "cuda":
        return f"device is {device.type}, graphs need CUDA"
    if backend_name != "flashinfer":
        return "graphs are captured with the flashinfer backend only"
    return None


def graph_batch_sizes(max_batch_size: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 16 up to max_batch_size (as vLLM and nano-vllm do)."""
    sizes = [s for s in (1, 2, 4, 8) if s < max_batch_size]
    sizes += list(range(16, max_batch_size, 16))
    return sorted(set(sizes + [max_batch_size]))


class CUDAGraphRunner:
    """Decode graphs for every size in graph_batch_sizes(max_batch_size)."""

    def __init__(
        self,
        model: PackedQwen3ForCausalLM,
        backend: FlashInferBackend,
        max_batch_size: int,
        padding_page: int,
    ) -> None:
        self.model, self.backend = model, backend
        self.padding_page = padding_page
        self.page_size = backend.kv_cache.page_size
        self.batch_sizes = graph_batch_sizes(max_batch_size)
        device = backend.kv_cache.pools[0].device
        max_bs = self.batch_sizes[-1]
        max_pages = backend.kv_cache.num_pages + max_bs
        self.input_ids = torch.zeros(max_bs, dtype=torch.int64, device=device)
        self.positions = torch.zeros(max_bs, dtype=torch.int64, device=device)
        self.new_k_rows = torch.zeros(max_bs, dtype=torch.int64, device=device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}  # [bs, C] hidden states, static
        self.wrappers: dict[int, object] = {}
        pool = torch.cuda.graph_pool_handle()
        for bs in reversed(self.batch_sizes):  # largest first, so smaller ones reuse memory
            self.wrappers[bs] = backend.make_decode_wrapper({
                "kv_indptr": torch.zeros(bs + 1, dtype=torch.int32, device=device),
                "kv_indices": torch.zeros(max_pages, dtype=torch.int32, device=device),
                "kv_last_page_len": torch.zeros(bs, dtype=torch.int32, device=device),
            })
            self._prepare(self._pad(None, bs))
            self._forward(bs)  # warm up outside the graph (lazy inits, autotuning)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.outputs[bs] = self._forward(bs)
            self.graphs[bs] = graph
        torch.cuda.synchronize()

    def can_run(self, metadata: AttentionMetadata) -> bool:
        return metadata.is_decode and metadata.num_requests <= self.batch_sizes[-1]

    def run(self, input_ids: torch.Tensor, metadata: AttentionMetadata) -> torch.Tensor:
        """Replay the graph of the next captured size -> hidden [B, C] of the real rows."""
        B = metadata.num_requests
        bs = next(s for s in self.batch_sizes if s >= B)
        self.input_ids[:B].copy_(input_ids)
        self._prepare(self._pad(metadata, bs))
        self.graphs[bs].replay()
        return self.outputs[bs][:B]

    def _pad(self, metadata: AttentionMetadata | None, bs: int) -> AttentionMetadata:
        """The batch plus dummy one-token requests on the padding page, bs requests in all."""
        S, device = self.page_size, self.input_ids.device
        tables, kv_lens = [], []
        if metadata is not None:
            indptr = metadata.kv_indptr.tolist()
            indices = metadata.kv_indices.tolist()
            tables = [indices[indptr[i] : indptr[i + 1]] for i in range(metadata.num_requests)]
            kv_lens = list(metadata.kv_lens)
        pad = bs - len(tables)
        return build_metadata(
            tables + [[self.padding_page]] * pad, kv_lens + [1] * pad, [1] * bs, S, device
        )

    def _prepare(self, metadata: AttentionMetadata) -> None:
        """Fill the static buffers and plan the graph's decode wrapper for this batch."""
        bs = metadata.num_requests
        self.backend.plan(metadata, decode_wrapper=self.wrappers[bs])
        self.positions[:bs].copy_(metadata.positions)
        self.new_k_rows[:bs].copy_(self.backend.new_k_rows)
        self.backend.new_k_rows = self.new_k_rows[:bs]  # the graph reads the static buffer

    def _forward(self, bs: int) -> torch.Tensor:
        return self.model(self.input_ids[:bs], self.positions[:bs], self.backend)
