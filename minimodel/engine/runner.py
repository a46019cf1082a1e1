"""ModelRunner: one rank's shard of the model over its paged cache; rank 0 also samples.

It owns what lives on the device: the model, the KV cache, the attention backend, the sampler
and (on CUDA) the decode graphs, all built from the engine's one EngineConfig. Per step: pack
the batch's new tokens, build the attention metadata once, plan the backend, run the model,
compute logits only for the rows that are sampled, sample. With tensor parallelism every rank
runs the same `compute`; rank 0's runner tells the others what to run first (`broadcast`, a
no-op with one rank: see engine/parallel.py).
"""

from __future__ import annotations

import math

import torch

from minimodel.config import Qwen3Config
from minimodel.engine.attention import (
    BACKENDS,
    AttentionMetadata,
    TorchBackend,
    build_metadata,
    decode_metadata,
    host_tensor,
)
from minimodel.engine.config import EngineConfig
from minimodel.engine.cuda_graph import CUDAGraphRunner
from minimodel.engine.kernel_choice import capturable_kernels, choose_kernels
from minimodel.engine.kv_cache import KVCache
from minimodel.engine.lean_decode import InlineDecoder
from minimodel.engine.model import PackedQwen3ForCausalLM
from minimodel.engine.native_decode import GreedySampler, NativeDecoder
from minimodel.engine.quantization import quantize_model
from minimodel.engine.scheduler import ScheduledBatch
from minimodel.kernels import native
from minimodel.layers import tensor_parallel
from minimodel.sampling import Sampler


def load_shard(config: EngineConfig, rank: int, device: torch.device) -> PackedQwen3ForCausalLM:
    """Rank `rank`'s shards of every layer (the whole model with one rank), on `device`:
    quantized if asked, and on a CPU each product bound to its fastest measured formulation
    (`model.kernel_choices`)."""
    with tensor_parallel(rank, config.tensor_parallel_size):
        model = PackedQwen3ForCausalLM.from_pretrained(config.folder, config.dtype, device,
                                                       max_positions=config.max_model_len)
    quantize_model(model, config.quantization)
    model.kernel_choices = choose_kernels(model) if config.tune_kernels else []
    return model


def new_tokens(batch: ScheduledBatch) -> tuple[list[int], list[int]]:
    """(the new token ids of every request of the batch, packed in order; each request's
    kv_len, the tokens its cache holds after this step)."""
    ids: list[int] = []
    kv_lens: list[int] = []
    for seq, q_len in zip(batch.seqs, batch.q_lens, strict=True):
        start = seq.num_cached_tokens
        ids += seq.token_ids[start : start + q_len]
        kv_lens.append(start + q_len)
    return ids, kv_lens


class ModelRunner:
    """Runs the packed model over the paged cache and samples."""

    def __init__(self, config: EngineConfig, model: PackedQwen3ForCausalLM,
                 device: torch.device | None = None) -> None:
        assert config.num_pages is not None, "size the pool first: EngineConfig.with_pool()"
        self.config = config
        self.model = model
        self.cfg: Qwen3Config = model.cfg
        self.device = config.device if device is None else device
        num_heads, num_kv_heads = model.num_local_heads  # all of them with one rank
        # the pool holds the requests' pages and the reserved ones (a graph's padding page)
        self.kv_cache = KVCache(self.cfg, config.num_pages + config.reserved_pages,
                                config.page_size, config.dtype, self.device,
                                num_kv_heads=num_kv_heads)
        self.backend = BACKENDS[config.attention_backend](self.kv_cache, num_heads, config.dtype)
        # a greedy step's argmax and log-probability in one pass in C on a CPU (decode.c)
        self.sampler = (GreedySampler(self.device)
                        if self.device.type == "cpu" and native.library() else
                        Sampler(self.device))
        self.sampler.eos_token_ids = set(config.eos_token_ids)  # min_tokens holds them back
        self.graphs = None  # a CUDAGraphRunner once `capture_cuda_graphs` ran
        # One CPU process with the torch backend: decode steps run the model's forward inlined
        # (engine/lean_decode.py), equal bit for bit, in fewer calls.
        self.inline = (InlineDecoder(model, self.backend)
                       if self.device.type == "cpu" and model.tp_size == 1
                       and isinstance(self.backend, TorchBackend) else None)
        # ... and where every product of a step's batch size chose the C kernel, the whole
        # decode step in one call into C (engine/native_decode.py)
        self.native = (NativeDecoder(model, self.backend)
                       if self.inline is not None and native.library() is not None else None)
        # Can this LLM still serve? `llm.runner.closed` is None while it can, else why not.
        # One process never closes; the tensor-parallel runner (engine/parallel.py) does when
        # a worker fails, hangs or dies (the server's /health reads it).
        self.closed: str | None = None

    def close(self) -> None:
        """Nothing to release with one process (see engine/parallel.py for N)."""

    def capture_cuda_graphs(self) -> None:
        """Capture decode graphs (CUDA + flashinfer backend only), padding with the page
        after the requests' pages."""
        capturable_kernels(self.model)  # a graph records torch ops, not a call into C
        with torch.inference_mode():
            self.graphs = CUDAGraphRunner(self.model, self.backend, self.config.max_num_seqs,
                                          self.config.num_pages)

    def prepare(self, batch: ScheduledBatch) -> tuple[torch.Tensor, AttentionMetadata]:
        """The batch's new token ids, packed [N], and its attention metadata."""
        ids, kv_lens = new_tokens(batch)
        tables, S = [s.page_table for s in batch.seqs], self.kv_cache.page_size
        metadata = (decode_metadata(tables, kv_lens, S, self.device)
                    if all(q == 1 for q in batch.q_lens) else
                    build_metadata(tables, kv_lens, batch.q_lens, S, self.device))
        if self.device.type == "cpu" and ids:
            return host_tensor(ids, torch.int64), metadata
        return torch.tensor(ids, dtype=torch.int64, device=self.device), metadata

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, metadata: AttentionMetadata) -> torch.Tensor:
        """Hidden states [N, C] of the packed batch (a graph replay when one fits)."""
        if self.graphs is not None and self.graphs.can_run(metadata):
            return self.graphs.run(input_ids, metadata)
        if self.native is not None and self.native.can_run(metadata):
            return self.native(input_ids, metadata)
        if self.inline is not None and metadata.is_decode:
            return self.inline(input_ids, metadata)
        self.backend.plan(metadata)
        return self.model(input_ids, metadata.positions, self.backend)

    @torch.inference_mode()
    def compute(self, input_ids: torch.Tensor, metadata: AttentionMetadata,
                rows: list[int]) -> torch.Tensor | None:
        """The forward pass, then the logits [b, V] of the packed `rows` (None if none); the
        same on every rank (the LM head gathers the vocabulary slices on rank 0)."""
        hidden = self.forward(input_ids, metadata)  # [N, C]
        if not rows:
            return None
        if rows != list(range(hidden.shape[0])):  # a decode step samples every row, in order
            hidden = hidden[rows]
        return self.model.compute_logits(hidden)

    def broadcast(self, input_ids: torch.Tensor, batch: ScheduledBatch,
                  metadata: AttentionMetadata, rows: list[int]) -> None:
        """Tell the other ranks what this step runs: nothing to tell with one rank."""

    def greedy_in_c(self, batch: ScheduledBatch) -> tuple[list[int], list[float]] | None:
        """A decode step whose every request is plain greedy, in one call into C from the
        token ids to the chosen tokens (the layers, the LM head, the argmax:
        engine/native_decode.py), with no metadata tensors made for it -> (tokens,
        logprobs); None where that cannot run, and `run` goes the usual way. No request of
        such a step asked for log-probabilities, so none are computed: the logprobs are NaN,
        and no Sequence keeps them."""
        if self.native is None or not isinstance(self.sampler, GreedySampler):
            return None
        seqs = batch.seqs
        params = [s.params for s in seqs]
        if (any(q != 1 for q in batch.q_lens) or not all(batch.sample_mask)
                or not self.sampler.takes(params) or not self.native.head_runs(len(seqs))):
            return None
        tokens, hidden = self.native.greedy_lists(*new_tokens(batch),
                                                  [s.page_table for s in seqs])
        if -1 in tokens:  # a row's largest logit is not finite
            with torch.inference_mode():
                logits = self.model.compute_logits(hidden)  # the sampler decides, as it would
                found = self.sampler(logits, params, [s.generator for s in seqs])
            return found[0].tolist(), found[1].tolist()
        self.sampler.last_top_logprobs = [None] * len(tokens)
        return tokens, [math.nan] * len(tokens)  # not kept: none asked (Sequence.append_token)

    def run(self, batch: ScheduledBatch) -> tuple[list[int], list[float]]:
        """Run one step -> (token, logprob) for each request in batch.sample_mask."""
        done = self.greedy_in_c(batch)  # on a CPU, maybe
        if done is not None:
            return done
        with torch.inference_mode():
            input_ids, metadata = self.prepare(batch)
            sampled = [i for i, s in enumerate(batch.sample_mask) if s]
            # each sampled request's last new token, a row of the packed batch
            rows = (metadata.qo_indptr[1:].long() - 1)[sampled].tolist()
            self.broadcast(input_ids, batch, metadata, rows)
            logits = self.compute(input_ids, metadata, rows)  # [b, V]
            if logits is None:
                return [], []
            seqs = [batch.seqs[i] for i in sampled]
            tokens, logprobs = self.sampler(
                logits, [s.params for s in seqs], [s.generator for s in seqs]
            )
        return tokens.tolist(), logprobs.tolist()
