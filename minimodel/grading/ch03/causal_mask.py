"""Checks of ch03.causal_mask: a bool [T, T] mask, True where query t may read key s (s <= t).

Shapes: T tokens; rows are queries t, columns keys s.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.ch03.common import _tril
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import tr

_MASK_SIZES = (1, 2, 3, 7, 16, 33)


def _masks(fn: Callable) -> list[tuple[int, torch.Tensor]]:
    """(T, the learner's mask) for every T of _MASK_SIZES; fails unless each is [T, T]."""
    out = []
    for T in _MASK_SIZES:
        m = fn(T)
        expect_shape(m, (T, T), f"causal_mask({T})")
        out.append((T, m))
    return out


@exercise("ch03.causal_mask", "is a bool [T, T] tensor for T = 1, 2, 3, 7, 16, 33")
def _mask_shape(fn: Callable) -> None:
    for T, m in _masks(fn):
        expect(
            m.dtype == torch.bool,
            tr("causal_mask({T}) has dtype {dtype}; it should be torch.bool (True = may attend): "
               "masked_fill and ~ treat a bool mask as a rule, while a 0/1 or -inf float mask "
               "means something else to every function that receives it.", T=T, dtype=m.dtype),
        )


@exercise("ch03.causal_mask", "lets every token attend to itself (the diagonal is True)")
def _mask_diagonal(fn: Callable) -> None:
    for T, m in _masks(fn):
        diag = m.bool().diagonal()
        if not diag.all():
            t = int((~diag).nonzero()[0])
            raise CheckFailed(tr(
                "causal_mask({T})[{t}, {t}] is False: query {t} may not read its own key. "
                "The diagonal must be True: a token may read itself, and the first token has "
                "nothing else to read.", T=T, t=t))


@exercise("ch03.causal_mask", "never lets a query see a later key (above the diagonal is False)")
def _mask_future(fn: Callable) -> None:
    for T, m in _masks(fn):
        future = m.bool().triu(1)
        if future.any():
            t, s = (int(i) for i in future.nonzero()[0])
            hint = (
                tr(" It looks transposed: rows are queries t, columns are keys s, and query t may "
                   "read keys s <= t (the lower triangle).")
                if not m.bool().tril(-1).any()
                else ""
            )
            raise CheckFailed(tr(
                "causal_mask({T})[{t}, {s}] is True: query {t} could read the later token "
                "{s}.{hint}", T=T, t=t, s=s, hint=hint))


@exercise("ch03.causal_mask", "lets every query see all earlier keys (below the diagonal is True)")
def _mask_past(fn: Callable) -> None:
    for T, m in _masks(fn):
        past = _tril(T, -1)
        missing = past & ~m.bool()
        if missing.any():
            t, s = (int(i) for i in missing.nonzero()[0])
            raise CheckFailed(tr(
                "causal_mask({T})[{t}, {s}] is False: query {t} should see the earlier token {s}."
                " A causal mask hides only the future.", T=T, t=t, s=s))
