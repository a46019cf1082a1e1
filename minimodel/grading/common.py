"""What the checks of several chapters share: how a long list is shortened in a message, and
where two lists of tokens first part."""

from __future__ import annotations

from collections.abc import Sequence


def clip(xs: Sequence[object], n: int = 10) -> str:
    """`xs` written as a list for a message: its first n items, then "..." when there are more."""
    return f"{list(xs[:n])}{'...' if len(xs) > n else ''}"


def first_difference(got: Sequence[object], want: Sequence[object]) -> int:
    """The first index at which `got` and `want` hold different items; when one is the start of
    the other, the length of the shorter (the first item only one of them has)."""
    return next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                min(len(got), len(want)))
