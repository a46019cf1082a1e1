"""Workloads S: what speculative decoding buys, against plain decoding, side by side in one run.

S1  batch 1: the prompts one after the other, each alone in the engine.
S8  batch 8: the same 8 prompts at once.

Prompts: the openings of 4 plays and the first lines of 4 Tang poems (bard's corpus), 64 new
tokens each, greedy, EOS ignored. Systems: no speculation, then each drafter ("ngram" prompt
lookup, and a draft model: `bard-draft` for bard) at each k. Per system: output tokens/s over
the run, the acceptance rate (accepted / checked drafts), tokens per verify step and request,
the seconds spent drafting, verifying and accepting, whether the tokens equal plain decoding's,
and the speed-up over plain decoding in the same run. Every engine is warmed up first.

All engines of a batch size are alive at once and take turns on each prompt group, for a few
rounds: a shared machine's speed drifts by tens of percent over minutes, and systems run one
after the other would each meet a different machine. Interleaved, they meet the same one; the
speed-up is the ratio of the totals, and each round's own ratio is kept to show the spread.
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


NUM_PAGES = 512  # each engine's pool: 8 requests of <= 128 tokens need 64 pages of 16
ROUNDS = 3


class SystemRun:
    """One system's totals over every round: seconds, tokens, steps, and its drafter's counts."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm
        self.seconds = 0.0
        self.num_tokens = self.steps = 0
        self.same_every_round = True
        self.round_seconds: list[float] = []
        self.round_tokens: list[int] = []
        self.base = llm.spec_decode_stats()

    def run(self, group: list[str], new_tokens: int) -> list[list[int]]:
        start = time.perf_counter()
        outs = self.llm.generate(group, _greedy(new_tokens), use_tqdm=False)
        seconds = time.perf_counter() - start
        tokens = [o.token_ids for o in outs]
        self.seconds += seconds
        self.round_seconds[-1] += seconds
        self.num_tokens += sum(map(len, tokens))
        self.round_tokens[-1] += sum(map(len, tokens))
        self.steps += sum(o.metrics.steps for o in outs)
        return tokens

    def row(self) -> dict[str, Any]:
        now = self.llm.spec_decode_stats()
        drafts = now["draft_tokens"] - self.base["draft_tokens"]
        accepted = now["accepted_tokens"] - self.base["accepted_tokens"]
        return {
            "total_s": self.seconds,
            "output_tokens_per_s": self.num_tokens / self.seconds,
            "round_tokens_per_s": [n / s for n, s in zip(self.round_tokens, self.round_seconds,
                                                          strict=True)],
            "draft_tokens": drafts,
            "acceptance_rate": accepted / drafts if drafts else 0.0,
            "tokens_per_step": self.num_tokens / self.steps,  # per request, the first included
            **{f"{part}_s": now[f"{part}_s"] - self.base[f"{part}_s"]
               for part in ("draft", "verify", "accept")},
        }


def run_systems(engines: dict[str, LLM], batch: int, prompts: list[str], new_tokens: int,
                rounds: int) -> dict[str, dict[str, Any]]:
    """Every system on the same prompt group, one after the other, group by group, `rounds`
    times (the order of the systems turned by one each round): a shared machine's speed drifts
    over minutes, and this way every system meets the same drift. Then one row per system."""
    groups = [prompts[i:i + batch] for i in range(0, len(prompts), batch)]
    for llm in engines.values():  # warm-up, not counted
        llm.generate(groups[0], _greedy(4), use_tqdm=False)
    runs = {name: SystemRun(llm) for name, llm in engines.items()}
    names = list(engines)
    tokens: dict[str, list[list[int]]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for run in runs.values():
            run.round_seconds.append(0.0)
            run.round_tokens.append(0)
        got: dict[str, list[list[int]]] = {name: [] for name in names}
        for group in groups:
            for name in order:
                got[name] += runs[name].run(group, new_tokens)
        for name in names:
            if r == 0:
                tokens[name] = got[name]
            elif got[name] != tokens[name]:
                runs[name].same_every_round = False
    rows = {name: run.row() for name, run in runs.items()}
    want = tokens[names[0]]  # plain decoding's
    plain = rows[names[0]]
    for name, row in rows.items():
        row["same_tokens"] = tokens[name] == want and runs[name].same_every_round
        row["speedup"] = row["output_tokens_per_s"] / plain["output_tokens_per_s"]
        row["round_speedups"] = [a / b for a, b in zip(row["round_tokens_per_s"],
                                                        plain["round_tokens_per_s"],
                                                        strict=True)]
    return rows


def spec_report(model: str = "bard", fmt: str = "float32", device: str = "cpu",
                k_values: tuple[int, ...] = K_VALUES, batches: tuple[int, ...] = (1, 8),
                new_tokens: int = NEW_TOKENS, prompts: tuple[str, ...] = PROMPTS,
                drafters: tuple[str, ...] | None = None, rounds: int = ROUNDS) -> dict[str, Any]:
    """S1 and S8 on one model: plain decoding and every drafter at every k, all engines alive
    at once and run in turn on each prompt group (run_systems)."""
    drafters = drafters or ("ngram", *([DRAFTS[model]] if model in DRAFTS else []))
    systems: list[tuple[str, str | None, int | None]] = [("plain", None, None)]
    systems += [(f"{d} k={k}", d, k) for d in drafters for k in k_values]
    report: dict[str, Any] = {"model": model, "format": fmt, "new_tokens": new_tokens,
                              "prompts": list(prompts), "k_values": list(k_values),
                              "rounds": rounds}
    for batch in batches:
        engines: dict[str, LLM] = {}
        try:
            for name, drafter, k in systems:
                engines[name] = LLM(model, device=device, speculative_model=drafter,
                                    num_speculative_tokens=k, num_pages=NUM_PAGES,
                                    **engine_format(fmt))
            report[f"S{batch}"] = run_systems(engines, batch, list(prompts), new_tokens, rounds)
        finally:
            for llm in engines.values():
                llm.close()
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
            f"{'tok/step':>8s} {'rounds':>11s} "
            f"{'draft s':>8s} {'verify s':>8s} {'accept s':>8s} {'same':>5s}")
    lines = [f"model {report['model']} ({report['format']}), {len(report['prompts'])} prompts "
             f"x {report['new_tokens']} greedy tokens, {report['rounds']} rounds interleaved "
             "(rounds: the lowest and highest speed-up of one round)", head, "-" * len(head)]
    for wl in (k for k in report if k.startswith("S")):
        for name, r in report[wl].items():
            lines.append(f"{wl:3s} {name:18s} {r['output_tokens_per_s']:7.1f} "
                         f"{r['speedup']:7.2f}x {r['acceptance_rate']:7.1%} "
                         f"{r['tokens_per_step']:8.2f} "
                         f"{min(r['round_speedups']):5.2f}-{max(r['round_speedups']):.2f} "
                         f"{r['draft_s']:8.2f} {r['verify_s']:8.2f} {r['accept_s']:8.2f} "
                         f"{str(r['same_tokens']):>5s}")
        lines.append("")
    wl, least, what = TARGET
    if wl in report:
        name, r = best(report[wl])
        lines.append(f"  target: {what}: {name} {r['speedup']:.2f}x -> "
                     f"{'met' if r['speedup'] >= least else 'MISSED'}")
    return "\n".join(lines)
