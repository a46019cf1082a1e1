"""Workloads P: what prefix caching buys, the cache on against off, side by side in one run.

P1  a shared system prompt (1,024 tokens) and 32 different questions (32 tokens each), all
    sent at once, 32 new tokens each: the system prompt's pages are computed by the first
    requests and shared by the rest.
P2  a 6-turn chat: each turn's prompt is the whole conversation so far (the previous prompt,
    the previous answer, a new 64-token user message), 32 new tokens per answer, one turn
    after the other: each turn finds the previous turns in the cache.

Per model, per workload, cache off then on: mean and p90 time to first token (the engine's
own, arrival to first token), output tokens/s over the whole run, prefill tokens computed (the
scheduler's count: prompt tokens run through the model), and the prefix cache's hit rate
(prompt tokens found cached / prompt tokens admitted). Then the ratios off / on. Seeded
prompts drawn from the real tokens' ids; greedy; EOS ignored; every run starts with an empty
cache, after a warm-up that is not counted.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from minimodel.bench.settings import engine_format
from minimodel.bench.workloads import PROMPT_VOCAB
from minimodel.config import Qwen3Config
from minimodel.engine import LLM
from minimodel.hub import resolve_model
from minimodel.sampling import SamplingParams


@dataclass(frozen=True)
class PrefixWorkloads:
    """The sizes of P1 and P2 (the defaults are the benchmark's; tests make them small)."""

    system_tokens: int = 1024
    questions: int = 32
    question_tokens: int = 32
    new_tokens: int = 32
    turns: int = 6
    user_tokens: int = 64


def _ids(rng: np.random.RandomState, n: int, vocab: int) -> list[int]:
    return rng.randint(0, vocab, size=n).tolist()


def p1_prompts(w: PrefixWorkloads, vocab: int, seed: int = 0) -> list[list[int]]:
    """One system prompt, then each question after it."""
    rng = np.random.RandomState(seed)
    system = _ids(rng, w.system_tokens, vocab)
    return [system + _ids(rng, w.question_tokens, vocab) for _ in range(w.questions)]


def p2_messages(w: PrefixWorkloads, vocab: int, seed: int = 1) -> list[list[int]]:
    """The user's messages of the chat, one per turn."""
    rng = np.random.RandomState(seed)
    return [_ids(rng, w.user_tokens, vocab) for _ in range(w.turns)]


def _greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)


def _summary(ttfts: list[float], outputs: int, seconds: float, llm: LLM,
             prefill_before: int) -> dict[str, float]:
    """A run's TTFT mean and p90, time, output tokens/s and prefill tokens (the hit rate is
    the caller's: the scheduler's counts over the run)."""
    ttfts = sorted(ttfts)
    return {
        "requests": len(ttfts),
        "ttft_mean_s": statistics.fmean(ttfts),
        "ttft_p90_s": ttfts[min(len(ttfts) - 1, int(0.9 * len(ttfts)))],
        "total_s": seconds,
        "output_tokens_per_s": outputs / seconds,
        "prefill_tokens": llm.scheduler.num_prefill_tokens - prefill_before,
    }


def run_p1(llm: LLM, prompts: list[list[int]], new_tokens: int) -> dict[str, float]:
    """All questions at once; the engine runs until every one is answered."""
    before = llm.scheduler.num_prefill_tokens
    start = time.perf_counter()
    outs = llm.generate(prompts, _greedy(new_tokens), use_tqdm=False)
    seconds = time.perf_counter() - start
    return {**_summary([o.metrics.ttft_s for o in outs], sum(len(o.token_ids) for o in outs),
                       seconds, llm, before),
            "tokens": [o.token_ids for o in outs]}


def run_p2(llm: LLM, messages: list[list[int]], new_tokens: int) -> dict[str, float]:
    """One turn after the other; each prompt is the conversation so far."""
    before = llm.scheduler.num_prefill_tokens
    conversation: list[int] = []
    ttfts, outputs, answers = [], 0, []
    start = time.perf_counter()
    for message in messages:
        conversation += message
        out = llm.generate(conversation, _greedy(new_tokens), use_tqdm=False)[0]
        conversation += out.token_ids
        ttfts.append(out.metrics.ttft_s)
        outputs += len(out.token_ids)
        answers.append(out.token_ids)
    seconds = time.perf_counter() - start
    return {**_summary(ttfts, outputs, seconds, llm, before), "tokens": answers}


def prefix_report(model: str, w: PrefixWorkloads = PrefixWorkloads(), fmt: str = "float32",
                  device: str = "cpu", page_size: int = 16) -> dict[str, Any]:
    """P1 and P2 on one model, the cache off and on, and the ratios (off / on)."""
    vocab = min(PROMPT_VOCAB, Qwen3Config.from_pretrained(resolve_model(model)).vocab_size)
    prompts, messages = p1_prompts(w, vocab), p2_messages(w, vocab)
    runs: dict[str, dict[str, Any]] = {"P1": {}, "P2": {}}
    num_pages = 0
    for cache in (False, True):  # the engine's default pool (1 GiB of KV on a CPU), both times
        llm = LLM(model, device=device, page_size=page_size, enable_prefix_caching=cache,
                  skip_tokenizer_init=True, **engine_format(fmt))
        num_pages = llm.allocator.num_pages
        llm.generate([prompts[0][:64]], _greedy(4), use_tqdm=False)  # warm-up, not counted
        for name, run, work in (("P1", run_p1, prompts), ("P2", run_p2, messages)):
            llm.reset_prefix_cache()
            queried, hits = llm.scheduler.num_queried_tokens, llm.scheduler.num_hit_tokens
            result = run(llm, work, w.new_tokens)
            q = llm.scheduler.num_queried_tokens - queried
            result["hit_rate"] = (llm.scheduler.num_hit_tokens - hits) / q if q else 0.0
            runs[name]["on" if cache else "off"] = result
        llm.close()
        del llm
    report: dict[str, Any] = {"model": model, "format": fmt, "page_size": page_size,
                              "num_pages": num_pages, "workloads": vars(w).copy()}
    for name, pair in runs.items():
        off, on = pair["off"], pair["on"]
        same = off.pop("tokens") == on.pop("tokens")
        report[name] = {
            "off": off, "on": on, "same_tokens": same,
            "ttft_mean_ratio": off["ttft_mean_s"] / on["ttft_mean_s"],
            "ttft_p90_ratio": off["ttft_p90_s"] / on["ttft_p90_s"],
            "total_time_ratio": off["total_s"] / on["total_s"],
            "prefill_tokens_ratio": off["prefill_tokens"] / max(on["prefill_tokens"], 1),
        }
    return report


TARGETS = (  # (workload, ratio, at least, what)
    ("P1", "ttft_mean_ratio", 5.0, "P1 mean TTFT at least 5x lower with the cache"),
    ("P1", "total_time_ratio", 2.0, "P1 total time at least 2x lower with the cache"),
    ("P2", "prefill_tokens_ratio", 3.0, "P2 prefill tokens computed at least 3x fewer"),
)


def format_prefix(reports: list[dict[str, Any]]) -> str:
    """The table: per model and workload, off and on side by side, the ratios, the targets."""
    lines = []
    head = (f"{'model':22s} {'wl':3s} {'cache':5s} {'TTFT mean':>10s} {'TTFT p90':>10s} "
            f"{'total':>8s} {'out tok/s':>9s} {'prefill tok':>11s} {'hit rate':>8s}")
    for rep in reports:
        lines += [head, "-" * len(head)]
        for name in ("P1", "P2"):
            for side in ("off", "on"):
                r = rep[name][side]
                lines.append(f"{rep['model']:22s} {name:3s} {side:5s} "
                             f"{r['ttft_mean_s'] * 1e3:8.0f}ms {r['ttft_p90_s'] * 1e3:8.0f}ms "
                             f"{r['total_s']:7.2f}s {r['output_tokens_per_s']:9.1f} "
                             f"{r['prefill_tokens']:11d} {r['hit_rate']:8.1%}")
            p = rep[name]
            lines.append(f"{'':22s} {name:3s} off/on: TTFT mean {p['ttft_mean_ratio']:.1f}x, "
                         f"p90 {p['ttft_p90_ratio']:.1f}x, total time "
                         f"{p['total_time_ratio']:.1f}x, prefill tokens "
                         f"{p['prefill_tokens_ratio']:.1f}x; same tokens: {p['same_tokens']}")
        for name, key, least, what in TARGETS:
            got = rep[name][key]
            lines.append(f"  target: {what}: {got:.1f}x -> {'met' if got >= least else 'MISSED'}")
        lines.append("")
    return "\n".join(lines)
