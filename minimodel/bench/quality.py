"""What quantization costs in quality: a format's log-probabilities and greedy tokens against
the baseline's (bfloat16), on the same prompts.

For each model: `prompts` windows of real text (workloads.QUALITY_TEXT), `tokens` greedy
tokens each from the baseline engine (free-running, as `generate` gives them). Then both
formats are teacher-forced on the baseline's tokens: one prefill of prompt + continuation gives
the logits at every one of the `tokens` positions, and at each position

- the baseline's choice is its argmax there (the token it would pick after that context);
- |logprob difference| = |log p_format(choice) - log p_baseline(choice)|, log_softmax of each
  format's own logits in float32: the change in the log-probability of the token the baseline
  picks (mean and max over all prompts x positions);
- teacher-forced agreement: the fraction of positions where the format's argmax is the
  baseline's choice.

Free-running, each format generates its own `tokens` greedy tokens from the same prompts:
`prefix_agreement` is the mean fraction of a continuation equal to the baseline's before the
first token that differs; `identical` the fraction of continuations equal in full.
"""

from __future__ import annotations

from typing import Any

import torch

from minimodel.bench.measure import free_memory
from minimodel.bench.runners import greedy
from minimodel.bench.settings import engine_format
from minimodel.bench.workloads import QUALITY_TEXT, text_prompts
from minimodel.engine import LLM
from minimodel.engine.attention import TorchBackend, build_metadata
from minimodel.engine.kv_cache import KVCache, pages_needed

PROMPT_LENGTHS = (16, 64)  # tokens per prompt, uniform, inclusive
TOKENS_PER_CHUNK = 1024  # teacher-forced prefill: this many tokens of prompts per forward pass


def free_running(llm: LLM, prompts: list[list[int]], tokens: int) -> list[list[int]]:
    """`tokens` greedy new tokens (EOS ignored) for each prompt, all prompts in one batch."""
    return [o.token_ids for o in llm.generate(prompts, greedy(tokens), use_tqdm=False)]


@torch.inference_mode()
def teacher_forced(llm: LLM, prompts: list[list[int]], continuations: list[list[int]],
                   score: list[list[int]] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(argmax [n, T], logprob [n, T]) at the T positions that predict each continuation's
    tokens, given the prompt and the continuation so far; logprob is of `score`'s token at
    that position (default: of the argmax). Runs the engine's model (its weights, kernels and
    quantization) over a KV pool of its own, a few prompts per prefill."""
    model, S = llm.model, llm.kv_cache.page_size
    T = len(continuations[0])
    argmax = torch.empty(len(prompts), T, dtype=torch.long)
    logprob = torch.empty(len(prompts), T)
    start = 0
    while start < len(prompts):
        stop, tokens = start, 0
        while stop < len(prompts) and (stop == start or tokens < TOKENS_PER_CHUNK):
            tokens += len(prompts[stop]) + T - 1
            stop += 1
        seqs = [prompts[i] + continuations[i][: T - 1] for i in range(start, stop)]
        lens = [len(s) for s in seqs]
        per_seq = [pages_needed(k, S) for k in lens]
        cache = KVCache(llm.cfg, sum(per_seq), S, llm.dtype, llm.device)
        backend = TorchBackend(cache, model.num_local_heads[0], llm.dtype)
        first = [sum(per_seq[:j]) for j in range(len(seqs))]
        meta = build_metadata([list(range(f, f + n)) for f, n in zip(first, per_seq, strict=True)],
                              lens, lens, S, llm.device)
        backend.plan(meta)
        ids = torch.tensor([t for s in seqs for t in s], device=llm.device)
        hidden = model(ids, meta.positions, backend)  # [N, C]
        ends = meta.qo_indptr[1:].long().tolist()
        rows = [end - T + j for end in ends for j in range(T)]  # predict continuation[j]
        logp = model.compute_logits(hidden[rows]).float().log_softmax(-1).cpu()  # [b * T, V]
        best = logp.argmax(-1)
        chosen = best if score is None else torch.tensor(score[start:stop]).flatten()
        argmax[start:stop] = best.view(-1, T)
        logprob[start:stop] = logp.gather(1, chosen[:, None]).view(-1, T)
        start = stop
    return argmax, logprob


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many tokens two sequences share from the start."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare(base_free: list[list[int]], base_argmax: torch.Tensor, base_logprob: torch.Tensor,
            free: list[list[int]], argmax: torch.Tensor, logprob: torch.Tensor
            ) -> dict[str, float]:
    """The figures of one format against the baseline (see the module's docstring)."""
    diff = (logprob - base_logprob).abs()
    T = len(base_free[0])
    return {
        "logprob_diff_mean": diff.mean().item(),
        "logprob_diff_max": diff.max().item(),
        "teacher_forced_agreement": (argmax == base_argmax).float().mean().item(),
        "prefix_agreement": sum(common_prefix(a, b) for a, b in zip(free, base_free,
                                                                    strict=True))
                            / (T * len(free)),
        "identical": sum(a == b for a, b in zip(free, base_free, strict=True)) / len(free),
    }


def quality_report(model: str, formats: list[str], baseline: str = "bfloat16",
                   prompts: int = 64, tokens: int = 32, device: str = "cpu",
                   seed: int = 5) -> dict[str, Any]:
    """Each format against the baseline on `prompts` text prompts x `tokens` greedy tokens."""
    longest = PROMPT_LENGTHS[1] + tokens
    settings = {"device": device, "num_pages": prompts * (-(-longest // 16) + 1),
                "page_size": 16, "max_num_seqs": prompts}
    llm = LLM(model, **engine_format(baseline), **settings)
    ids = text_prompts(llm.tokenizer.encode(QUALITY_TEXT), prompts, PROMPT_LENGTHS, seed)
    base_free = free_running(llm, ids, tokens)
    base_argmax, base_logprob = teacher_forced(llm, ids, base_free)
    llm = None
    free_memory()
    report: dict[str, Any] = {"model": model, "baseline": baseline, "prompts": prompts,
                              "tokens": tokens, "prompt_lengths": list(PROMPT_LENGTHS),
                              "seed": seed, "formats": {},
                              # bfloat16's own noise: its teacher-forced argmax (a prefill) vs
                              # its free-running tokens (decode steps) on the same context
                              "baseline_self_agreement": (
                                  base_argmax == torch.tensor(base_free)).float().mean().item(),
                              # how sure the baseline is: the mean log p of its argmax (a
                              # trained model near 0; random weights near -log V: near ties)
                              "baseline_top_logprob_mean": base_logprob.mean().item()}
    for name in formats:
        llm = LLM(model, **engine_format(name), **settings)
        free = free_running(llm, ids, tokens)
        argmax, logprob = teacher_forced(llm, ids, base_free, score=base_argmax.tolist())
        report["formats"][name] = compare(base_free, base_argmax, base_logprob, free, argmax,
                                          logprob)
        llm = None
        free_memory()
    return report


def format_quality(reports: list[dict[str, Any]]) -> str:
    """The reports as one text table: a row per (model, format)."""
    head = (f"{'model':20s} {'format':8s} {'|dlogp| mean':>12s} {'|dlogp| max':>12s} "
            f"{'teacher-forced':>15s} {'free: prefix':>13s} {'free: identical':>16s}")
    lines = [head]
    for r in reports:
        lines.append(f"{r['model']:20s} {r['baseline']:8s} log p of its own argmax, mean "
                     f"{r['baseline_top_logprob_mean']:.2f}; its argmax teacher-forced = its "
                     f"free-running token at {r['baseline_self_agreement']:.1%} of positions")
        for name, f in r["formats"].items():
            lines.append(f"{r['model']:20s} {name:8s} {f['logprob_diff_mean']:12.4f} "
                         f"{f['logprob_diff_max']:12.4f} {f['teacher_forced_agreement']:15.1%} "
                         f"{f['prefix_agreement']:13.1%} {f['identical']:16.1%}")
    r = reports[0]
    lines.append(f"(vs {r['baseline']}; {r['prompts']} prompts of {r['prompt_lengths'][0]}-"
                 f"{r['prompt_lengths'][1]} tokens of text x {r['tokens']} greedy tokens; "
                 "dlogp: of the baseline's argmax token, teacher-forced on its continuation)")
    return "\n".join(lines)
