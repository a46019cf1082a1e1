"""Checks of ch08.my_engine_step, the capstone: the learner's engine step, built from their own
pieces, on the engine's model.

The learner's step drives the engine's own model (minimodel/engine/model.py) over a pool of
pages, with their admit and decode_step (this chapter), paged_metadata and slot_mapping
(chapter 07) and sample (chapter 05). It must give the same greedy tokens as mm.LLM.generate
and run the same batches as the engine's Scheduler, step by step.
"""

from __future__ import annotations

from collections.abc import Callable

from minimodel.grading.ch08.common import _clip
from minimodel.grading.ch08.harness import EngineState
from minimodel.grading.ch08.reference import (
    CAPSTONE_SETTINGS,
    CapstoneCase,
    _draw_case,
    _reference_llm,
    reference_tokens,
)
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import Text, join, tr
from minimodel.grading.learner import spy_calls


def _step_pieces_named() -> tuple[tuple[Text | str, str], ...]:
    """The learner's pieces the step must call: (how the learner knows it, its function's name)."""
    return ((tr("{piece} (this notebook)", piece="admit"), "admit"),
            (tr("{piece} (this notebook)", piece="decode_step"), "decode_step"),
            ("ch07.paged_metadata", "paged_metadata"), ("ch07.slot_mapping", "slot_mapping"),
            ("ch05.sample", "sample"))


_RUNS: dict[str, object] = {}  # the latest step function's runs, shared by its checks


def _run_case(fn: Callable, case: CapstoneCase) -> dict:
    s = CAPSTONE_SETTINGS
    engine = EngineState(_reference_llm().model, s["page_size"], s["num_pages"],
                         s["max_num_batched_tokens"], s["max_num_seqs"])
    for p, m in zip(case.prompts, case.max_new, strict=True):
        engine.add_request(p, m)
    out: dict = {"case": case, "engine": engine}
    try:
        out["trace"] = engine.run(fn, max_steps=2 * len(case.trace) + 10)
    except Exception as e:  # kept, and raised again by every check that needs this run
        out["error"] = e
    return out


def _capstone_runs(fn: Callable, fresh: bool = False) -> dict:
    """Both runs of `fn` (roomy, tight) under spy_calls; computed by the first check of a
    check() call and reused by the others."""
    if fresh or _RUNS.get("fn") is not fn:
        cases = [_draw_case(tight=False), _draw_case(tight=True)]
        with spy_calls(fn) as calls:
            runs = [_run_case(fn, c) for c in cases]
        _RUNS.clear()
        _RUNS.update(fn=fn, runs=runs, calls=dict(calls))
    return _RUNS


def _fmt(step: list[tuple[int, int]]) -> Text | str:
    return ", ".join(f"r{r}({q})" for r, q in step) or tr("nothing")


def _compare_tokens(run: dict) -> Text:
    if "error" in run:
        raise run["error"]
    case, engine = run["case"], run["engine"]
    want = reference_tokens(tuple(map(tuple, case.prompts)), tuple(case.max_new))
    for seq, w in zip(engine.requests, want, strict=True):
        got = seq.output_token_ids
        if got != w:
            k = next((i for i, (a, b) in enumerate(zip(got, w)) if a != b), min(len(got), len(w)))
            why = (tr(" The first token is already wrong: it comes from the logits of the row "
                      "of the prompt's last token, once the whole prompt is in the cache.")
                   if k == 0 else
                   tr(" The first tokens agree, then they part: look at what a decode step feeds "
                      "the model (the last sampled token, at its position) and at what a "
                      "recomputed request brings."))
            tail = (why if len(got) == len(w) else
                    tr(" It should generate exactly max_new_tokens = {n} tokens.", n=len(w)))
            raise CheckFailed(tr(
                "{case}, request r{request} (prompt of {n} tokens): your engine generated {got}, "
                "mm.LLM.generate {want}; they part at token {k}.{tail}", case=case.name,
                request=seq.request_id, n=seq.num_prompt_tokens, got=_clip(got, 10),
                want=_clip(w, 10), k=k, tail=tail))
    free = engine.allocator.num_free
    expect(free == engine.allocator.num_pages,
           tr("{case}: every request is done but only {free} of the {pages} pages are back in "
              "the pool; a finished request gives back its pages", case=case.name, free=free,
              pages=engine.allocator.num_pages))
    pre = case.preemptions
    return tr("{requests} requests, {tokens} tokens, {steps} steps{preemptions}",
              requests=len(want), tokens=sum(map(len, want)), steps=len(case.trace),
              preemptions=("" if not pre else tr(", {n} preemption", n=pre) if pre == 1 else
                           tr(", {n} preemptions", n=pre)))


@exercise("ch08.my_engine_step", "a roomy pool (chunked prefill, several requests decoding "
                                 "together): the same greedy tokens as mm.LLM.generate")
def _step_roomy(fn: Callable) -> Text:
    return _compare_tokens(_capstone_runs(fn, fresh=True)["runs"][0])


@exercise("ch08.my_engine_step", "a tight pool (preemption and recompute): the same tokens, and "
                                 "every page back in the pool at the end")
def _step_tight(fn: Callable) -> Text:
    return _compare_tokens(_capstone_runs(fn)["runs"][1])


@exercise("ch08.my_engine_step", "step by step, the same batches as the engine's scheduler")
def _step_trace(fn: Callable) -> None:
    for run in _capstone_runs(fn)["runs"]:
        if "error" in run:
            raise run["error"]
        case, got = run["case"], run["trace"]
        for k, want in enumerate(case.trace):
            mine = got[k] if k < len(got) else []
            if mine == want:
                continue
            kind = tr("prefill step") if case.prefill[k] else tr("decode step")
            why = (tr(" A waiting request fits, so this is a prefill step: prefill comes first.")
                   if case.prefill[k] and all(q == 1 for _, q in mine) and mine else
                   tr(" No waiting request fits the free pages, so this is a decode step for "
                      "every running request.")
                   if not case.prefill[k] and any(q > 1 for _, q in mine) else "")
            raise CheckFailed(tr("{case}, step {step}: your step ran {mine}; the engine's "
                                 "scheduler runs a {kind} of {want}.{why}", case=case.name,
                                 step=k + 1, mine=_fmt(mine), kind=kind, want=_fmt(want),
                                 why=why))
        expect(len(got) == len(case.trace),
               tr("{case}: your engine took {got} steps, the engine's scheduler {want}",
                  case=case.name, got=len(got), want=len(case.trace)))


@exercise("ch08.my_engine_step", "is built from your own admit, decode_step, ch07.paged_metadata, "
                                 "ch07.slot_mapping and ch05.sample")
def _step_pieces(fn: Callable) -> None:
    runs = _capstone_runs(fn)
    errors = [run["error"] for run in runs["runs"] if "error" in run]
    for e in errors:
        if isinstance(e, NotImplementedError):
            raise e
    missing = [what for what, name in _step_pieces_named() if not runs["calls"].get(name)]
    pieces = join(tr(", "), missing)
    expect(not (missing and errors),
           tr("your step stopped before its runs were over (see the checks above), so it is not "
              "known yet whether it uses your own {pieces}", pieces=pieces))
    expect(not missing, tr("your step never called your own {pieces}: the capstone composes your "
                           "pieces, so a step built on the package's scheduler or metadata does "
                           "not count", pieces=pieces))
