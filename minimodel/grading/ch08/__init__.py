"""Checks of chapter 08 (the engine): admit, decode_step, ttft_tpot, and the capstone
my_engine_step (the learner's engine step, built from their own pieces, on the engine's model).

One job per module:
- guard: own_work, which fails a learner's function that hands its job to the engine's own
  decisions or to a grader's answers, however it is wrapped;
- admit, decode, timing: the checks of admit, decode_step and ttft_tpot, each with the engine's
  answer it compares with (engine_admit, engine_decode_step, reference_ttft_tpot);
- harness: EngineState, the state a learner's step works on, with its checked pool and backend;
- reference: what the capstone's runs are compared with (engine_schedule, mm.LLM's tokens);
- capstone: the checks of my_engine_step;
- common: seeded random ints, a Scheduler only the pool limits, message helpers.

Importing this package registers every check.
"""

from minimodel.grading.ch08 import admit, capstone, decode, guard, harness, reference, timing
from minimodel.grading.ch08.admit import engine_admit
from minimodel.grading.ch08.decode import engine_decode_step
from minimodel.grading.ch08.guard import own_work
from minimodel.grading.ch08.harness import EngineState, PageTableBackend
from minimodel.grading.ch08.reference import (
    CAPSTONE_MODEL,
    CAPSTONE_SETTINGS,
    CapstoneCase,
    engine_schedule,
    reference_tokens,
)
from minimodel.grading.ch08.reference import _draw_case as _draw_case  # tests/test_mutants_ch08
from minimodel.grading.ch08.reference import _reference_llm as _reference_llm
from minimodel.grading.ch08.timing import reference_ttft_tpot

__all__ = [
    "CAPSTONE_MODEL",
    "CAPSTONE_SETTINGS",
    "CapstoneCase",
    "EngineState",
    "PageTableBackend",
    "admit",
    "capstone",
    "decode",
    "engine_admit",
    "engine_decode_step",
    "engine_schedule",
    "guard",
    "harness",
    "own_work",
    "reference",
    "reference_tokens",
    "reference_ttft_tpot",
    "timing",
]
