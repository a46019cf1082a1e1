"""Side-by-side benchmark: the minimodel engine vs transformers `generate` vs the naive loop.

    python -m minimodel bench --help                # the workloads, the card and every flag

One job per file, in the order they import each other:
  settings.py   BenchSettings: the settings a run reads, built once from the command line
  workloads.py  the seeded requests of workloads A, B, C, N and the lengths of the card's runs
  measure.py    wall time (CUDA synchronized), peak memory, memory given back between systems
  report.py     the ratios against their targets, the text table, the bar plot
  runners.py    the engine, transformers and the no-cache loop on the same requests
  probes.py     the memory roof: the fastest of a sum, a copy and a one-row product
  curve.py      the decode curve: one decode step with B = 1 .. 32 requests, and its bytes
  overhead.py   a batch-1 decode step by torch.profiler: products, attention, the rest
  quality.py    int8 / int4 against bfloat16: logprob differences and greedy agreement
  card.py       the benchmark card: what the hardware allows, then what the engine reaches
  layer_step.py one engine decoder layer's step, ready to time (chapter 09's roofline points)
  cli.py        the flags, their checks, and the run that writes the JSON and the plot
"""

from __future__ import annotations

from minimodel.bench.card import bench_card, finish_card, format_card, machine, run_card
from minimodel.bench.cli import check_plan, main, parse_args, settings_from_args, writable_out
from minimodel.bench.measure import free_memory, peak_memory, timed
from minimodel.bench.report import TARGETS, format_table, plot, ratios
from minimodel.bench.runners import (
    SYSTEM_WORKLOADS,
    engine_runs,
    greedy,
    left_pad,
    reference_runs,
    run_dtype,
    transformers_runs,
)
from minimodel.bench.settings import BenchSettings
from minimodel.bench.workloads import PROMPT_VOCAB, Request, card_workload, make_requests, make_work

__all__ = [
    "PROMPT_VOCAB",
    "SYSTEM_WORKLOADS",
    "TARGETS",
    "BenchSettings",
    "Request",
    "bench_card",
    "card_workload",
    "check_plan",
    "engine_runs",
    "finish_card",
    "format_card",
    "format_table",
    "free_memory",
    "greedy",
    "left_pad",
    "machine",
    "main",
    "make_requests",
    "make_work",
    "parse_args",
    "peak_memory",
    "plot",
    "ratios",
    "reference_runs",
    "run_card",
    "run_dtype",
    "settings_from_args",
    "timed",
    "transformers_runs",
    "writable_out",
]
