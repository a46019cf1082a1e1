"""ModelRunner: one scheduled batch in, one sampled token per finishing row out.

It owns what lives on the device: the model, the KV cache, the attention backend, the sampler
and (on CUDA) the decode graphs. Per step: pack the batch's new tokens, build the attention
metadata once, plan the backend, run the model, compute logits only for the rows that are
sampled, sample.
"""

from __future__ import annotations

import torch

from minimodel.config import Qwen3Config
from minimodel.engine.attention import BACKENDS, AttentionMetadata, build_metadata
from minimodel.engine.cuda_graph import CUDAGraphRunner
from minimodel.engine.kv_cache import KVCache
from minimodel.engine.model import Qwen3ForCausalLM
from minimodel.engine.scheduler import ScheduledBatch
from minimodel.sampling import Sampler


class ModelRunner:
    """Runs the packed model over the paged cache and samples."""

    def __init__(
        self,
        model: Qwen3ForCausalLM,
        kv_cache: KVCache,
        backend_name: str,
        dtype: torch.dtype,
    ) -> None:
        self.model = model
        self.cfg: Qwen3Config = model.cfg
        self.kv_cache = kv_cache
        self.device = kv_cache.pools[0].device
        num_heads, _ = model.num_local_heads  # all of them with one rank
        self.backend = BACKENDS[backend_name](kv_cache, num_heads, dtype)
        self.sampler = Sampler(self.device)
        self.graphs = None  # a CUDAGraphRunner once `capture_cuda_graphs` ran
        # Can this LLM still serve? `llm.runner.closed` is None while it can, else why not.
        # One process never closes; the tensor-parallel runner (engine/parallel.py) does when
        # a worker fails, hangs or dies (the server's /health reads it).
        self.closed: str | None = None

    def close(self) -> None:
        """Nothing to release with one process (see engine/parallel.py for N)."""

    def capture_cuda_graphs(self, max_batch_size: int, padding_page: int) -> None:
        """Capture decode graphs (CUDA + flashinfer backend only)."""
        with torch.inference_mode():
            self.graphs = CUDAGraphRunner(self.model, self.backend, max_batch_size, padding_page)

    def prepare(self, batch: ScheduledBatch) -> tuple[torch.Tensor, AttentionMetadata]:
        """The batch's new token ids, packed [N], and its attention metadata."""
        ids: list[int] = []
        kv_lens: list[int] = []
        for seq, q_len in zip(batch.seqs, batch.q_lens, strict=True):
            start = seq.num_cached_tokens
            ids += seq.token_ids[start : start + q_len]
            kv_lens.append(start + q_len)
        metadata = build_metadata(
            [s.page_table for s in batch.seqs], kv_lens, batch.q_lens,
            self.kv_cache.page_size, self.device,
        )
        return torch.tensor(ids, dtype=torch.int64, device=self.device), metadata

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, metadata: AttentionMetadata) -> torch.Tensor:
        """Hidden states [N, C] of the packed batch (a graph replay when one fits)."""
        if self.graphs is not None and self.graphs.can_run(metadata):
            return self.graphs.run(input_ids, metadata)
        self.backend.plan(metadata)
        return self.model(input_ids, metadata.positions, self.backend)

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> tuple[list[int], list[float]]:
        """Run one step -> (token, logprob) for each request in batch.sample_mask."""
        input_ids, metadata = self.prepare(batch)
        hidden = self.forward(input_ids, metadata)  # [N, C]
        sampled = [i for i, s in enumerate(batch.sample_mask) if s]
        if not sampled:
            return [], []
        last_rows = metadata.qo_indptr[1:].long() - 1  # [B]: each request's last new token
        logits = self.model.compute_logits(hidden[last_rows[sampled]])  # [b, V]
        seqs = [batch.seqs[i] for i in sampled]
        tokens, logprobs = self.sampler(
            logits, [s.params for s in seqs], [s.generator for s in seqs]
        )
        return tokens.tolist(), logprobs.tolist()
