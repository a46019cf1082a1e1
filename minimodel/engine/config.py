"""EngineConfig: every setting of one engine, checked in one place and frozen.

`LLM(...)` turns its keyword arguments into an EngineConfig once (`EngineConfig.create`); the
scheduler, the runner and every tensor-parallel worker are built from that one object, as
vLLM's and nano-vllm's engines are. Nothing is resolved twice: the model's folder and config,
the device and dtype, the attention backend, whether decode steps replay CUDA graphs, the pool.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.multiprocessing as mp

from minimodel.config import Qwen3Config, eos_token_ids
from minimodel.engine import cuda_graph
from minimodel.engine.flashinfer_env import select_backend
from minimodel.engine.kv_cache import KVCache, pages_needed
from minimodel.engine.quantization import check_quantization
from minimodel.hub import resolve_model
from minimodel.layers import TPConfigError, check_tensor_parallel_size

CPU_KV_CACHE_BYTES = 1 << 30  # default pool budget on CPU: 1 GiB
GPU_MEMORY_UTILIZATION = 0.9  # default on CUDA: the pool takes what is left up to 90% of memory
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def check_settings(settings: dict[str, object]) -> dict[str, object]:
    """`LLM(model, **settings)`'s keywords, all of them known to EngineConfig.create (a
    TypeError names the unknown one and lists the others)."""
    known = list(inspect.signature(EngineConfig.create).parameters)[1:]  # after `model`
    unknown = [name for name in settings if name not in known]
    if unknown:
        raise TypeError(f"LLM() got an unexpected keyword argument {unknown[0]!r}; its settings "
                        f"are model, {', '.join(known)}.")
    return settings


@dataclass(frozen=True)
class EngineConfig:
    """One engine's settings, resolved and checked (see `create` and `LLM`'s docstring)."""

    model: str  # as the user named it
    folder: Path  # its checkpoint folder
    hf_config: Qwen3Config  # the folder's config.json
    device: torch.device
    dtype: torch.dtype
    attention_backend: str  # "torch" or "flashinfer", resolved from "auto"
    backend_reason: str  # why that backend
    page_size: int
    num_pages: int | None  # pages lent to requests; None until sized from kv_cache_bytes
    kv_cache_bytes: int | None  # the pool's budget when num_pages was not given
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    graphs_off: str | None  # why decode steps replay no CUDA graphs; None: they do
    skip_tokenizer_init: bool
    tensor_parallel_size: int
    eos_token_ids: frozenset[int]
    threads_per_rank: int  # torch threads of each rank: this process's, split between ranks
    quantization: str | None  # None, "int8" or "int4": weight-only (engine/quantization.py)
    tune_kernels: bool  # on a CPU, each product the fastest measured way (kernel_choice.py)
    enable_prefix_caching: bool  # full pages kept in a radix tree and shared (radix_cache.py)
    # Speculative decoding (engine/spec_decode.py): "ngram", a draft model's name or folder,
    # or None; draft tokens checked per request and step (0 without speculation).
    speculative_model: str | None = None
    num_speculative_tokens: int = 0

    @classmethod
    def create(
        cls,
        model: str | os.PathLike[str] = "tiny",
        device: torch.device | str | None = None,
        dtype: torch.dtype | str | None = None,
        attention_backend: str = "auto",
        page_size: int = 16,
        max_num_seqs: int = 64,
        num_pages: int | None = None,
        max_num_batched_tokens: int = 4096,
        max_model_len: int | None = None,
        kv_cache_bytes: int | None = None,
        enforce_eager: bool = False,
        skip_tokenizer_init: bool = False,
        tensor_parallel_size: int = 1,
        quantization: str | None = None,
        tune_kernels: bool = True,
        enable_prefix_caching: bool = True,
        speculative_model: str | os.PathLike[str] | None = None,
        num_speculative_tokens: int | None = None,
    ) -> EngineConfig:
        """Check every setting before anything is loaded; a ValueError names the one that is
        wrong and what it may be (TPConfigError, a ValueError, for tensor_parallel_size)."""
        for name, value in (("page_size", page_size), ("max_num_seqs", max_num_seqs),
                            ("max_num_batched_tokens", max_num_batched_tokens)):
            if not _is_int(value) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")
        if kv_cache_bytes is not None and (not _is_int(kv_cache_bytes) or kv_cache_bytes < 1):
            raise ValueError(f"kv_cache_bytes must be None or an integer >= 1 (bytes), got "
                             f"{kv_cache_bytes!r}.")
        for name, flag in (("enforce_eager", enforce_eager),
                           ("skip_tokenizer_init", skip_tokenizer_init),
                           ("tune_kernels", tune_kernels),
                           ("enable_prefix_caching", enable_prefix_caching)):
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be True or False, got {flag!r}.")
        dev = resolve_device(device)
        quantization = check_quantization(quantization, dev)
        folder = resolve_model(model)
        hf_config = Qwen3Config.from_pretrained(folder)
        torch_dtype = resolve_dtype(dtype, dev)
        tp = check_tensor_parallel_size(tensor_parallel_size, hf_config, dev.type,
                                        available_ranks(dev))
        if tp > 1:
            refuse_inside_a_worker()
        if tp > 1 and dev.type == "cuda" and (dev.index or 0) != 0:
            raise TPConfigError("With tensor_parallel_size > 1, rank r runs on cuda:r; pass "
                                "device='cuda' (or 'cuda:0').")
        context = resolve_max_model_len(max_model_len, hf_config)
        backend, reason = select_backend(attention_backend, dev, torch_dtype, hf_config.head_dim)
        graphs_off = "tensor_parallel_size > 1" if tp > 1 else cuda_graph.graphs_off_reason(
            enforce_eager, dev, backend)
        if num_pages is not None and (not _is_int(num_pages) or num_pages < 1):
            raise ValueError(f"num_pages must be an integer >= 1 or None, got {num_pages!r}.")
        speculative_model, k = check_speculation(speculative_model, num_speculative_tokens,
                                                 hf_config, tp)
        return cls(
            model=str(model), folder=folder, hf_config=hf_config, device=dev, dtype=torch_dtype,
            attention_backend=backend, backend_reason=reason, page_size=page_size,
            num_pages=num_pages, kv_cache_bytes=kv_cache_bytes, max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens, max_model_len=context,
            graphs_off=graphs_off, skip_tokenizer_init=skip_tokenizer_init,
            tensor_parallel_size=tp,
            eos_token_ids=frozenset(eos_token_ids(folder, hf_config.eos_token_id) or ()),
            threads_per_rank=max(1, torch.get_num_threads() // tp),
            quantization=quantization, tune_kernels=tune_kernels,
            enable_prefix_caching=enable_prefix_caching,
            speculative_model=speculative_model, num_speculative_tokens=k,
        )

    @property
    def reserved_pages(self) -> int:
        """Pages of the pool never lent to a request: the padding page of graph replays."""
        return 0 if self.graphs_off else 1

    def with_pool(self) -> EngineConfig:
        """This config with num_pages settled: as given, or what kv_cache_bytes holds (on
        CUDA by default: the memory left after the weights, up to 90%), never more than
        max_num_seqs full-length requests could use. Called once the weights are loaded."""
        if self.num_pages is not None:
            return self
        budget = self.kv_cache_bytes
        if budget is None:
            if self.device.type == "cuda":
                free, total = torch.cuda.mem_get_info(self.device)
                budget = int(free - (1 - GPU_MEMORY_UTILIZATION) * total)
            else:
                budget = CPU_KV_CACHE_BYTES
        most = self.max_num_seqs * pages_needed(self.max_model_len, self.page_size)
        fits = KVCache.num_pages_for_budget(self.hf_config, self.page_size, self.dtype,
                                            budget) - self.reserved_pages
        pages = min(fits, most)
        if pages < 1:
            raise ValueError(f"A KV cache budget of {budget} bytes holds no page for requests "
                             f"(besides {self.reserved_pages} reserved); raise it.")
        return dataclasses.replace(self, num_pages=pages)


MAX_SPECULATIVE_TOKENS = 16


def check_speculation(model: object, k: object, target: Qwen3Config, tp: int
                      ) -> tuple[str | None, int]:
    """(speculative_model, num_speculative_tokens) checked: both or neither; k from 1 to
    MAX_SPECULATIVE_TOKENS; a draft model that speaks the target's vocabulary; one rank."""
    if model is None and k is None:
        return None, 0
    if model is None:
        raise ValueError(f"num_speculative_tokens={k!r} needs a speculative_model: 'ngram' "
                         "(prompt lookup) or a draft model's name or folder.")
    if not isinstance(model, (str, os.PathLike)) or not str(model):
        raise ValueError(f"speculative_model must be 'ngram' or a draft model's name or "
                         f"folder, got {model!r}.")
    if not _is_int(k) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:  # type: ignore[operator]
        raise ValueError(f"num_speculative_tokens must be an integer from 1 to "
                         f"{MAX_SPECULATIVE_TOKENS} with speculative_model={str(model)!r}, "
                         f"got {k!r}.")
    if tp > 1:
        raise ValueError("Speculative decoding runs with tensor_parallel_size=1 here; drop "
                         "speculative_model or tensor_parallel_size.")
    model = str(model)
    if model != "ngram":
        folder = resolve_model(model)
        vocab = folder / "draft_vocab.json"
        size = (json.loads(vocab.read_text())["target_vocab_size"] if vocab.is_file()
                else Qwen3Config.from_pretrained(folder).vocab_size)
        if size != target.vocab_size:
            raise ValueError(f"The draft model {model!r} has a vocabulary of {size} ids, the "
                             f"target {target.vocab_size}: a draft must use the target's "
                             "tokenizer.")
    return model, k  # type: ignore[return-value]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def resolve_dtype(dtype: torch.dtype | str | None, device: torch.device) -> torch.dtype:
    """The engine computes in a floating-point dtype: float32, bfloat16 or float16."""
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, str) and dtype.removeprefix("torch.") in DTYPES:
        return DTYPES[dtype.removeprefix("torch.")]
    if dtype in DTYPES.values():
        return dtype  # type: ignore[return-value]
    raise ValueError(f"dtype {dtype!r} is not one the engine computes in; use 'float32', "
                     "'bfloat16' or 'float16' (or the torch dtypes).")


def resolve_device(device: torch.device | str | None) -> torch.device:
    """The device to run on: CUDA when there is one, else the CPU; a ValueError for a name
    that is no device, or a CUDA device this machine does not have."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device {device!r} is not a device; use 'cpu', 'cuda' or 'cuda:N'."
                         ) from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r}: the engine runs on 'cpu' or 'cuda' only.")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: no CUDA device is visible here (torch "
                             f"{torch.__version__}, torch.cuda.is_available() is False); use "
                             "device='cpu'.")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: this machine has {torch.cuda.device_count()} "
                             "CUDA device(s), numbered from 0.")
    return dev


def resolve_max_model_len(asked: object, cfg: Qwen3Config) -> int:
    """The context limit: the config's, or a smaller one asked for."""
    most = cfg.max_position_embeddings
    if asked is None:
        return most
    if not _is_int(asked) or asked < 1:
        raise ValueError(f"max_model_len must be None or an integer >= 1, got {asked!r}.")
    if asked > most:
        raise ValueError(f"max_model_len={asked} is longer than the model's context "
                         f"(max_position_embeddings={most} in config.json); use at most {most}.")
    return asked


def available_ranks(device: torch.device) -> int:
    """How many ranks this machine can run: GPUs on CUDA, CPU cores (this process may use) else."""
    if device.type == "cuda":
        return torch.cuda.device_count()
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


GUARD_HINT = (
    "Each worker process starts by importing the main script again (multiprocessing's spawn), "
    "so a script that makes LLM(tensor_parallel_size > 1) must do it under "
    '`if __name__ == "__main__":`; otherwise every worker would start workers of its own.')


def refuse_inside_a_worker() -> None:
    """A worker that, while it imports the main script, meets the script's own
    LLM(tensor_parallel_size=N) stops there, saying why, instead of starting workers."""
    # spawn names the child before it imports the main script: the name is already ours
    if mp.current_process().name.startswith("minimodel-tp-rank"):
        raise RuntimeError(f"A tensor-parallel worker was asked to start workers: {GUARD_HINT}")
