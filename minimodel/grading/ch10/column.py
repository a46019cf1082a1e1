"""Checks of ch10.column_parallel_linear: rank r of W computes its [N, O/W] slice of
x @ W.T + b from its rows of the weight and the bias. The ranks are simulated in one process."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from minimodel.grading.ch10.common import (
    _bias_note,
    _case_dtypes,
    _linear_case,
    _LinearCase,
    _tol,
)
from minimodel.grading.core import exercise, expect, expect_close, expect_shape
from minimodel.grading.i18n import tr

_COL_CASES = [(3, 8, 12, 2), (1, 16, 16, 4), (5, 6, 24, 3), (4, 10, 8, 1), (2, 12, 40, 8)]


def _col_case(i: int, dtype: torch.dtype, bias: bool) -> _LinearCase:
    """Case i of _COL_CASES: (x, weight, bias or None, W)."""
    return _linear_case(_COL_CASES[i], 100 + i, dtype, bias)


@exercise("ch10.column_parallel_linear", "rank r returns its [N, O/W] slice of x @ W.T + b, "
                                         "ranks in order")
def _col_values(fn: Callable) -> None:
    for i, dtype, bias in _case_dtypes(len(_COL_CASES)):
        x, w, b, W = _col_case(i, dtype, bias)
        full = F.linear(x, w, b)
        O = w.shape[0]
        for rank in range(W):
            got = fn(x, w, b, rank, W)
            want = full[:, rank * O // W:(rank + 1) * O // W]
            expect_shape(got, tuple(want.shape),
                         f"column_parallel_linear(x {tuple(x.shape)}, weight {tuple(w.shape)}"
                         f", rank={rank}, world_size={W})")
            expect_close(got, want, tr("rank {rank} of {world} (weight {shape}, {bias})",
                                       rank=rank, world=W, shape=tuple(w.shape),
                                       bias=_bias_note(bias)),
                         atol=_tol(dtype), rtol=_tol(dtype))


@exercise("ch10.column_parallel_linear", "the W slices, side by side, are the full product")
def _col_cat(fn: Callable) -> None:
    x, w, b, W = _col_case(4, torch.float32, True)
    parts = [fn(x, w, b, r, W) for r in range(W)]
    expect_close(torch.cat(parts, dim=-1), F.linear(x, w, b),
                 tr("cat(ranks' outputs, dim=-1)"))


@exercise("ch10.column_parallel_linear", "leaves x, weight and bias unchanged")
def _col_pure(fn: Callable) -> None:
    x, w, b, W = _col_case(0, torch.float32, True)
    copies = (x.clone(), w.clone(), b.clone())
    fn(x, w, b, 1, W)
    expect(all(torch.equal(a, c) for a, c in zip((x, w, b), copies, strict=True)),
           tr("column_parallel_linear changed one of its inputs in place"))
