"""Side-by-side benchmark: the minimodel engine vs transformers `generate` vs the naive loop.

    python -m minimodel bench                       # CPU: float32 and bfloat16, workloads A, B, C
    python -m minimodel.bench ...                   # the same
    python -m minimodel bench --device cuda         # + FlashInfer vs torch, CUDA graphs, nano-vllm
    python -m minimodel bench --card                # the benchmark card only (a minute on CPU)

Workloads (same model, same requests, same dtype and threads for every system):
  A  throughput: 16 requests, prompt lengths uniform in [32, 256], output lengths uniform in
     [16, 128], ignore EOS, seed 0. transformers runs them as one left-padded batch (what its
     users do); only each request's own output tokens count.
  B  latency: one request, prompt 128, 64 new tokens: time to first token and decode tokens/s.
  C  the lesson: one request (prompt 16), 256 new tokens: the engine vs the no-cache loop that
     recomputes the whole prefix every step.
  N  (CUDA only) nano-vllm's workload: 256 requests, input and output lengths uniform in
     [100, 1024], temperature 0.6, ignore EOS.
Prints a table, writes JSON (--out) and a PNG plot next to it.

The card (--card) first measures what the hardware allows, then what the engine reaches: the
model's parameters, weight bytes and KV bytes per token; the memory bandwidth and matmul FLOP/s
measured here (minimodel.kernels.roofline); the batch-1 decode ceiling, bandwidth / bytes read
per token (every weight once, plus the KV cache of the context); the engine's measured decode
tokens/s and its fraction of that ceiling (memory-bandwidth utilisation); its prefill FLOP/s and
their fraction of the measured matmul peak. Its last line is the card as JSON.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

PROMPT_VOCAB = 151643  # draw prompt ids among the real tokens of Qwen3's vocabulary


@dataclass
class Request:
    prompt: list[int]
    max_new_tokens: int


def make_requests(
    n: int, prompt_range: tuple[int, int], output_range: tuple[int, int], seed: int, vocab: int
) -> list[Request]:
    """n requests with lengths drawn uniformly (inclusive ranges) from a seeded generator."""
    rng = np.random.RandomState(seed)
    prompt_lens = rng.randint(prompt_range[0], prompt_range[1] + 1, size=n)
    output_lens = rng.randint(output_range[0], output_range[1] + 1, size=n)
    return [
        Request(rng.randint(0, vocab, size=int(p)).tolist(), int(o))
        for p, o in zip(prompt_lens, output_lens, strict=True)
    ]


# --- measuring -------------------------------------------------------------------------------


@contextmanager
def peak_memory(device: str) -> Iterator[dict[str, float]]:
    """Peak memory while the block runs, in GiB: GPU allocated on CUDA, else process RSS
    (sampled every 20 ms)."""
    result: dict[str, float] = {}
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        yield result
        torch.cuda.synchronize()
        result["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        return
    import psutil

    proc, peak, stop = psutil.Process(), [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            stop.wait(0.02)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield result
    finally:
        stop.set()
        thread.join()
        result["peak_gib"] = max(peak[0], proc.memory_info().rss) / 2**30


def timed(fn: Callable[[], Any], device: str) -> tuple[Any, float]:
    """(fn(), seconds), synchronizing CUDA around it."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# --- the systems -------------------------------------------------------------------------------


def engine_runs(args: argparse.Namespace, dtype: torch.dtype, work: dict[str, Any],
                **llm_kwargs: Any) -> dict[str, Any]:
    """Workloads A, B, C (and N on CUDA) on one minimodel LLM."""
    from minimodel.engine import LLM
    from minimodel.sampling import SamplingParams

    def greedy(n: int) -> SamplingParams:
        return SamplingParams(temperature=0.0, max_new_tokens=n, ignore_eos=True)

    if args.device == "cuda":  # room for nano-vllm's 256 concurrent requests
        llm_kwargs = {"max_num_seqs": 256, "max_num_batched_tokens": 16384, **llm_kwargs}
    out: dict[str, Any] = {}
    with peak_memory(args.device) as mem:
        llm = LLM(args.model, device=args.device, dtype=dtype, num_pages=work["num_pages"],
                  page_size=args.page_size, skip_tokenizer_init=True, **llm_kwargs)
        cfg = llm.cfg
        expected = (2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim
                    * dtype.itemsize * llm.kv_cache.page_size * llm.kv_cache.num_pages)
        out["kv_pool"] = {"bytes": llm.kv_cache.nbytes, "expected": expected,
                          "ok": llm.kv_cache.nbytes == expected,
                          "num_pages": llm.kv_cache.num_pages, "page_size": args.page_size}
        out["backend"] = llm.backend_name
        out["cuda_graphs"] = llm.cuda_graphs_reason
        llm.generate([[1, 2, 3, 4]], greedy(4))  # warm-up
        if "A" in work:
            reqs = work["A"]
            outs, secs = timed(lambda: llm.generate(
                [r.prompt for r in reqs], [greedy(r.max_new_tokens) for r in reqs],
                use_tqdm=False), args.device)
            tokens = sum(len(o.token_ids) for o in outs)
            out["A"] = {"seconds": secs, "output_tokens": tokens, "tok_per_s": tokens / secs}
        if "B" in work:
            req = work["B"]
            runs = [llm.generate([req.prompt], greedy(req.max_new_tokens))[0].metrics
                    for _ in range(args.repeats)]
            out["B"] = {"ttft_s": min(m.ttft_s for m in runs), "decode_tok_per_s": max(
                (m.generated_tokens - 1) / (m.e2e_s - m.ttft_s) for m in runs)}
        if "C" in work:
            req = work["C"]
            secs = min(timed(lambda: llm.generate([req.prompt], greedy(req.max_new_tokens)),
                             args.device)[1] for _ in range(args.repeats))
            out["C"] = {"seconds": secs, "tok_per_s": req.max_new_tokens / secs}
        if "N" in work:
            reqs = work["N"]
            params = [SamplingParams(temperature=0.6, max_new_tokens=r.max_new_tokens,
                                     ignore_eos=True, seed=i) for i, r in enumerate(reqs)]
            outs, secs = timed(lambda: llm.generate([r.prompt for r in reqs], params),
                               args.device)
            tokens = sum(len(o.token_ids) for o in outs)
            out["N"] = {"seconds": secs, "output_tokens": tokens, "tok_per_s": tokens / secs}
        llm = None  # free the weights and the pool before the next system loads
        free_memory()
    out["peak_gib"] = mem["peak_gib"]
    return out


def transformers_runs(args: argparse.Namespace, dtype: torch.dtype,
                      work: dict[str, Any]) -> dict[str, Any]:
    """Workloads A and B with transformers' generate (greedy, EOS ignored)."""
    import transformers

    from minimodel.hub import resolve_model

    transformers.utils.logging.disable_progress_bar()

    out: dict[str, Any] = {"version": transformers.__version__}
    with peak_memory(args.device) as mem, torch.inference_mode():
        model = transformers.Qwen3ForCausalLM.from_pretrained(
            resolve_model(args.model), dtype=dtype).to(args.device).eval()
        model.generation_config.eos_token_id = None  # ignore EOS, as the engine does

        def generate(ids: torch.Tensor, mask: torch.Tensor, n: int) -> torch.Tensor:
            return model.generate(ids, attention_mask=mask, max_new_tokens=n,
                                  min_new_tokens=n, do_sample=False, pad_token_id=0)

        one = torch.tensor([[1, 2, 3, 4]], device=args.device)
        generate(one, torch.ones_like(one), 4)  # warm-up
        if "A" in work:
            reqs = work["A"]
            ids, mask = left_pad([r.prompt for r in reqs], args.device)
            longest = max(r.max_new_tokens for r in reqs)
            _, secs = timed(lambda: generate(ids, mask, longest), args.device)
            tokens = sum(r.max_new_tokens for r in reqs)  # each request's own tokens only
            out["A"] = {"seconds": secs, "output_tokens": tokens, "tok_per_s": tokens / secs,
                        "padded_rows_x_steps": len(reqs) * longest}
        if "B" in work:
            req = work["B"]
            ids = torch.tensor([req.prompt], device=args.device)
            mask = torch.ones_like(ids)
            ttft = min(timed(lambda: generate(ids, mask, 1), args.device)[1]
                       for _ in range(args.repeats))
            total = min(timed(lambda: generate(ids, mask, req.max_new_tokens), args.device)[1]
                        for _ in range(args.repeats))
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


def reference_runs(args: argparse.Namespace, dtype: torch.dtype,
                   work: dict[str, Any]) -> dict[str, Any]:
    """Workload C with the naive [B, T, C] model and the no-cache loop."""
    import minimodel as mm

    out: dict[str, Any] = {}
    with peak_memory(args.device) as mem:
        model = mm.reference.Qwen3ForCausalLM.from_pretrained(args.model, dtype=dtype,
                                                              device=args.device)
        req = work["C"]
        ids = torch.tensor([req.prompt], device=args.device)
        mm.reference.generate(model, ids, max_new_tokens=2)  # warm-up
        new, secs = timed(lambda: mm.reference.generate(model, ids,
                                                        max_new_tokens=req.max_new_tokens),
                          args.device)
        out["C"] = {"seconds": secs, "tok_per_s": len(new[0]) / secs}
        model = None  # free the weights before the next system loads
        free_memory()
    out["peak_gib"] = mem["peak_gib"]
    return out


# --- the card --------------------------------------------------------------------------------


def card_workload(args: argparse.Namespace) -> dict[str, int]:
    """Prompt and output lengths of the card's decode and prefill runs (longer on a GPU)."""
    cuda = args.device == "cuda"
    return {
        "decode_prompt": args.card_prompt,
        "decode_tokens": args.card_decode_tokens or (256 if cuda else 32),
        "prefill_tokens": args.card_prefill_tokens or (2048 if cuda else 256),
    }


def bench_card(args: argparse.Namespace, dtype: torch.dtype, vocab: int) -> dict[str, Any]:
    """The card of one dtype: what the hardware allows for this model, then what the engine
    reached (see the module docstring)."""
    from minimodel.config import Qwen3Config
    from minimodel.engine import LLM
    from minimodel.hub import resolve_model
    from minimodel.kernels import roofline
    from minimodel.sampling import SamplingParams

    cfg = Qwen3Config.from_pretrained(resolve_model(args.model))
    work = card_workload(args)
    cuda = args.device == "cuda"
    nbytes = (1024 if cuda else 512) * 2**20
    matmul_n = 4096 if cuda else 1024
    # best of 10: on a shared machine, other programs only ever make a run slower
    bandwidth = roofline.measure_bandwidth(nbytes, args.device, repeats=10)
    peak = roofline.measure_matmul_flops(matmul_n, dtype, args.device, repeats=10)
    params = cfg.num_parameters()
    context = work["decode_prompt"] + work["decode_tokens"] // 2  # mean context while decoding
    _, bytes_per_token = roofline.step_cost(cfg, 1, context, 1, dtype)
    ceiling = bandwidth / bytes_per_token

    longest = max(work["prefill_tokens"], work["decode_prompt"] + work["decode_tokens"])
    llm = LLM(args.model, device=args.device, dtype=dtype, page_size=args.page_size,
              num_pages=-(-longest // args.page_size) + 8, skip_tokenizer_init=True,
              max_num_batched_tokens=max(4096, work["prefill_tokens"]))

    def greedy(n: int) -> SamplingParams:
        return SamplingParams(temperature=0.0, max_new_tokens=n, ignore_eos=True)

    llm.generate([[1, 2, 3, 4]], greedy(4))  # warm-up
    decode_req = make_requests(1, (work["decode_prompt"],) * 2, (work["decode_tokens"],) * 2,
                               seed=3, vocab=vocab)[0]
    decode = max((m.generated_tokens - 1) / (m.e2e_s - m.ttft_s) for m in (
        llm.generate([decode_req.prompt], greedy(decode_req.max_new_tokens))[0].metrics
        for _ in range(args.repeats)))
    prefill_req = make_requests(1, (work["prefill_tokens"],) * 2, (1, 1), seed=4, vocab=vocab)[0]
    ttft = min(llm.generate([prefill_req.prompt], greedy(1))[0].metrics.ttft_s
               for _ in range(args.repeats))
    prefill_flops, _ = roofline.step_cost(cfg, work["prefill_tokens"], work["prefill_tokens"],
                                          1, dtype)
    backend = llm.backend_name
    llm.close()
    free_memory()
    return {
        "model": args.model, "dtype": str(dtype).removeprefix("torch."), "device": args.device,
        "backend": backend, "parameters": params, "weight_bytes": params * dtype.itemsize,
        "kv_bytes_per_token": cfg.kv_bytes_per_token(dtype),
        "bandwidth_bytes_per_s": bandwidth, "bandwidth_probe_bytes": nbytes,
        "matmul_flops_per_s": peak, "matmul_n": matmul_n,
        "decode_context_tokens": context, "decode_bytes_per_token": bytes_per_token,
        "decode_ceiling_tok_per_s": ceiling, **work,
        "decode_tok_per_s": decode, "bandwidth_utilisation": decode / ceiling,
        "prefill_s": ttft, "prefill_flops": prefill_flops,
        "prefill_flops_per_s": prefill_flops / ttft,
        "prefill_fraction_of_matmul_peak": prefill_flops / ttft / peak,
    }


def format_card(c: dict[str, Any], machine_info: dict[str, Any]) -> str:
    """The card as text: what the hardware allows, then what was reached."""
    flags = "/".join(machine_info.get("cpu_flags", [])) or "no AVX2"
    where = machine_info.get("gpu") if c["device"] == "cuda" else (
        f"{machine_info['cpu']} with {flags}, {machine_info['torch_threads']} threads")
    return "\n".join([
        f"== minimodel bench card: {c['model']}, {c['dtype']}, {c['device']} ({where}), "
        f"{c['backend']} attention ==",
        f"model      {c['parameters'] / 1e6:.1f} M parameters = {c['weight_bytes'] / 1e9:.3f} GB "
        f"of weights; KV cache {c['kv_bytes_per_token'] / 1024:.1f} KiB per token",
        f"hardware   memory bandwidth {c['bandwidth_bytes_per_s'] / 1e9:.2f} GB/s (measured: sum "
        f"over {c['bandwidth_probe_bytes'] / 2**20:.0f} MiB); matmul "
        f"{c['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s (measured: {c['matmul_n']}^3, "
        f"{c['dtype']})",
        f"ceiling    batch-1 decode reads {c['decode_bytes_per_token'] / 1e9:.3f} GB per token "
        f"(every weight once + the KV of {c['decode_context_tokens']} tokens): at most "
        f"{c['decode_ceiling_tok_per_s']:.2f} tok/s",
        f"decode     {c['decode_tok_per_s']:.2f} tok/s measured (prompt {c['decode_prompt']}, "
        f"{c['decode_tokens']} new tokens) = {c['bandwidth_utilisation']:.0%} of the ceiling "
        "(memory-bandwidth utilisation)",
        f"prefill    {c['prefill_tokens']} tokens in {c['prefill_s']:.3f} s = "
        f"{c['prefill_flops_per_s'] / 1e9:.1f} GFLOP/s = "
        f"{c['prefill_fraction_of_matmul_peak']:.0%} of the measured matmul peak",
    ])


def run_card(args: argparse.Namespace, dtypes: list[str], vocab: int, command: str,
             out: Path) -> int:
    """Print one card per dtype, write them to `out` (--out), and end with one line of JSON."""
    info = machine()
    cards = {}
    for name in dtypes:
        cards[name] = bench_card(args, getattr(torch, name), vocab)
        print(format_card(cards[name], info), flush=True)
    report = {"machine": info, "command": command, "cards": cards}
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report))
    return 0


# --- one run -------------------------------------------------------------------------------

# The workloads each system runs (run_dtype); N needs CUDA (make_work).
SYSTEM_WORKLOADS = {"engine": "ABCN", "transformers": "AB", "reference": "C"}


def check_plan(args: argparse.Namespace, workloads: set[str]) -> None:
    """A ValueError when the chosen systems and workloads would measure nothing at all."""
    if "N" in workloads and args.device != "cuda":
        raise ValueError("workload N (nano-vllm's 256 requests) runs on CUDA only; add "
                         "--device cuda, or choose --workloads from A,B,C.")
    systems = args.systems.split(",")
    if not any(workloads & set(SYSTEM_WORKLOADS[name]) for name in systems):
        runs = "; ".join(f"{name} runs {','.join(w)}" for name, w in SYSTEM_WORKLOADS.items())
        raise ValueError(f"--systems {args.systems} run none of --workloads {args.workloads} "
                         f"({runs}); choose a system and a workload that meet.")


def writable_out(path: Path) -> Path:
    """--out's path, its folder made; a ValueError saying what to do when it cannot be written
    (checked before the measuring starts, not after it)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        file = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
        why = f"{file} is a file, not a folder" if file else err.strerror or str(err)
        raise ValueError(f"--out {path}: cannot make its folder {path.parent} ({why}); give "
                         "--out a path in a folder you can write.") from None
    if path.is_dir() or not os.access(path.parent, os.W_OK):
        what = "is a folder" if path.is_dir() else f"is in {path.parent}, which you cannot write"
        raise ValueError(f"--out {path} {what}; give --out a file path in a folder you can "
                         "write.")
    return path



def make_work(args: argparse.Namespace, workloads: set[str], vocab: int) -> dict[str, Any]:
    """The requests of each chosen workload, and a pool big enough that nothing is preempted."""
    work: dict[str, Any] = {}
    if "A" in workloads:
        work["A"] = make_requests(args.a_requests, (32, 256), (16, 128), seed=0, vocab=vocab)
    if "B" in workloads:
        work["B"] = make_requests(1, (128, 128), (64, 64), seed=1, vocab=vocab)[0]
    if "C" in workloads:
        work["C"] = make_requests(1, (16, 16), (args.c_tokens, args.c_tokens), seed=2,
                                  vocab=vocab)[0]
    if args.device == "cuda" and "N" in workloads:
        work["N"] = make_requests(256, (100, 1024), (100, 1024), seed=0, vocab=vocab)
    tokens = max(
        [sum(len(r.prompt) + r.max_new_tokens for r in work.get(k, [])) for k in ("A", "N")]
        + [len(work[k].prompt) + work[k].max_new_tokens for k in ("B", "C") if k in work]
        + [8]
    )
    work["num_pages"] = -(-tokens // args.page_size) + 16
    return work


def run_dtype(args: argparse.Namespace, dtype_name: str, workloads: set[str],
              vocab: int) -> dict[str, Any]:
    dtype = getattr(torch, dtype_name)
    work = make_work(args, workloads, vocab)
    res: dict[str, Any] = {}

    def measure(name: str, fn: Callable[..., dict[str, Any]], *fn_args: Any,
                **kwargs: Any) -> None:
        if not args.quiet:
            print(f"[{dtype_name}] {name} ...", flush=True)
        res[name] = fn(args, dtype, *fn_args, **kwargs)
        if not args.quiet:  # numbers as soon as they exist: a long run can be read early
            print(f"[{dtype_name}] {name}: {json.dumps(res[name])}", flush=True)

    systems = set(args.systems.split(","))
    if "engine" in systems:
        measure("engine", engine_runs, work)
    if args.device == "cuda" and "engine" in systems:
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


def ratios(res: dict[str, Any]) -> dict[str, float]:
    """The targets' ratios: A and B vs transformers, C vs the no-cache loop."""
    e, hf, ref = res.get("engine", {}), res.get("transformers", {}), res.get("reference", {})
    out = {}
    if "A" in e and "A" in hf:
        out["A_throughput_vs_transformers"] = e["A"]["tok_per_s"] / hf["A"]["tok_per_s"]
    if "B" in e and "B" in hf:
        out["B_decode_vs_transformers"] = e["B"]["decode_tok_per_s"] / hf["B"]["decode_tok_per_s"]
        out["B_ttft_transformers_over_engine"] = hf["B"]["ttft_s"] / e["B"]["ttft_s"]
    if "C" in e and "C" in ref:
        out["C_speedup_vs_no_cache"] = ref["C"]["seconds"] / e["C"]["seconds"]
    return out


TARGETS = {
    "A_throughput_vs_transformers": 2.0,
    "B_decode_vs_transformers": 1.0,
    "B_ttft_transformers_over_engine": 1.0,
    "C_speedup_vs_no_cache": 10.0,
}


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
            if line.startswith("flags"):  # the vector units that decide float32 vs bfloat16
                flags = set(line.split(":", 1)[1].split())
                info["cpu_flags"] = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
                                     if f in flags]
                break
    except OSError:
        pass
    info["cpu_count"] = os.cpu_count()
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def format_table(results: dict[str, Any]) -> str:
    """The results as a plain-text table, one block per dtype."""
    lines = []
    for dtype, res in results.items():
        e, hf, ref = res.get("engine", {}), res.get("transformers", {}), res.get("reference", {})
        lines.append(f"== {dtype} ==")
        lines.append(f"{'workload':42s} {'minimodel':>12s} {'transformers':>13s} "
                     f"{'no-cache':>10s}")

        def row(name: str, a: Any, b: Any = None, c: Any = None, fmt: str = "{:.2f}") -> None:
            cells = [fmt.format(x) if x is not None else "-" for x in (a, b, c)]
            lines.append(f"{name:42s} {cells[0]:>12s} {cells[1]:>13s} {cells[2]:>10s}")

        if "A" in e:
            row("A throughput (output tok/s)", e["A"]["tok_per_s"],
                hf.get("A", {}).get("tok_per_s"))
            row("A wall time (s)", e["A"]["seconds"], hf.get("A", {}).get("seconds"))
        if "B" in e:
            row("B time to first token (s)", e["B"]["ttft_s"], hf.get("B", {}).get("ttft_s"),
                fmt="{:.3f}")
            row("B decode (tok/s)", e["B"]["decode_tok_per_s"],
                hf.get("B", {}).get("decode_tok_per_s"))
        if "C" in e:
            row("C wall time (s)", e["C"]["seconds"], None, ref.get("C", {}).get("seconds"))
        if "N" in e:
            row("N nano-vllm workload (output tok/s)", e["N"]["tok_per_s"])
        row("peak memory (GiB)", e.get("peak_gib"), hf.get("peak_gib"), ref.get("peak_gib"))
        for key in ("engine_torch_backend", "engine_eager"):
            if key in res:
                v = res[key]
                row(f"{key}: A tok/s | B decode tok/s", v.get("A", {}).get("tok_per_s"),
                    v.get("B", {}).get("decode_tok_per_s"))
        pool = e.get("kv_pool")
        if pool:
            verdict = "ok" if pool["ok"] else "MISMATCH"
            lines.append(f"KV pool: {pool['num_pages']} pages x {pool['page_size']} tokens = "
                         f"{pool['bytes'] / 2**20:.1f} MiB; 2*L*Hkv*D*bytes*S*P = "
                         f"{pool['expected'] / 2**20:.1f} MiB -> {verdict}")
        for name, value in res["ratios"].items():
            target = TARGETS[name]
            verdict = "met" if value >= target else "MISSED"
            lines.append(f"  {name:36s} {value:7.2f}x  (target >= {target:.1f}x: {verdict})")
        lines.append("")
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    """Bars per workload and dtype: engine vs transformers vs the no-cache loop."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("A: throughput (output tok/s)", "A", "tok_per_s", ["engine", "transformers"]),
        ("B: decode (tok/s)", "B", "decode_tok_per_s", ["engine", "transformers"]),
        ("B: time to first token (s)", "B", "ttft_s", ["engine", "transformers"]),
        ("C: wall time (s), lower is better", "C", "seconds", ["engine", "reference"]),
    ]
    labels = {"engine": "minimodel", "transformers": "transformers", "reference": "no-cache"}
    dtypes = list(results)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
    for ax, (title, wl, key, systems) in zip(axes, panels, strict=True):
        width = 0.8 / len(systems)
        for j, system in enumerate(systems):
            values = [results[d].get(system, {}).get(wl, {}).get(key, 0.0) for d in dtypes]
            xs = [i + j * width for i in range(len(dtypes))]
            ax.bar(xs, values, width, label=labels[system])
        ax.set_xticks([i + width * (len(systems) - 1) / 2 for i in range(len(dtypes))], dtypes)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("dtype")
        ax.legend(fontsize=8)
    fig.suptitle(f"minimodel bench: {results[dtypes[0]]['model']} on "
                 f"{results[dtypes[0]]['device']}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from minimodel.cli_types import device_kind, int_at_least, names, positive_int

    p = argparse.ArgumentParser(prog="python -m minimodel bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="random:qwen3-0.6b")
    p.add_argument("--device", default="cpu", type=device_kind, help="cpu (default) or cuda")
    p.add_argument("--dtype", default=None, type=names(("float32", "bfloat16", "float16")),
                   help="float32, bfloat16 or both comma-separated (default: both on CPU, "
                        "bfloat16 on CUDA)")
    p.add_argument("--workloads", default="A,B,C", type=names(("A", "B", "C", "N"), upper=True),
                   help="comma-separated from A,B,C (and N on "
                   "CUDA, added by default there)")
    p.add_argument("--out", default=None, help="JSON path (default build/bench.json, with --card "
                   "build/bench-card.json); the PNG goes next to it")
    p.add_argument("--systems", default="engine,transformers,reference",
                   type=names(("engine", "transformers", "reference")),
                   help="which systems to run (to rerun one of them)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch threads (default: torch's)")
    p.add_argument("--page-size", type=positive_int, default=16)
    p.add_argument("--a-requests", type=positive_int, default=16, help="requests in workload A")
    p.add_argument("--c-tokens", type=positive_int, default=256,
                   help="new tokens in workload C; the no-cache loop is slow on CPU, shrink "
                        "it to save time (the printed results say so)")
    p.add_argument("--repeats", type=positive_int, default=2,
                   help="runs of B and of the engine's C; the best is kept (shared machines "
                        "are noisy). A and the no-cache loop run once")
    p.add_argument("--card", action="store_true",
                   help="only the benchmark card: measured bandwidth and matmul peak, the batch-1 "
                        "decode ceiling, and what the engine reaches against both")
    p.add_argument("--card-prompt", type=positive_int, default=128,
                   help="card: decode prompt length")
    p.add_argument("--card-decode-tokens", type=int_at_least(2), default=None,
                   help="card: new tokens of the decode run (default 32 on CPU, 256 on CUDA)")
    p.add_argument("--card-prefill-tokens", type=positive_int, default=None,
                   help="card: prompt length of the prefill run (default 256 on CPU, 2048 on "
                        "CUDA)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns 0 (the exit status)."""
    from minimodel.config import Qwen3Config
    from minimodel.hub import resolve_model

    args = parse_args(argv)  # argument types: a bad one is a usage error (exit 2)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtypes = (args.dtype or ("bfloat16" if args.device == "cuda" else "float32,bfloat16"))
    workloads = set(args.workloads.upper().split(","))
    if args.device == "cuda" and args.workloads == "A,B,C":
        workloads.add("N")
    if not args.card:
        check_plan(args, workloads)
    out = writable_out(Path(args.out or ("build/bench-card.json" if args.card
                                         else "build/bench.json")))
    vocab = min(PROMPT_VOCAB, Qwen3Config.from_pretrained(resolve_model(args.model)).vocab_size)
    command = "python -m minimodel bench " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.card:
        return run_card(args, dtypes.split(","), vocab, command, out)
    results: dict[str, Any] = {}
    report = {"machine": machine(), "command": command, "results": results}
    for dtype_name in dtypes.split(","):
        res = run_dtype(args, dtype_name, workloads, vocab)
        res.update(model=args.model, device=args.device, c_tokens=args.c_tokens)
        results[dtype_name] = res
        out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")  # so far
    note = ""
    if args.c_tokens != 256:
        note = (f"NOTE: workload C ran {args.c_tokens} new tokens instead of 256 (--c-tokens); "
                "the no-cache loop's cost grows with the square of the length, so the speedup "
                "at 256 tokens is larger.\n")
    if not args.quiet:
        print(format_table(results) + note)
    if not args.no_plot:
        plot(results, out.with_suffix(".png"))
    return 0


if __name__ == "__main__":  # through the command line's main: a user's error is one line
    from minimodel.__main__ import main as cli_main

    raise SystemExit(cli_main(["bench", *sys.argv[1:]]))
