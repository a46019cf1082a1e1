"""Checks of ch13.accept_greedy: greedy verification of k drafts.

    accept_greedy(draft: list[int], target_argmax: list[int]) -> list[int]

target_argmax has k + 1 entries: entry i is the target's greedy token after the context and
draft[:i]. The answer is the drafts that agree with it, in order, up to the first that does not,
then one token of the target's: its own where they stopped agreeing, or the bonus token after
all k.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.ch13.common import as_tokens
from minimodel.grading.common import clip
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import Text, tr


def _want(draft: list[int], argmax: list[int]) -> list[int]:
    n = 0
    while n < len(draft) and draft[n] == argmax[n]:
        n += 1
    return draft[:n] + [argmax[n]]


def _case(k: int, agree: int, V: int) -> tuple[list[int], list[int]]:
    """k drafts of which the first `agree` equal the target's argmax; later ones agree or not
    at random (only the first disagreement counts)."""
    argmax = torch.randint(0, V, (k + 1,)).tolist()
    draft = [argmax[i] if i < agree or (i > agree and bool(torch.rand(()) < 0.5))
             else (argmax[i] + 1 + int(torch.randint(0, V - 1, ()))) % V for i in range(k)]
    return draft, argmax


def _expect_case(fn: Callable, draft: list[int], argmax: list[int], hint: Text) -> None:
    given_draft, given_argmax = list(draft), list(argmax)
    what = f"accept_greedy(draft={clip(draft)}, target_argmax={clip(argmax)})"
    got = as_tokens(fn(given_draft, given_argmax), what)
    want = _want(draft, argmax)
    expect(given_draft == draft and given_argmax == argmax,
           tr("{what} changed its arguments; read them, do not modify them", what=what))
    if got != want:
        raise CheckFailed(tr("{what} returned {got}, expected {want}. {hint}", what=what,
                             got=clip(got), want=clip(want), hint=hint))


@exercise("ch13.accept_greedy", "keeps the drafts up to the first that differs from the "
                                "target's argmax, then adds the target's own token there")
def _prefix(fn: Callable) -> str:
    n = 0
    for k in (1, 2, 3, 5, 8):
        for agree in range(k):
            for V in (2, 5, 151936):
                draft, argmax = _case(k, agree, V)
                _expect_case(fn, draft, argmax,
                             tr("Draft i is accepted only while every draft before it was: "
                                "after the first disagreement the target's later rows were "
                                "computed after a token that will not be in the sequence, so "
                                "they mean nothing. The token added is target_argmax at the "
                                "first disagreement (what the target would have generated "
                                "there)."))
                n += 1
    return tr("{n} cases", n=n)


@exercise("ch13.accept_greedy", "all k drafts right: all of them and the bonus token, k + 1 "
                                "tokens")
def _bonus(fn: Callable) -> None:
    for k in (1, 2, 4, 7):
        argmax = torch.randint(0, 1000, (k + 1,)).tolist()
        _expect_case(fn, argmax[:k], argmax,
                     tr("When every draft agrees, the target's last row (after all k drafts) "
                        "still gives one more token for free: target_argmax[k]."))


@exercise("ch13.accept_greedy", "no drafts (k = 0) or the first one wrong: exactly one token, "
                                "the target's")
def _none(fn: Callable) -> None:
    _expect_case(fn, [], [int(torch.randint(0, 100, ()))],
                 tr("With no drafts a step is a plain decode step: the target's one token."))
    for k in (1, 3, 6):
        draft, argmax = _case(k, 0, 50)
        _expect_case(fn, draft, argmax,
                     tr("A wrong first draft is not emitted: the target's token replaces it, "
                        "and the step still gives one token, as a plain decode step would."))
