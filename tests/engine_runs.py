"""Helpers shared by the engine tests: run requests to the end, and log CUDA-graph replays."""

from __future__ import annotations

import minimodel as mm
from minimodel.engine import LLM


def run_traced(llm: LLM, reqs: list[tuple[list[int], mm.SamplingParams]]):
    """Run requests to the end -> (outputs in request order, the batch of every step)."""
    ids = [llm.add_request(p, sp) for p, sp in reqs]
    done, trace = {}, []
    while llm.has_unfinished_requests():
        done.update({o.request_id: o for o in llm.step()})
        trace.append(llm.last_batch)
    return [done[i] for i in ids], trace


def record_replays(llm: LLM) -> list[tuple[int, int]]:
    """(real requests B, captured size replayed) of every graph replay from now on."""
    runner, seen = llm.runner.graphs, []
    run = runner.run

    def logged(input_ids, metadata):
        B = metadata.num_requests
        seen.append((B, next(s for s in runner.batch_sizes if s >= B)))
        return run(input_ids, metadata)

    runner.run = logged
    return seen
