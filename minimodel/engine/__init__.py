"""The engine of chapters 7-8: packed batches, paged KV cache, continuous batching.

Modules, one idea each:
    config.py       EngineConfig: every setting checked once, frozen, shared by all the parts
    model.py        Qwen3 on the packed [N, C] layout (merged projections, fused norms)
    kv_cache.py     the page pool per layer and the page allocator
    attention.py    per-step attention metadata and the torch / flashinfer backends
    flashinfer_env.py  can FlashInfer run here (CUDA, kernels, compiler)? the backend choice
    sequence.py     one request inside the engine
    scheduler.py    continuous batching: admission, chunked prefill, decode, preemption
    runner.py       one scheduled batch -> model forward -> sampled tokens (one rank's shard)
    parallel.py     tensor parallelism: rank 0's runner broadcasts each step to worker processes
    detokenizer.py  incremental text that never splits a character
    cuda_graph.py   decode CUDA graphs per batch size
    outputs.py      RequestOutput (vLLM's shape: .outputs, CompletionOutput, Logprob), metrics
    llm.py          LLM: requests in, generate / chat / stream / step
"""

from minimodel.engine.attention import (
    AttentionMetadata,
    FlashInferBackend,
    TorchBackend,
    build_metadata,
)
from minimodel.engine.config import EngineConfig
from minimodel.engine.flashinfer_env import backend_report
from minimodel.engine.kv_cache import KVCache, PageAllocator
from minimodel.engine.llm import LLM, StepError
from minimodel.engine.model import PackedQwen3ForCausalLM
from minimodel.engine.outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from minimodel.engine.scheduler import ScheduledBatch, Scheduler
from minimodel.engine.sequence import Sequence

__all__ = [
    "LLM",
    "AttentionMetadata",
    "CompletionOutput",
    "EngineConfig",
    "FlashInferBackend",
    "KVCache",
    "Logprob",
    "PageAllocator",
    "PackedQwen3ForCausalLM",
    "RequestMetrics",
    "RequestOutput",
    "ScheduledBatch",
    "Scheduler",
    "Sequence",
    "StepError",
    "TorchBackend",
    "backend_report",
    "build_metadata",
]
