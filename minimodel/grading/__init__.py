"""Self-grading exercises: `check(name, fn)` runs every check of one exercise on `fn`.

    from minimodel.grading import check
    check("ch03.causal_mask", causal_mask)

Checks live in one package per chapter (`minimodel/grading/ch03/`: a module per exercise, and
`common.py` for what they share; chapter 01's few checks are one file, `ch01.py`) and register
themselves with `@exercise(name, title)`. `oracles.py` holds the answers several chapters
compare with, `common.py` the helpers of their messages.
"""

from minimodel.grading.core import (
    CheckFailed,
    CheckResult,
    Outcome,
    check,
    exercise,
    exercises,
    expect,
    expect_close,
    expect_shape,
    results_log,
)
from minimodel.grading.learner import learner_module, spy_calls

__all__ = [
    "CheckFailed",
    "CheckResult",
    "Outcome",
    "check",
    "exercise",
    "exercises",
    "expect",
    "expect_close",
    "expect_shape",
    "learner_module",
    "results_log",
    "spy_calls",
]
