"""The benchmark card: what this machine allows for the model (the memory roof, probed three
ways, and the matmul peak; the batch-1 decode ceiling), then what the engine reaches against
both: batch-1 decode and its memory-bandwidth utilisation, prefill, the decode curve over 1-32
requests, the kernels it chose, and the share of a decode step spent outside the products."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

import torch

from minimodel.bench.curve import add_floor, decode_bytes, decode_curve, weight_bytes
from minimodel.bench.floor import products_floor
from minimodel.bench.measure import free_memory
from minimodel.bench.overhead import step_profile
from minimodel.bench.prefix import PrefixWorkloads, format_prefix, prefix_report
from minimodel.bench.probes import measure_probes, probe_sum, roof
from minimodel.bench.report import card_targets, format_targets, plot_curve
from minimodel.bench.runners import greedy
from minimodel.bench.settings import FORMATS, BenchSettings, engine_format
from minimodel.bench.workloads import card_workload, make_requests
from minimodel.engine import LLM
from minimodel.kernels import roofline

# the vector units that decide how fast float32, bfloat16 and int8 products can run
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "amx_bf16", "amx_int8")

# Workloads P on the card: the benchmark's shapes, smaller (the full run is --workloads P).
CARD_PREFIX = PrefixWorkloads(system_tokens=256, questions=8, question_tokens=32, new_tokens=8,
                              turns=4, user_tokens=64)


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
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                info["cpu_flags"] = [f for f in CPU_FLAGS if f in flags]
                break
    except OSError:
        pass
    info["cpu_count"] = os.cpu_count()
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


PROBE_BYTES = {"cpu": 512 * 2**20, "cuda": 2**30}  # far larger than the caches


def hardware(device: str, dtypes: list[str]) -> dict[str, Any]:
    """What this machine allows: the three memory probes (probes.py) over buffers larger than
    the caches and the matmul FLOP/s in each dtype, each the best of 10 runs (on a shared
    machine, other programs only ever make a run slower)."""
    nbytes = PROBE_BYTES[device]
    matmul_n = 4096 if device == "cuda" else 1024
    probes, formulation = measure_probes(nbytes, device, repeats=10)
    flops = {name: roofline.measure_matmul_flops(matmul_n, getattr(torch, name), device,
                                                 repeats=10) for name in dtypes}
    return {"probes": probes, "gemv_formulation": formulation, "probe_bytes": nbytes,
            "matmul_flops_per_s": flops, "matmul_n": matmul_n}


def best_hardware(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two measurements of `hardware` merged: each probe and each peak the faster of the two."""
    probes = {k: max(a["probes"][k], b["probes"][k]) for k in a["probes"]}
    faster = b if b["probes"]["gemv"] > a["probes"]["gemv"] else a
    return {**a, "probes": probes, "gemv_formulation": faster["gemv_formulation"],
            "matmul_flops_per_s": {k: max(v, b["matmul_flops_per_s"][k])
                                   for k, v in a["matmul_flops_per_s"].items()}}


def start_engine(settings: BenchSettings, fmt: str) -> LLM:
    """An LLM in one format, its pool big enough for the card's runs, warmed up."""
    work = card_workload(settings)
    page_size = settings.page_size
    longest = max(work["prefill_tokens"], work["decode_prompt"] + work["decode_tokens"])
    curve_tokens = settings.curve_prompt + len(settings.curve_batches) * (settings.curve_steps + 1)
    num_pages = max(-(-longest // page_size),
                    max(settings.curve_batches) * -(-(curve_tokens + 8) // page_size)) + 8
    llm = LLM(settings.model, device=settings.device, page_size=page_size, num_pages=num_pages,
              skip_tokenizer_init=True, max_num_seqs=max(settings.curve_batches),
              max_num_batched_tokens=max(4096, work["prefill_tokens"]), **engine_format(fmt))
    llm.generate([[1, 2, 3, 4]], greedy(4))  # warm-up
    return llm


def decode_runs(settings: BenchSettings, llms: dict[str, LLM], vocab: int
                ) -> dict[str, list[dict[str, float]]]:
    """Batch-1 decode of the card's request, `repeats` times per format, the formats taking
    turns (so that a slow minute of a shared machine slows them all alike), each run right
    after a sum probe: the memory's speed at that moment."""
    work = card_workload(settings)
    req = make_requests(1, (work["decode_prompt"],) * 2, (work["decode_tokens"],) * 2, seed=3,
                        vocab=vocab)[0]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in llms}
    for _ in range(settings.repeats):
        for name, llm in llms.items():
            probe = probe_sum(PROBE_BYTES[settings.device], settings.device, repeats=3)
            m = llm.generate([req.prompt], greedy(req.max_new_tokens))[0].metrics
            runs[name].append({"sum_bytes_per_s": probe,
                               "tok_per_s": (m.generated_tokens - 1) / (m.e2e_s - m.ttft_s)})
    return runs


def bench_card(settings: BenchSettings, llm: LLM, fmt: str, vocab: int,
               runs: list[dict[str, float]]) -> dict[str, Any]:
    """What the engine reaches with one format (a dtype, or int8 / int4 weights with bfloat16
    activations): batch-1 decode (`runs`, from decode_runs), prefill, the decode curve, the
    kernels, the overhead (see `python -m minimodel bench --help`). `finish_card` sets them
    against the hardware."""
    work = card_workload(settings)
    repeats = settings.repeats
    kind = engine_format(fmt)
    dtype = kind["dtype"]
    cfg = llm.cfg
    weights = weight_bytes(llm.model)
    context = work["decode_prompt"] + work["decode_tokens"] // 2  # mean context while decoding
    decode = max(r["tok_per_s"] for r in runs)
    prefill_req = make_requests(1, (work["prefill_tokens"],) * 2, (1, 1), seed=4, vocab=vocab)[0]
    ttft = min(llm.generate([prefill_req.prompt], greedy(1))[0].metrics.ttft_s
               for _ in range(repeats))
    prefill_flops, _ = roofline.step_cost(cfg, work["prefill_tokens"], work["prefill_tokens"],
                                          1, dtype)
    curve = decode_curve(llm, settings.curve_batches, settings.curve_prompt,
                         settings.curve_steps, vocab, weights)
    add_floor(curve, products_floor(llm, settings.curve_batches))
    overhead = step_profile(llm, settings.profile_steps, work["decode_prompt"], vocab)
    return {
        "model": settings.model, "format": fmt, "dtype": str(dtype).removeprefix("torch."),
        "quantization": kind["quantization"], "device": settings.device,
        "backend": llm.backend_name,
        "parameters": cfg.num_parameters(), "weight_bytes": weights,
        "kv_bytes_per_token": cfg.kv_bytes_per_token(dtype),
        "decode_context_tokens": context,
        "decode_bytes_per_token": decode_bytes(cfg, weights, context, dtype), **work,
        "decode_tok_per_s": decode, "decode_runs": runs,
        "prefill_s": ttft, "prefill_flops": prefill_flops,
        "prefill_flops_per_s": prefill_flops / ttft,
        "kernel_choices": [c.describe() for c in llm.kernel_choices],
        "curve": curve, "curve_prompt": settings.curve_prompt, "curve_steps": settings.curve_steps,
        "overhead": overhead,
    }


def finish_card(card: dict[str, Any], hw: dict[str, Any]) -> dict[str, Any]:
    """The card set against the hardware: the memory roof (the fastest probe), the batch-1
    decode ceiling and the fraction of it reached (MBU), prefill's fraction of the matmul
    peak."""
    bandwidth = roof(hw["probes"])
    ceiling = bandwidth / card["decode_bytes_per_token"]
    peak = hw["matmul_flops_per_s"][card["dtype"]]
    # a shared machine's bandwidth moves from minute to minute: the same runs against the sum
    # probe taken just before each of them, the best pair kept
    here = max(r["tok_per_s"] * card["decode_bytes_per_token"] / r["sum_bytes_per_s"]
               for r in card["decode_runs"])
    return {
        **card, "bandwidth_bytes_per_s": bandwidth, "probes": hw["probes"],
        "gemv_formulation": hw["gemv_formulation"], "bandwidth_probe_bytes": hw["probe_bytes"],
        "matmul_flops_per_s": peak, "matmul_n": hw["matmul_n"],
        "decode_ceiling_tok_per_s": ceiling,
        "bandwidth_utilisation": card["decode_tok_per_s"] / ceiling,
        "bandwidth_utilisation_vs_sum_before": here,
        "prefill_fraction_of_matmul_peak": card["prefill_flops_per_s"] / peak,
    }


def format_card(c: dict[str, Any], machine_info: dict[str, Any]) -> str:
    """The card as text: what the hardware allows, then what was reached."""
    flags = "/".join(machine_info.get("cpu_flags", [])) or "no AVX2"
    where = machine_info.get("gpu") if c["device"] == "cuda" else (
        f"{machine_info['cpu']} with {flags}, {machine_info['torch_threads']} threads")
    what = (f"{c['format']} weights, {c['dtype']} activations" if c["quantization"]
            else c["dtype"])
    probes = c["probes"]
    floor = "products_in_cache_s" in c["curve"][0]
    lines = [
        f"== minimodel bench card: {c['model']}, {what}, {c['device']} ({where}), "
        f"{c['backend']} attention ==",
        f"model      {c['parameters'] / 1e6:.1f} M parameters; a decode step reads "
        f"{c['weight_bytes'] / 1e9:.3f} GB of weights; KV cache "
        f"{c['kv_bytes_per_token'] / 1024:.1f} KiB per token",
        f"hardware   memory roof {c['bandwidth_bytes_per_s'] / 1e9:.2f} GB/s = the fastest of "
        f"sum {probes['sum'] / 1e9:.2f}, copy {probes['copy'] / 1e9:.2f} (read + write), "
        f"gemv {probes['gemv'] / 1e9:.2f} ({c['gemv_formulation']}) GB/s over "
        f"{c['bandwidth_probe_bytes'] / 2**20:.0f} MiB; matmul "
        f"{c['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s ({c['matmul_n']}^3, {c['dtype']})",
        *(f"kernels    {line}" for line in c["kernel_choices"] or ["F.linear everywhere"]),
        f"ceiling    batch-1 decode reads {c['decode_bytes_per_token'] / 1e9:.3f} GB per token "
        f"(every weight once + the KV of {c['decode_context_tokens']} tokens): at most "
        f"{c['decode_ceiling_tok_per_s']:.2f} tok/s",
        f"decode     {c['decode_tok_per_s']:.2f} tok/s measured (prompt {c['decode_prompt']}, "
        f"{c['decode_tokens']} new tokens) = {c['bandwidth_utilisation']:.0%} of the ceiling "
        "(memory-bandwidth utilisation, MBU); against the sum probe taken just before each run "
        f"(" + ", ".join(f"{r['sum_bytes_per_s'] / 1e9:.1f}" for r in c["decode_runs"])
        + f" GB/s): {c['bandwidth_utilisation_vs_sum_before']:.0%}",
        f"prefill    {c['prefill_tokens']} tokens in {c['prefill_s']:.3f} s = "
        f"{c['prefill_flops_per_s'] / 1e9:.1f} GFLOP/s = "
        f"{c['prefill_fraction_of_matmul_peak']:.0%} of the measured matmul peak",
        f"curve      one decode step with B requests (prompts of {c['curve_prompt']} tokens; the "
        f"fastest of {c['curve_steps']} steps each):",
        f"{'':11s}{'B':>3s} {'step ms':>9s} {'x B=1':>6s} {'tok/s':>8s} {'GB read':>8s} "
        f"{'GB/s':>7s} {'of roof':>8s}" + (f" {'products in cache':>18s}" if floor else ""),
    ]
    for p in c["curve"]:
        lines.append(f"{'':11s}{p['batch']:3d} {p['step_s'] * 1e3:9.2f} "
                     f"{p['step_over_batch1']:6.2f} {p['tok_per_s']:8.1f} "
                     f"{p['bytes_per_step'] / 1e9:8.3f} {p['bytes_per_s'] / 1e9:7.2f} "
                     f"{p['bytes_per_s'] / c['bandwidth_bytes_per_s']:8.0%}"
                     + (f" {p['products_in_cache_s'] * 1e3:9.2f} ms x{p['floor_over_batch1']:4.2f}"
                        if floor else ""))
    if floor:
        lines.append(
            f"{'':11s}products in cache: the step's matrix products through the kernels "
            "chosen, timed on weights the caches hold (bench/floor.py), and that over the B=1 "
            "step: what a step of B would cost if no weight came from memory")
    o = c["overhead"]
    lines.append(
        f"overhead   profiler, {o['steps']} batch-1 decode steps of {o['step_s'] * 1e3:.2f} ms: "
        f"products {o['products_s'] / o['step_s']:.0%}, attention "
        f"{o['attention_s'] / o['step_s']:.0%}, the rest (the engine's overhead) "
        f"{o['overhead']:.0%} (the same steps without the profiler: "
        f"{o['step_unprofiled_s'] * 1e3:.2f} ms)")
    if "step_inline_s" in o:
        lines.append(
            f"{'':11s}decode steps inlined (engine/lean_decode.py): {o['step_inline_s'] * 1e3:.2f}"
            f" ms; the same steps through the model's own forward, taking turns with them: "
            f"{o['step_model_forward_s'] * 1e3:.2f} ms "
            f"({1 - o['step_inline_s'] / o['step_model_forward_s']:.0%} less)")
    if "step_native_s" in o:
        lines.append(
            f"{'':11s}decode steps in one call into C (engine/native_decode.py): "
            f"{o['step_native_s'] * 1e3:.2f} ms, taking turns with the inlined ones "
            f"({1 - o['step_native_s'] / o['step_inline_s']:.0%} less)")
    if "step_native_without_head_s" in o:
        lines.append(
            f"{'':11s}of which greedy on through the LM head and the argmax in the same call: "
            f"{o['step_native_s'] * 1e3:.2f} ms; the C steps stopping at the hidden states, "
            f"taking turns: {o['step_native_without_head_s'] * 1e3:.2f} ms "
            f"({1 - o['step_native_s'] / o['step_native_without_head_s']:.0%} less)")
    if "step_c_kernel_s" in o:
        lines.append(
            f"{'':11s}inlined, with the C kernel where chosen ({o['c_kernel_layers']} layers): "
            f"{o['step_c_kernel_s'] * 1e3:.2f} ms; with the next fastest formulation in its "
            f"place, taking turns: {o['step_without_c_kernel_s'] * 1e3:.2f} ms "
            f"({1 - o['step_c_kernel_s'] / o['step_without_c_kernel_s']:.0%} less)")
    top = ", ".join(f"{name} {s * 1e3:.2f}" for name, s in o["top_other_ops_s"].items())
    lines.append(f"{'':11s}the rest: {o['other_ops_s'] * 1e3:.2f} ms in other torch calls "
                 f"({top}), {o['outside_ops_s'] * 1e3:.2f} ms between calls (Python, scheduler)")
    return "\n".join(lines)


def run_card(settings: BenchSettings, formats: list[str], vocab: int, command: str,
             out: Path, draw: bool = True, card_prefix: bool = True) -> int:
    """Print one card per format and the targets, write them to `out` (--out) and the decode
    curve's plot next to it, and end with one line of JSON. The hardware is measured before
    and after the engine's runs, and the faster of the two kept. card_prefix: also workloads P
    at CARD_PREFIX's sizes, the prefix cache on against off, in the first format."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"Unknown card format(s) {unknown}; choose from {', '.join(FORMATS)}.")
    info = machine()
    dtypes = sorted({FORMATS[f][0] for f in formats})
    load = [os.getloadavg()[0]]
    runs = [hardware(settings.device, dtypes)]
    llms = {name: start_engine(settings, name) for name in formats}
    if not settings.quiet:
        print(f"[card] {settings.model}: batch-1 decode, {', '.join(formats)} in turn ...",
              flush=True)
    decodes = decode_runs(settings, llms, vocab)
    measured = {}
    for name in formats:
        if not settings.quiet:
            print(f"[card] {settings.model} {name}: prefill, curve, profile ...", flush=True)
        llm = llms.pop(name)
        measured[name] = bench_card(settings, llm, name, vocab, decodes[name])
        llm.close()
        del llm  # its memory back before the next format's runs
        free_memory()
    runs.append(hardware(settings.device, dtypes))
    hw = best_hardware(*runs)
    load.append(os.getloadavg()[0])
    cards = {name: finish_card(card, hw) for name, card in measured.items()}
    for card in cards.values():
        print(format_card(card, info), flush=True)
    prefix = None
    if card_prefix:  # workloads P, scaled down, in the first format: the prefix cache's ratios
        if not settings.quiet:
            print(f"[card] {settings.model} {formats[0]}: workloads P (small), the prefix "
                  "cache off then on ...", flush=True)
        prefix = prefix_report(settings.model, CARD_PREFIX, fmt=formats[0],
                               device=settings.device, page_size=settings.page_size)
        print(format_prefix([prefix]), flush=True)
    targets = card_targets(cards, prefix)
    print(format_targets(targets))
    report = {"machine": {**info, "load_average_1min": load}, "command": command,
              "hardware": hw, "hardware_runs": runs, "cards": cards, "prefix": prefix,
              "targets": targets}
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if draw:
        plot_curve(cards, out.with_suffix(".png"))
    print(json.dumps(report))
    return 0
