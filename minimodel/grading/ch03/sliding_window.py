"""Checks of ch03.sliding_window_mask: causal attention that reads only the last `window` keys,
the query itself included; a window below 1 is refused.

Shapes: T tokens; rows are queries t, columns keys s.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import tr

# (T, window): a window of 1 (only itself), inside T, exactly T, beyond T
_WINDOW_CASES = ((1, 1), (5, 1), (6, 2), (7, 3), (9, 4), (16, 5), (8, 8), (5, 9), (33, 7))


def _expected_window(T: int, window: int) -> torch.Tensor:
    """Bool [T, T]: query t reads keys t-window+1 .. t."""
    t = torch.arange(T)
    behind = t[:, None] - t[None, :]  # [T, T]: how far key s lies behind query t
    return (behind >= 0) & (behind < window)


def _window_mask(fn: Callable, T: int, window: int) -> torch.Tensor:
    """The learner's sliding_window_mask(T, window); fails unless it is bool [T, T]."""
    m = fn(T, window)
    expect_shape(m, (T, T), f"sliding_window_mask({T}, {window})")
    expect(m.dtype == torch.bool,
           tr("sliding_window_mask({T}, {window}) has dtype {dtype}; it should be torch.bool "
              "(True = may attend), like causal_mask.", T=T, window=window, dtype=m.dtype))
    return m


def _explain_window(m: torch.Tensor, T: int, window: int) -> None:
    """`m` must be the window mask; the failure names the first wrong entry and the mistake."""
    want = _expected_window(T, window)
    if torch.equal(m, want):
        return
    t, s = (int(i) for i in (m != want).nonzero()[0])
    where = f"sliding_window_mask({T}, {window})[{t}, {s}]"
    value = bool(m[t, s])
    if s > t:
        raise CheckFailed(tr("{where} is {value}: query {t} could read the later token {s}. A "
                             "sliding window is still causal: it hides the future and the far "
                             "past.", where=where, value=value, t=t, s=s))
    expected = min(window, t + 1)
    if torch.equal(m, _expected_window(T, window + 1)):
        hint = tr(" Every query reads up to window + 1 = {n} keys; the window counts the query "
                  "itself.", n=window + 1)
    elif window > 1 and torch.equal(m, _expected_window(T, window - 1)):
        hint = tr(" Every query reads up to window - 1 = {n} keys; the window counts the query "
                  "itself too.", n=window - 1)
    elif torch.equal(m, _expected_window(T, T)):
        hint = tr(" It is the plain causal mask: the window is ignored.")
    else:
        hint = ""
    raise CheckFailed(tr("{where} is {value}: query {t} reads {n} keys, expected the {expected} "
                         "keys {first}..{t}.{hint}", where=where, value=value, t=t,
                         n=int(m[t].sum()), expected=expected, first=t - expected + 1, hint=hint))


@exercise("ch03.sliding_window_mask", "is a bool [T, T] tensor for T from 1 to 33, windows 1 to 9")
def _window_shape(fn: Callable) -> None:
    for T, window in _WINDOW_CASES:
        _window_mask(fn, T, window)


@exercise("ch03.sliding_window_mask",
          "query t reads exactly keys t-window+1 .. t (itself and the window-1 before it)")
def _window_band(fn: Callable) -> None:
    drawn = [(int(T), int(torch.randint(1, int(T) + 1, ()))) for T in torch.randint(2, 40, (6,))]
    for T, window in (*_WINDOW_CASES, *drawn):
        _explain_window(_window_mask(fn, T, window), T, window)


@exercise("ch03.sliding_window_mask",
          "window 1 is the diagonal; a window of T or more is the causal mask")
def _window_edges(fn: Callable) -> None:
    for T in (1, 4, 11):
        expect(torch.equal(_window_mask(fn, T, 1), torch.eye(T, dtype=torch.bool)),
               tr("sliding_window_mask({T}, 1) should be the diagonal only: with a window of one "
                  "token, every token reads just itself.", T=T))
        for window in (T, T + 1, 3 * T + 2):
            _explain_window(_window_mask(fn, T, window), T, window)


@exercise("ch03.sliding_window_mask", "raises ValueError for a window below 1")
def _window_invalid(fn: Callable) -> None:
    for window in (0, -3):
        try:
            out = fn(6, window)
        except ValueError:
            continue
        what = (tr("all False") if isinstance(out, torch.Tensor) and not out.bool().any()
                else tr("a mask"))
        raise CheckFailed(tr(
            "sliding_window_mask(6, {window}) returned {what}. A window below 1 leaves every "
            "query with no key to read (a softmax over -inf only gives NaN): raise a ValueError "
            "that says the window must be at least 1.", window=window, what=what))
