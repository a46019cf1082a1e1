"""Workloads S: what speculative decoding buys, against plain decoding, side by side in one run.

S1  batch 1: the prompts one after the other, each alone in the engine.
S8  batch 8: the same 8 prompts at once.

Prompts: the openings of 4 plays and the first lines of 4 Tang poems (bard's corpus), 64 new
tokens each, greedy, EOS ignored. Systems: no speculation, then each drafter ("ngram" prompt
lookup, and a draft model: `bard-draft` for bard) at each k. Per system: output tokens/s over
the run, the acceptance rate (accepted / checked drafts), tokens per verify step and request,
the seconds spent drafting, verifying and accepting, whether the tokens equal plain decoding's,
and the speed-up over plain decoding in the same run. Every engine is warmed up first.
"""

from __future__ import annotations

import time
from typing import Any

from minimodel.bench.settings import engine_format
from minimodel.engine import LLM
from minimodel.sampling import SamplingParams

PROMPTS = (
    "ROMEO.\n", "HAMLET.\nTo be, or not to be, that is the question:\n", "KING LEAR.\n",
    "MACBETH.\nSo foul and fair a day I have not seen.\n",
    "床前明月光，", "白日依山尽，", "春眠不觉晓，", "红豆生南国，",
)
K_VALUES = (1, 2, 4, 6)
NEW_TOKENS = 64
DRAFTS = {"bard": "bard-draft"}  # the model's own drafter, where it has one


def _greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)


def run_system(llm: LLM, batch: int, prompts: list[str], new_tokens: int) -> dict[str, Any]:
    """The prompts in groups of `batch` (each group runs to completion before the next)."""
    llm.generate(prompts[:batch], _greedy(4), use_tqdm=False)  # warm-up, not counted
    before = llm.spec_decode_stats()
    tokens: list[list[int]] = []
    steps = 0
    start = time.perf_counter()
    for i in range(0, len(prompts), batch):
        outs = llm.generate(prompts[i:i + batch], _greedy(new_tokens), use_tqdm=False)
        tokens += [o.token_ids for o in outs]
        steps += sum(o.metrics.steps for o in outs)
    seconds = time.perf_counter() - start
    after = llm.spec_decode_stats()
    drafts = after["draft_tokens"] - before["draft_tokens"]
    accepted = after["accepted_tokens"] - before["accepted_tokens"]
    return {
        "total_s": seconds,
        "output_tokens_per_s": sum(map(len, tokens)) / seconds,
        "draft_tokens": drafts,
        "acceptance_rate": accepted / drafts if drafts else 0.0,
        "tokens_per_step": sum(map(len, tokens)) / steps,  # per request, the first included
        "draft_s": after["draft_s"] - before["draft_s"],
        "verify_s": after["verify_s"] - before["verify_s"],
        "accept_s": after["accept_s"] - before["accept_s"],
        "tokens": tokens,
    }


def spec_report(model: str = "bard", fmt: str = "float32", device: str = "cpu",
                k_values: tuple[int, ...] = K_VALUES, batches: tuple[int, ...] = (1, 8),
                new_tokens: int = NEW_TOKENS, prompts: tuple[str, ...] = PROMPTS,
                drafters: tuple[str, ...] | None = None) -> dict[str, Any]:
    """S1 and S8 on one model: plain decoding, then every drafter at every k."""
    drafters = drafters or ("ngram", *([DRAFTS[model]] if model in DRAFTS else []))
    systems: list[tuple[str, str | None, int | None]] = [("plain", None, None)]
    systems += [(f"{d} k={k}", d, k) for d in drafters for k in k_values]
    report: dict[str, Any] = {"model": model, "format": fmt, "new_tokens": new_tokens,
                              "prompts": list(prompts), "k_values": list(k_values)}
    for batch in batches:
        rows: dict[str, dict[str, Any]] = {}
        for name, drafter, k in systems:
            llm = LLM(model, device=device, speculative_model=drafter, num_speculative_tokens=k,
                      **engine_format(fmt))
            rows[name] = run_system(llm, batch, list(prompts), new_tokens)
            llm.close()
        plain = rows["plain"]
        want = plain.pop("tokens")
        for row in rows.values():
            if "tokens" in row:
                row["same_tokens"] = row.pop("tokens") == want
            row["speedup"] = row["output_tokens_per_s"] / plain["output_tokens_per_s"]
        plain["same_tokens"] = True
        report[f"S{batch}"] = rows
    return report


TARGET = ("S1", 1.8, "batch-1 decode at least 1.8x faster with the better drafter at its best k")


def best(rows: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The fastest speculative system whose tokens equal plain decoding's."""
    spec = {n: r for n, r in rows.items() if n != "plain" and r["same_tokens"]}
    name = max(spec, key=lambda n: spec[n]["speedup"])
    return name, spec[name]


def format_spec(report: dict[str, Any]) -> str:
    """The table: per batch size, every system side by side, the speed-ups, the target."""
    head = (f"{'wl':3s} {'system':18s} {'tok/s':>7s} {'speed-up':>8s} {'accept':>7s} "
            f"{'tok/step':>8s} "
            f"{'draft s':>8s} {'verify s':>8s} {'accept s':>8s} {'same':>5s}")
    lines = [f"model {report['model']} ({report['format']}), {len(report['prompts'])} prompts "
             f"x {report['new_tokens']} greedy tokens", head, "-" * len(head)]
    for wl in (k for k in report if k.startswith("S")):
        for name, r in report[wl].items():
            lines.append(f"{wl:3s} {name:18s} {r['output_tokens_per_s']:7.1f} "
                         f"{r['speedup']:7.2f}x {r['acceptance_rate']:7.1%} "
                         f"{r['tokens_per_step']:8.2f} "
                         f"{r['draft_s']:8.2f} {r['verify_s']:8.2f} {r['accept_s']:8.2f} "
                         f"{str(r['same_tokens']):>5s}")
        lines.append("")
    wl, least, what = TARGET
    if wl in report:
        name, r = best(report[wl])
        lines.append(f"  target: {what}: {name} {r['speedup']:.2f}x -> "
                     f"{'met' if r['speedup'] >= least else 'MISSED'}")
    return "\n".join(lines)
