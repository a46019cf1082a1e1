"""Checks of ch09.online_softmax: softmax over blocks of a row with a running max and sum.

The expected values are torch's softmax in float64.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.ch09.common import _close, _unchanged, _worst
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import Text, tr


def _tensor(out: object, what: str) -> torch.Tensor:
    """The tensor a function returned, after checking it is one."""
    expect(isinstance(out, torch.Tensor), tr("{what} should return a torch.Tensor, got {got}",
                                             what=what, got=type(out).__name__))
    assert isinstance(out, torch.Tensor)
    return out


def _softmax_problem(fn: Callable, x: torch.Tensor, block: int) -> Text | None:
    """What is wrong with fn(x, block), or None."""
    what = f"online_softmax(x {list(x.shape)}, block={block})"
    before = x.clone()
    got = _tensor(fn(x, block), what)
    _unchanged((x,), (before,), what)
    expect_shape(got, tuple(x.shape), what)
    want = torch.softmax(x.double(), dim=-1)
    if _close(got, want, 1e-6):
        return None
    worst = _worst(got, want)
    sums = got.double().sum(-1)
    if not bool(got.isfinite().all()):
        hint = tr(" It holds inf or nan: an exp of a large logit overflowed (float32 holds up to "
                  "about exp(88.7)), or 0/0 came from exps that all underflowed. Every exp "
                  "should see a logit minus a max that is at least as large.")
    elif not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        hint = tr(" Its rows sum to {low:.3g}..{high:.3g}, not 1: the running sum must end as "
                  "the sum over the whole row, in the same units (the same max) as the "
                  "numerators it divides.", low=float(sums.min()), high=float(sums.max()))
    else:
        hint = tr(" The rows sum to 1 but the values are wrong: when a block raises the running "
                  "max, what was summed under the old max has to be brought to the new one.")
    return tr("{what} is off from x.softmax(-1) by up to {worst:.3g}.{hint}", what=what,
              worst=worst, hint=hint)


def _softmax_cases(fn: Callable, cases: list[tuple[torch.Tensor, int]]) -> None:
    for x, block in cases:
        problem = _softmax_problem(fn, x, block)
        if problem:
            raise CheckFailed(problem)


@exercise("ch09.online_softmax", "returns x's shape, equal to x.softmax(-1) for 1-D, 2-D and "
          "3-D inputs")
def _sm_shapes(fn: Callable) -> None:
    cases = []
    for shape in ((9,), (3, 16), (2, 3, 21), (4, 1), (1, 50)):
        cases.append((torch.randn(shape) * 3, int(torch.randint(1, 8, ()))))
    _softmax_cases(fn, cases)


@exercise("ch09.online_softmax", "any block size: 1, one that divides S, one that does not, "
          "and block >= S")
def _sm_blocks(fn: Callable) -> str:
    cases = []
    for S in (int(torch.randint(10, 40, ())), 64):
        x = torch.randn(5, S) * 4
        for block in (1, 8 if S == 64 else 3, S - 1, S, S + 5):
            cases.append((x, block))
    _softmax_cases(fn, cases)
    return tr("{n} (S, block) pairs", n=len(cases))


@exercise("ch09.online_softmax", "carries the max across blocks: rows that rise, fall, and "
          "jump")
def _sm_carry(fn: Callable) -> None:
    S = 40
    ramp = torch.linspace(-10, 10, S)
    jump = torch.zeros(S)
    jump[int(torch.randint(20, S, ()))] = 12.0  # a late block with a much larger max
    rows = torch.stack([ramp, ramp.flip(0), jump, torch.randn(S) * 6])
    _softmax_cases(fn, [(rows, b) for b in (4, 7)])


@exercise("ch09.online_softmax", "stable on logits in the thousands, where exp(x) overflows")
def _sm_large(fn: Callable) -> None:
    x = torch.randn(4, 30) * 5
    x[0] += 1000.0
    x[1] -= 1000.0  # exp underflows to 0 for every entry
    x[2, ::2] += 3000.0  # half the row far above the rest
    _softmax_cases(fn, [(x, 4), (x, 7), (x * 2, 30)])
