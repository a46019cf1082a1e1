"""The three systems on the same requests: the minimodel engine, transformers' `generate` and the
no-cache loop of the reference, and the runs of one dtype across them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import torch

from minimodel import reference
from minimodel.bench.measure import free_memory, peak_memory, timed
from minimodel.bench.report import ratios
from minimodel.bench.settings import BenchSettings
from minimodel.bench.workloads import make_work
from minimodel.engine import LLM
from minimodel.hub import resolve_model
from minimodel.sampling import SamplingParams

# The workloads each system runs (run_dtype); N needs CUDA (make_work).
SYSTEM_WORKLOADS = {"engine": "ABCN", "transformers": "AB", "reference": "C"}


def greedy(n: int) -> SamplingParams:
    """Greedy decoding of exactly n new tokens: EOS ignored, as in every workload but N."""
    return SamplingParams(temperature=0.0, max_new_tokens=n, ignore_eos=True)


def engine_runs(settings: BenchSettings, dtype: torch.dtype, work: dict[str, Any],
                **llm_kwargs: Any) -> dict[str, Any]:
    """Workloads A, B, C (and N on CUDA) on one minimodel LLM."""
    device = settings.device
    if device == "cuda":  # room for nano-vllm's 256 concurrent requests
        llm_kwargs = {"max_num_seqs": 256, "max_num_batched_tokens": 16384, **llm_kwargs}
    out: dict[str, Any] = {}
    with peak_memory(device) as mem:
        llm = LLM(settings.model, device=device, dtype=dtype, num_pages=work["num_pages"],
                  page_size=settings.page_size, skip_tokenizer_init=True, **llm_kwargs)
        cfg = llm.cfg
        expected = (2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim
                    * dtype.itemsize * llm.kv_cache.page_size * llm.kv_cache.num_pages)
        out["kv_pool"] = {"bytes": llm.kv_cache.nbytes, "expected": expected,
                          "ok": llm.kv_cache.nbytes == expected,
                          "num_pages": llm.kv_cache.num_pages, "page_size": settings.page_size}
        out["backend"] = llm.backend_name
        out["cuda_graphs"] = llm.cuda_graphs_reason
        llm.generate([[1, 2, 3, 4]], greedy(4))  # warm-up
        if "A" in work:
            reqs = work["A"]
            outs, secs = timed(lambda: llm.generate(
                [r.prompt for r in reqs], [greedy(r.max_new_tokens) for r in reqs],
                use_tqdm=False), device)
            tokens = sum(len(o.token_ids) for o in outs)
            out["A"] = {"seconds": secs, "output_tokens": tokens, "tok_per_s": tokens / secs}
        if "B" in work:
            req = work["B"]
            runs = [llm.generate([req.prompt], greedy(req.max_new_tokens))[0].metrics
                    for _ in range(settings.repeats)]
            out["B"] = {"ttft_s": min(m.ttft_s for m in runs), "decode_tok_per_s": max(
                (m.generated_tokens - 1) / (m.e2e_s - m.ttft_s) for m in runs)}
        if "C" in work:
            req = work["C"]
            secs = min(timed(lambda: llm.generate([req.prompt], greedy(req.max_new_tokens)),
                             device)[1] for _ in range(settings.repeats))
            out["C"] = {"seconds": secs, "tok_per_s": req.max_new_tokens / secs}
        if "N" in work:
            reqs = work["N"]
            params = [SamplingParams(temperature=0.6, max_new_tokens=r.max_new_tokens,
                                     ignore_eos=True, seed=i) for i, r in enumerate(reqs)]
            outs, secs = timed(lambda: llm.generate([r.prompt for r in reqs], params), device)
            tokens = sum(len(o.token_ids) for o in outs)
            out["N"] = {"seconds": secs, "output_tokens": tokens, "tok_per_s": tokens / secs}
        llm = None  # free the weights and the pool before the next system loads
        free_memory()
    out["peak_gib"] = mem["peak_gib"]
    return out


def transformers_runs(settings: BenchSettings, dtype: torch.dtype,
                      work: dict[str, Any]) -> dict[str, Any]:
    """Workloads A and B with transformers' generate (greedy, EOS ignored)."""
    import transformers

    transformers.utils.logging.disable_progress_bar()

    device = settings.device
    out: dict[str, Any] = {"version": transformers.__version__}
    with peak_memory(device) as mem, torch.inference_mode():
        model = transformers.Qwen3ForCausalLM.from_pretrained(
            resolve_model(settings.model), dtype=dtype).to(device).eval()
        model.generation_config.eos_token_id = None  # ignore EOS, as the engine does

        def generate(ids: torch.Tensor, mask: torch.Tensor, n: int) -> torch.Tensor:
            return model.generate(ids, attention_mask=mask, max_new_tokens=n,
                                  min_new_tokens=n, do_sample=False, pad_token_id=0)

        one = torch.tensor([[1, 2, 3, 4]], device=device)
        generate(one, torch.ones_like(one), 4)  # warm-up
        if "A" in work:
            reqs = work["A"]
            ids, mask = left_pad([r.prompt for r in reqs], device)
            longest = max(r.max_new_tokens for r in reqs)
            _, secs = timed(lambda: generate(ids, mask, longest), device)
            tokens = sum(r.max_new_tokens for r in reqs)  # each request's own tokens only
            out["A"] = {"seconds": secs, "output_tokens": tokens, "tok_per_s": tokens / secs,
                        "padded_rows_x_steps": len(reqs) * longest}
        if "B" in work:
            req = work["B"]
            ids = torch.tensor([req.prompt], device=device)
            mask = torch.ones_like(ids)
            ttft = min(timed(lambda: generate(ids, mask, 1), device)[1]
                       for _ in range(settings.repeats))
            total = min(timed(lambda: generate(ids, mask, req.max_new_tokens), device)[1]
                        for _ in range(settings.repeats))
            out["B"] = {"ttft_s": ttft,
                        "decode_tok_per_s": (req.max_new_tokens - 1) / (total - ttft)}
        model = None  # free the weights before the next system loads
        free_memory()
    out["peak_gib"] = mem["peak_gib"]
    return out


def left_pad(prompts: list[list[int]], device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A left-padded batch [B, T] and its attention mask (0 on padding)."""
    T = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), T, dtype=torch.long)
    mask = torch.zeros(len(prompts), T, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, T - len(p):] = torch.tensor(p)
        mask[i, T - len(p):] = 1
    return ids.to(device), mask.to(device)


def reference_runs(settings: BenchSettings, dtype: torch.dtype,
                   work: dict[str, Any]) -> dict[str, Any]:
    """Workload C with the naive [B, T, C] model and the no-cache loop."""
    device = settings.device
    out: dict[str, Any] = {}
    with peak_memory(device) as mem:
        model = reference.Qwen3ForCausalLM.from_pretrained(settings.model, dtype=dtype,
                                                           device=device)
        req = work["C"]
        ids = torch.tensor([req.prompt], device=device)
        reference.generate(model, ids, max_new_tokens=2)  # warm-up
        new, secs = timed(lambda: reference.generate(model, ids,
                                                     max_new_tokens=req.max_new_tokens),
                          device)
        out["C"] = {"seconds": secs, "tok_per_s": len(new[0]) / secs}
        model = None  # free the weights before the next system loads
        free_memory()
    out["peak_gib"] = mem["peak_gib"]
    return out


def run_dtype(settings: BenchSettings, dtype_name: str, workloads: set[str],
              vocab: int) -> dict[str, Any]:
    """One dtype's results: each chosen system on the workloads it runs, then the ratios."""
    dtype = getattr(torch, dtype_name)
    work = make_work(settings, workloads, vocab)
    res: dict[str, Any] = {}

    def measure(name: str, fn: Callable[..., dict[str, Any]], *fn_args: Any,
                **kwargs: Any) -> None:
        if not settings.quiet:
            print(f"[{dtype_name}] {name} ...", flush=True)
        res[name] = fn(settings, dtype, *fn_args, **kwargs)
        if not settings.quiet:  # numbers as soon as they exist: a long run can be read early
            print(f"[{dtype_name}] {name}: {json.dumps(res[name])}", flush=True)

    systems = set(settings.systems)
    if "engine" in systems:
        measure("engine", engine_runs, work)
    if settings.device == "cuda" and "engine" in systems:
        light = {k: v for k, v in work.items() if k != "N"}
        measure("engine_torch_backend", engine_runs, light, attention_backend="torch",
                enforce_eager=True)
        measure("engine_eager", engine_runs, light, enforce_eager=True)
    if workloads & {"A", "B"} and "transformers" in systems:
        measure("transformers", transformers_runs, work)
    if "C" in workloads and "reference" in systems:
        measure("reference", reference_runs, work)
    res["ratios"] = ratios(res)
    return res
