"""What several of chapter 10's checks share: seeded generators, the tolerance of each dtype,
the random inputs of a linear layer split over ranks, in each dtype its cases run in, and how a
case names its bias."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from minimodel.grading.i18n import Text, tr

_LinearCase = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, int]  # x, weight, bias, W


def _gen(seed: int) -> torch.Generator:
    """A generator of its own, so that a case's draws depend on its seed only."""
    return torch.Generator().manual_seed(seed)


def _tol(dtype: torch.dtype) -> float:
    """The tolerance of a result in `dtype`."""
    return 1e-5 if dtype == torch.float32 else 1e-10


def _linear_case(
    shape: tuple[int, int, int, int], seed: int, dtype: torch.dtype, bias: bool,
    bias_scale: float = 1.0,
) -> _LinearCase:
    """(x [N, C], weight [O, C], bias [O] times bias_scale or None, W) for shape (N, C, O, W),
    drawn from a generator seeded with `seed`."""
    N, C, O, W = shape
    g = _gen(seed)
    x = torch.randn(N, C, generator=g, dtype=dtype)
    w = torch.randn(O, C, generator=g, dtype=dtype)
    b = torch.randn(O, generator=g, dtype=dtype) * bias_scale if bias else None
    return x, w, b, W


def _case_dtypes(n: int) -> Iterator[tuple[int, torch.dtype, bool]]:
    """(case, dtype, bias) for each of n cases: in float32 with a bias, then in float64 without."""
    for i in range(n):
        yield i, torch.float32, True
        yield i, torch.float64, False


def _bias_note(bias: bool) -> Text:
    """How a case's what names its bias: "bias yes" or "bias None"."""
    return tr("bias yes") if bias else tr("bias None")
