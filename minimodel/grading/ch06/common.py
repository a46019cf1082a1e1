"""What several of chapter 06's checks share: a random pick from a pool of strings, and the check
that a function returned token ids as a list of Python ints."""

from __future__ import annotations

import torch

from minimodel.grading.core import expect
from minimodel.grading.i18n import Text, tr


def _pick(pool: list[str]) -> str:
    """One item of `pool`, drawn with torch's seeded generator."""
    return pool[int(torch.randint(0, len(pool), ()))]


def _expect_token_list(out: object, what: str | Text, listed: Text,
                       tip: Text | str = "") -> list[int]:
    """`out` checked to be a list of Python ints (no tensors, no bools). `listed` says what the
    call returns ("a list of ints"); `tip` ends the message about items of another type."""
    expect(isinstance(out, list), tr("{what} should return {listed}, got {got}", what=what,
                                     listed=listed, got=type(out).__name__))
    assert isinstance(out, list)
    kinds = {type(t).__name__ for t in out if not isinstance(t, int) or isinstance(t, bool)}
    expect(not kinds, tr("{what} should return a list of Python ints, got items of type "
                         "{kinds}{tip}", what=what, kinds=", ".join(sorted(kinds)), tip=tip))
    return out
