"""Where a batch-1 decode step's time goes, by torch.profiler: the matrix products with the
weights, attention, and everything else (the engine's own overhead).

What counts as a product: every call of `PRODUCT_OPS` that no other product or attention call
encloses (so aten::linear -> aten::addmm counts once), from whichever formulation the layer
was bound to: F.linear (aten::linear, aten::matmul, aten::mm, aten::addmm, aten::mv), oneDNN's
prepacked product (mkldnn::_linear_pointwise), the int8 / int4 weight kernels
(aten::_weight_int8pack_mm, aten::_weight_int4pack_mm*) and the C kernel built on this machine
(minimodel::c_gemv, labelled by minimodel/kernels/native.py). A decode step that runs in C
in one call (minimodel::c_decode, engine/native_decode.py) is one call to the profiler: its
products are the seconds decode.c measured around each of them (clock_gettime), the LM head's
too where a greedy step goes on through it in the same call, and the rest of that call (norms,
RoPE, the K/V writes, attention, the argmax) counts as overhead. Attention is the
scaled_dot_product_attention call. Everything else in a step is overhead: norms, RoPE, SiLU,
the KV writes and page gathers, the metadata, the sampler (a log_softmax over the vocabulary),
the scheduler and Python. The report splits it into torch calls (the largest named) and the
time between them (Python, the scheduler).

overhead = 1 - products / step, with the step's time taken by the profiler around each
`llm.step()` (labelled by torch's fast record function: `native.labelled`): both parts from
the same steps. The profiler adds a little time to every call it records (a step in torch makes
hundreds of small calls; a step in C, one), so this overestimates the overhead somewhat; the
median of as many steps without the profiler is reported beside it (`step_unprofiled_s`),
measured just before (on a shared machine, not the same moment: compare, do not divide).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile

from minimodel.bench.runners import greedy
from minimodel.bench.workloads import make_requests
from minimodel.engine import LLM
from minimodel.engine.kernel_choice import kernels_without
from minimodel.engine.native_decode import PROFILER_LABEL as NATIVE_LABEL
from minimodel.kernels import native

PRODUCT_OPS = frozenset({
    "aten::linear", "aten::matmul", "aten::mm", "aten::addmm", "aten::mv",
    "mkldnn::_linear_pointwise", "aten::_weight_int8pack_mm",
    "aten::_weight_int4pack_mm", "aten::_weight_int4pack_mm_for_cpu",
    "aten::_weight_int4pack_mm_with_scales_and_zeros", native.PROFILER_LABEL,
})
ATTENTION_OPS = frozenset({"aten::scaled_dot_product_attention"})
STEP_LABEL = "minimodel::decode_step"
TOP_OTHERS = 6  # the overhead's largest calls reported by name


def _enclosed(event: FunctionEvent, names: frozenset[str]) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name in names:
            return True
        parent = parent.cpu_parent
    return False


def split_events(events: list[FunctionEvent]) -> tuple[dict[str, float], dict[str, float]]:
    """({part: microseconds}, {op: microseconds}) of the profiled steps (STEP_LABEL).

    Parts: the steps, the products and attention (each call counted once: a call inside
    another counted call is part of it), and "ops_us", every call the step makes directly (so
    step - ops is time with no torch call running: Python, the scheduler). The second dict sums
    the direct calls that are neither products nor attention, by name: what the overhead is.
    """
    counted = PRODUCT_OPS | ATTENTION_OPS
    total = {"step_us": 0.0, "products_us": 0.0, "attention_us": 0.0, "ops_us": 0.0}
    others: dict[str, float] = {}
    for e in events:
        us = e.time_range.elapsed_us()
        if e.name == STEP_LABEL:
            total["step_us"] += us
            continue
        if e.name in counted and not _enclosed(e, counted):
            total["products_us" if e.name in PRODUCT_OPS else "attention_us"] += us
        if e.cpu_parent is not None and e.cpu_parent.name == STEP_LABEL:
            total["ops_us"] += us
            if e.name not in counted:
                others[e.name] = others.get(e.name, 0.0) + us
    return total, others


def _take_turns(llm: LLM, seq: Any, setups: dict[str, Any], steps: int
                ) -> tuple[dict[str, float], int]:
    """`steps` rounds of one decode step per setup, taking turns: `setups[name](on)` sets
    the engine up for that name (on=True) and back (on=False) -> ({name: median seconds},
    tokens decoded meanwhile)."""
    times: dict[str, list[float]] = {name: [] for name in setups}
    before = seq.num_output_tokens
    for _ in range(steps):
        for name, setup in setups.items():
            setup(True)
            try:
                start = time.perf_counter()
                llm.step()
                times[name].append(time.perf_counter() - start)
            finally:
                setup(False)
    return ({name: statistics.median(t) for name, t in times.items()},
            seq.num_output_tokens - before)


def step_profile(llm: LLM, steps: int, prompt_len: int, vocab: int,
                 seed: int = 7) -> dict[str, Any]:
    """Profile `steps` batch-1 decode steps of one request (prompt_len tokens, greedy) after
    timing as many without the profiler -> seconds per step in each part, and the overhead.
    Where a step runs in C (`llm.runner.native`, engine/native_decode.py), its products are
    the seconds it measured inside them. Then, each `steps` rounds taking turns, the median
    step of each path: where decode steps run inlined (`llm.runner.inline`,
    engine/lean_decode.py), inlined against the model's own forward (`step_inline_s`,
    `step_model_forward_s`), and where they also run in C, against those (`step_native_s`),
    and where a greedy step goes on through the LM head in that call, against C steps that stop
    at the hidden states (`step_native_without_head_s`); where layers chose the C kernel
    (kernels/native.py), with it and with the next fastest formulation in its place, both in
    the inlined step (`step_c_kernel_s`, `step_without_c_kernel_s`)."""
    prompt = make_requests(1, (prompt_len, prompt_len), (1, 1), seed, vocab)[0].prompt
    rid = llm.add_request(prompt, greedy(8 * steps + 4))  # 2 + steps + steps + 4 + 2 steps
    runner = llm.runner
    inline, nat = getattr(runner, "inline", None), getattr(runner, "native", None)
    native_products_s = 0.0
    try:
        llm.step()  # the prefill
        llm.step()  # a first decode step, untimed
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            llm.step()
            times.append(time.perf_counter() - start)
        before = 0.0 if nat is None else nat.product_s
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                with native.labelled(STEP_LABEL):
                    llm.step()
        native_products_s = 0.0 if nat is None else nat.product_s - before
        seq, paired_tokens, by_path = llm.get_request(rid), 0, {}
        if inline is not None and seq is not None:  # the decode paths, step by step

            def path(use_native: bool, use_inline: bool, head: bool = True) -> Any:
                def setup(on: bool) -> None:
                    runner.native = nat if not on or use_native else None
                    runner.inline = inline if not on or use_inline else None
                    if nat is not None:
                        nat.through_head = not on or head
                return setup

            setups = {"inline": path(False, True), "model": path(False, False)}
            if nat is not None:
                setups["native"] = path(True, True)
                if nat.head_chose_c(1):  # a greedy step goes on through the LM head
                    setups["native_without_head"] = path(True, True, head=False)
            by_path, paired_tokens = _take_turns(llm, seq, setups, steps)
        swaps = kernels_without(llm.model, {"c_gemv"})
        by_kernel, c_paired_tokens = {}, 0
        if swaps and seq is not None:  # the C kernel against the next fastest, step by step

            def kernels(use_c: bool) -> Any:
                def setup(on: bool) -> None:
                    runner.native = None if on else nat  # the products one by one
                    for module, mine, other in swaps:
                        module.kernels = mine if not on or use_c else other
                return setup

            by_kernel, c_paired_tokens = _take_turns(
                llm, seq, {"c": kernels(True), "without": kernels(False)}, steps)
    finally:
        llm.abort(rid)
    part, others = split_events(prof.events())
    if native_products_s:  # the products inside the C steps, as they measured them
        part["products_us"] += native_products_s * 1e6
        others[NATIVE_LABEL] = others.get(NATIVE_LABEL, 0.0) - native_products_s * 1e6
    per_step = {k.removesuffix("_us") + "_s": v / steps / 1e6 for k, v in part.items()}
    step, products = per_step["step_s"], per_step["products_s"]
    unprofiled = statistics.median(times)
    top = sorted(others.items(), key=lambda kv: -kv[1])[:TOP_OTHERS]
    return {
        "steps": steps, "prompt_tokens": prompt_len, **per_step,
        "other_ops_s": per_step["ops_s"] - products - per_step["attention_s"],
        "outside_ops_s": step - per_step["ops_s"],
        "top_other_ops_s": {name: us / steps / 1e6 for name, us in top},
        "overhead": 1 - products / step, "step_unprofiled_s": unprofiled,
        "native_products_s": native_products_s / steps,
        **({"step_inline_s": by_path["inline"], "step_model_forward_s": by_path["model"],
            "paired_tokens": paired_tokens}  # each of those steps decoded one token
           if by_path else {}),
        **({"step_native_s": by_path["native"]} if "native" in by_path else {}),
        **({"step_native_without_head_s": by_path["native_without_head"]}
           if "native_without_head" in by_path else {}),
        **({"step_c_kernel_s": by_kernel["c"], "step_without_c_kernel_s": by_kernel["without"],
            "c_kernel_layers": len(swaps), "c_paired_tokens": c_paired_tokens}
           if by_kernel else {}),
    }
