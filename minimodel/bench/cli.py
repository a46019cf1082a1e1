"""The command line of the benchmark: its flags and their checks, the settings built from them
once, and the run that ties workloads, runners, card and report together."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

from minimodel.bench.card import machine, run_card
from minimodel.bench.curve import CURVE_BATCHES
from minimodel.bench.prefix import format_prefix, prefix_report
from minimodel.bench.quality import format_quality, quality_report
from minimodel.bench.report import format_table, plot
from minimodel.bench.runners import SYSTEM_WORKLOADS, run_dtype
from minimodel.bench.settings import FORMATS, BenchSettings
from minimodel.bench.spec import K_VALUES, NEW_TOKENS, ROUNDS, format_spec, spec_report
from minimodel.bench.workloads import PROMPT_VOCAB
from minimodel.cli_types import device_kind, int_at_least, names, positive_int
from minimodel.config import Qwen3Config
from minimodel.hub import resolve_model

DESCRIPTION = """\
Side-by-side benchmark: the minimodel engine vs transformers `generate` vs the naive loop.

    python -m minimodel bench                       # CPU: float32 and bfloat16, workloads A, B, C
    python -m minimodel.bench ...                   # the same
    python -m minimodel bench --device cuda         # + FlashInfer vs torch, CUDA graphs, nano-vllm
    python -m minimodel bench --card                # the benchmark card only (minutes on CPU)
    python -m minimodel bench --card --model bard   # the card of the small trained model
    python -m minimodel bench --quality             # int8 and int4 against bfloat16
    python -m minimodel bench --workloads P         # prefix caching: the cache on against off
    python -m minimodel bench --workloads S         # speculative decoding against plain decoding

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

Workloads P (--workloads P, the engine alone, on each of --prefix-models): prefix caching on
against off, side by side. P1: a 1,024-token system prompt shared by 32 different 32-token
questions, sent at once, 32 new tokens each. P2: a 6-turn chat, each turn's prompt the whole
conversation so far (a new 64-token user message per turn, 32-token answers). Mean and p90
time to first token, output tokens/s, prefill tokens computed, hit rate, and the ratios.

Workloads S (--workloads S, the engine alone, on --spec-model, bard by default): speculative
decoding against plain decoding, side by side. S1: batch 1, 8 prompts (4 play openings, 4
first lines of Tang poems) one after the other; S8: the 8 at once; 64 greedy tokens each, EOS
ignored. Each drafter (ngram, and the model's own draft model: bard-draft for bard) at each k of
--spec-k: output tokens/s, the speed-up over plain decoding, the acceptance rate, tokens per
verify step, seconds drafting / verifying / accepting, and whether the tokens are plain
decoding's. All the engines are alive at once and take turns on each prompt group, for
--spec-rounds rounds, so that a shared machine's drift meets every system alike.

The card (--card) first measures what the hardware allows, then what the engine reaches, per
format (--card-formats: float32, bfloat16, and int8 weights with bfloat16 activations): the
model's parameters, weight bytes and KV bytes per token; the memory roof, the fastest of three
probes (a sum, a copy and a one-row product over 512 MiB) and the matmul FLOP/s measured here;
the batch-1 decode ceiling, roof / bytes read per token (every weight once, plus the KV cache of
the context); the engine's measured decode tokens/s and its fraction of that ceiling
(memory-bandwidth utilisation, MBU); its prefill FLOP/s against the matmul peak; the kernel the
engine chose for each layer; the decode curve, one decode step with B = 1, 2, 4, ... 32
requests (tokens/s and bytes read/s, plotted next to the JSON), beside what its products cost
with every weight in cache (what the arithmetic alone allows); and, by torch.profiler, the
share of a batch-1 decode step spent outside the matrix products; and workloads P at a small
size (a 256-token system prompt and 8 questions; a 4-turn chat), the prefix cache off against
on (--no-card-prefix skips them). Then the targets, met or not. Its last line is the card as
JSON.

Quality (--quality): for each of --quality-models, int8 and int4 (--quality-formats) against
bfloat16 on 64 prompts of text x 32 greedy tokens: the mean and max |logprob difference| of
bfloat16's chosen token, teacher-forced, and greedy agreement (teacher-forced, and
free-running).
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The flags of `python -m minimodel bench`; a bad value is a usage error (exit 2)."""
    p = argparse.ArgumentParser(prog="python -m minimodel bench", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="random:qwen3-0.6b")
    p.add_argument("--device", default="cpu", type=device_kind, help="cpu (default) or cuda")
    p.add_argument("--dtype", default=None, type=names(("float32", "bfloat16", "float16")),
                   help="float32, bfloat16 or both comma-separated (default: both on CPU, "
                        "bfloat16 on CUDA)")
    p.add_argument("--workloads", default="A,B,C",
                   type=names(("A", "B", "C", "N", "P", "S"), upper=True),
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
    p.add_argument("--card-formats", default=None, type=names(tuple(FORMATS)),
                   help="card: formats, comma-separated from " + ", ".join(FORMATS)
                   + " (int8, int4: those weights, bfloat16 activations; default: --dtype if "
                   "given, else float32,bfloat16,int8 on CPU and bfloat16 on CUDA)")
    p.add_argument("--curve-batches", default=",".join(map(str, CURVE_BATCHES)),
                   type=batch_sizes, help="card: requests per decode step of the curve")
    p.add_argument("--curve-prompt", type=positive_int, default=32,
                   help="card: prompt length of the curve's requests")
    p.add_argument("--curve-steps", type=positive_int, default=6,
                   help="card: timed decode steps per batch size (the fastest is kept)")
    p.add_argument("--profile-steps", type=positive_int, default=8,
                   help="card: batch-1 decode steps under the profiler (the overhead)")
    p.add_argument("--quality", action="store_true",
                   help="only the quality comparison: each --quality-formats against bfloat16")
    p.add_argument("--quality-models", default="bard,random:qwen3-0.6b",
                   help="quality: models, comma-separated")
    p.add_argument("--quality-formats", default="int8,int4",
                   type=names(tuple(f for f in FORMATS if f != "bfloat16")),
                   help="quality: formats compared with bfloat16")
    p.add_argument("--quality-prompts", type=positive_int, default=64)
    p.add_argument("--quality-tokens", type=int_at_least(2), default=32)
    p.add_argument("--card-prefix", action=argparse.BooleanOptionalAction, default=True,
                   help="the card also runs workloads P at a small size (default: on)")
    p.add_argument("--prefix-models", default="bard,random:qwen3-0.6b",
                   help="models of workloads P (comma-separated)")
    p.add_argument("--spec-model", default="bard", help="workloads S: the target model")
    p.add_argument("--spec-k", default=",".join(map(str, K_VALUES)), type=batch_sizes,
                   help="workloads S: draft tokens per step to try (comma-separated)")
    p.add_argument("--spec-rounds", type=positive_int, default=ROUNDS,
                   help="workloads S: rounds over the prompts, the systems taking turns")
    p.add_argument("--spec-tokens", type=positive_int, default=NEW_TOKENS,
                   help="workloads S: new tokens per prompt")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    if args.card and args.quality:
        p.error("--card and --quality are two runs; choose one")
    return args


def batch_sizes(text: str) -> tuple[int, ...]:
    """Comma-separated batch sizes >= 1, given back sorted without repeats."""
    try:
        sizes = sorted({int(item) for item in text.split(",") if item.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of "
                                         "integers") from None
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be integers >= 1, got {text!r}")
    return tuple(sizes)


def settings_from_args(args: argparse.Namespace) -> BenchSettings:
    """The settings the workloads, runners and card read, taken from the parsed flags once."""
    return BenchSettings(
        model=args.model, device=args.device, systems=tuple(args.systems.split(",")),
        page_size=args.page_size, repeats=args.repeats, a_requests=args.a_requests,
        c_tokens=args.c_tokens, card_prompt=args.card_prompt,
        card_decode_tokens=args.card_decode_tokens, card_prefill_tokens=args.card_prefill_tokens,
        quiet=args.quiet, curve_batches=args.curve_batches, curve_prompt=args.curve_prompt,
        curve_steps=args.curve_steps, profile_steps=args.profile_steps,
        quality_prompts=args.quality_prompts, quality_tokens=args.quality_tokens,
    )


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


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns 0 (the exit status)."""
    args = parse_args(argv)  # argument types: a bad one is a usage error (exit 2)
    settings = settings_from_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtypes = (args.dtype or ("bfloat16" if args.device == "cuda" else "float32,bfloat16"))
    workloads = set(args.workloads.upper().split(","))
    if args.device == "cuda" and args.workloads == "A,B,C":
        workloads.add("N")
    if "P" in workloads and len(workloads) > 1:
        raise ValueError("Workloads P run on their own (the engine, cache on against off): "
                         "pass --workloads P alone.")
    if "S" in workloads and len(workloads) > 1:
        raise ValueError("Workloads S run on their own (the engine, speculation against plain "
                         "decoding): pass --workloads S alone.")
    if not (args.card or args.quality or workloads & {"P", "S"}):
        check_plan(args, workloads)
    default_out = ("build/bench-card.json" if args.card else
                   "build/bench-quality.json" if args.quality else
                   "build/bench-prefix.json" if "P" in workloads else
                   "build/bench-spec.json" if "S" in workloads else "build/bench.json")
    out = writable_out(Path(args.out or default_out))
    command = "python -m minimodel bench " + " ".join(argv if argv is not None else sys.argv[1:])
    if "P" in workloads and not (args.card or args.quality):
        return run_prefix(args.prefix_models.split(","), args.dtype or "float32", args.device,
                          args.page_size, command, out, settings.quiet)
    if "S" in workloads and not (args.card or args.quality):
        report = {"machine": machine(), "command": command,
                  "spec": spec_report(args.spec_model, args.dtype or "float32", args.device,
                                      k_values=args.spec_k, new_tokens=args.spec_tokens,
                                      rounds=args.spec_rounds)}
        out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(format_spec(report["spec"]))
        return 0
    if args.quality:
        return run_quality(settings, args.quality_models.split(","),
                           args.quality_formats.split(","), command, out)
    vocab = min(PROMPT_VOCAB, Qwen3Config.from_pretrained(resolve_model(args.model)).vocab_size)
    if args.card:
        formats = args.card_formats or args.dtype or (
            "bfloat16" if args.device == "cuda" else "float32,bfloat16,int8")
        return run_card(settings, formats.split(","), vocab, command, out,
                        draw=not args.no_plot, card_prefix=args.card_prefix)
    results: dict[str, Any] = {}
    report = {"machine": machine(), "command": command, "results": results}
    for dtype_name in dtypes.split(","):
        res = run_dtype(settings, dtype_name, workloads, vocab)
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


def run_prefix(models: list[str], fmt: str, device: str, page_size: int, command: str,
               out: Path, quiet: bool) -> int:
    """Workloads P on each model: print the table, write the JSON to `out` as it goes."""
    reports = []
    for model in models:
        if not quiet:
            print(f"[prefix] {model}: P1 and P2, the cache off then on ...", flush=True)
        reports.append(prefix_report(model, fmt=fmt, device=device, page_size=page_size))
        report = {"machine": machine(), "command": command, "prefix": reports}
        out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")  # so far
    print(format_prefix(reports))
    return 0


def run_quality(settings: BenchSettings, models: list[str], formats: list[str], command: str,
                out: Path) -> int:
    """Each model's formats against bfloat16: print the table, write the JSON to `out`."""
    reports = []
    for model in models:
        if not settings.quiet:
            print(f"[quality] {model}: bfloat16, {', '.join(formats)} ...", flush=True)
        reports.append(quality_report(model, formats, prompts=settings.quality_prompts,
                                      tokens=settings.quality_tokens, device=settings.device))
        report = {"machine": machine(), "command": command, "quality": reports}
        out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")  # so far
    print(format_quality(reports))
    return 0
