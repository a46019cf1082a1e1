"""The benchmark card: what this machine allows for the model (measured bandwidth and matmul
peak, the batch-1 decode ceiling), then what the engine reaches against both."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

import torch

from minimodel.bench.measure import free_memory
from minimodel.bench.runners import greedy
from minimodel.bench.settings import BenchSettings
from minimodel.bench.workloads import card_workload, make_requests
from minimodel.config import Qwen3Config
from minimodel.engine import LLM
from minimodel.hub import resolve_model
from minimodel.kernels import roofline


def machine() -> dict[str, Any]:
    """The machine a report was measured on: platform, versions, threads, CPU (and its vector
    units), GPU."""
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


def bench_card(settings: BenchSettings, dtype: torch.dtype, vocab: int) -> dict[str, Any]:
    """The card of one dtype: what the hardware allows for this model, then what the engine
    reached (see `python -m minimodel bench --help`)."""
    cfg = Qwen3Config.from_pretrained(resolve_model(settings.model))
    work = card_workload(settings)
    device, repeats, page_size = settings.device, settings.repeats, settings.page_size
    cuda = device == "cuda"
    nbytes = (1024 if cuda else 512) * 2**20
    matmul_n = 4096 if cuda else 1024
    # best of 10: on a shared machine, other programs only ever make a run slower
    bandwidth = roofline.measure_bandwidth(nbytes, device, repeats=10)
    peak = roofline.measure_matmul_flops(matmul_n, dtype, device, repeats=10)
    params = cfg.num_parameters()
    context = work["decode_prompt"] + work["decode_tokens"] // 2  # mean context while decoding
    _, bytes_per_token = roofline.step_cost(cfg, 1, context, 1, dtype)
    ceiling = bandwidth / bytes_per_token

    longest = max(work["prefill_tokens"], work["decode_prompt"] + work["decode_tokens"])
    llm = LLM(settings.model, device=device, dtype=dtype, page_size=page_size,
              num_pages=-(-longest // page_size) + 8, skip_tokenizer_init=True,
              max_num_batched_tokens=max(4096, work["prefill_tokens"]))
    llm.generate([[1, 2, 3, 4]], greedy(4))  # warm-up
    decode_req = make_requests(1, (work["decode_prompt"],) * 2, (work["decode_tokens"],) * 2,
                               seed=3, vocab=vocab)[0]
    decode = max((m.generated_tokens - 1) / (m.e2e_s - m.ttft_s) for m in (
        llm.generate([decode_req.prompt], greedy(decode_req.max_new_tokens))[0].metrics
        for _ in range(repeats)))
    prefill_req = make_requests(1, (work["prefill_tokens"],) * 2, (1, 1), seed=4, vocab=vocab)[0]
    ttft = min(llm.generate([prefill_req.prompt], greedy(1))[0].metrics.ttft_s
               for _ in range(repeats))
    prefill_flops, _ = roofline.step_cost(cfg, work["prefill_tokens"], work["prefill_tokens"],
                                          1, dtype)
    backend = llm.backend_name
    llm.close()
    free_memory()
    return {
        "model": settings.model, "dtype": str(dtype).removeprefix("torch."), "device": device,
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


def run_card(settings: BenchSettings, dtypes: list[str], vocab: int, command: str,
             out: Path) -> int:
    """Print one card per dtype, write them to `out` (--out), and end with one line of JSON."""
    info = machine()
    cards = {}
    for name in dtypes:
        cards[name] = bench_card(settings, getattr(torch, name), vocab)
        print(format_card(cards[name], info), flush=True)
    report = {"machine": info, "command": command, "cards": cards}
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report))
    return 0
