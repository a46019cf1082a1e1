"""Self-grading exercises: `check(name, fn)` runs every check of one exercise on `fn`.

    from minimodel.grading import check
    check("ch03.causal_mask", causal_mask)

Checks live in one module per chapter (`minimodel/grading/ch03.py`, ...) and register
themselves with `@exercise(name, title)`.
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
    "results_log",
]
