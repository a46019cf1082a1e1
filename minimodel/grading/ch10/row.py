"""Checks of ch10.row_parallel_linear: rank r of W multiplies its slice of the input by its
columns of the weight, and rank 0 alone adds the bias, so that the ranks' partial sums add up (the
all-reduce) to x @ W.T + b. The ranks are simulated in one process."""

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
from minimodel.grading.core import CheckFailed, exercise, expect_close, expect_shape
from minimodel.grading.i18n import tr

_ROW_CASES = [(3, 8, 6, 2), (1, 16, 16, 4), (5, 24, 7, 3), (2, 40, 12, 8), (4, 10, 8, 1)]


def _row_case(i: int, dtype: torch.dtype, bias: bool) -> _LinearCase:
    """Case i of _ROW_CASES: (x, weight, bias or None, W), a bias large enough that adding it
    on every rank shows."""
    return _linear_case(_ROW_CASES[i], 200 + i, dtype, bias, bias_scale=3)


def _row_partials(fn: Callable, x, w, b, W) -> list[torch.Tensor]:
    parts = []
    for rank in range(W):
        x_r = x.chunk(W, dim=-1)[rank].clone()
        got = fn(x_r, w, b, rank, W)
        expect_shape(got, (x.shape[0], w.shape[0]),
                     f"row_parallel_linear(x_shard {tuple(x_r.shape)}, weight {tuple(w.shape)}, "
                     f"rank={rank}, world_size={W})")
        parts.append(got)
    return parts


@exercise("ch10.row_parallel_linear", "the ranks' partial sums add up to x @ W.T + b "
                                      "(the all-reduce)")
def _row_sum(fn: Callable) -> None:
    for i, dtype, bias in _case_dtypes(len(_ROW_CASES)):
        x, w, b, W = _row_case(i, dtype, bias)
        parts = _row_partials(fn, x, w, b, W)
        expect_close(torch.stack(parts).sum(0), F.linear(x, w, b),
                     tr("sum over {world} ranks (weight {shape}, {bias})", world=W,
                        shape=tuple(w.shape), bias=_bias_note(bias)),
                     atol=10 * _tol(dtype), rtol=10 * _tol(dtype))


@exercise("ch10.row_parallel_linear", "rank r multiplies its input slice by its weight columns;"
                                      " the bias is added once, by rank 0")
def _row_each(fn: Callable) -> None:
    for i in range(len(_ROW_CASES)):
        x, w, b, W = _row_case(i, torch.float32, True)
        parts = _row_partials(fn, x, w, b, W)
        cols = w.shape[1] // W
        for rank, got in enumerate(parts):
            x_r = x[:, rank * cols:(rank + 1) * cols]
            want = x_r @ w[:, rank * cols:(rank + 1) * cols].T + (b if rank == 0 else 0)
            if not torch.allclose(got, want, atol=1e-5, rtol=1e-5):
                if torch.allclose(got, x_r @ w[:, rank * cols:(rank + 1) * cols].T + b,
                                  atol=1e-5, rtol=1e-5):
                    raise CheckFailed(tr("rank {rank} of {world} added the bias too: summed "
                                         "over the ranks it would count {world} times.",
                                         rank=rank, world=W))
                expect_close(got, want, tr("rank {rank} of {world}'s partial sum", rank=rank,
                                           world=W))
