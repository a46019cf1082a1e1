"""What several of chapter 05's checks share: reading a filter's output as the set of tokens it
kept (or as the logits left alone, when the filter is off), finding the first row it got wrong,
and writing values short for messages."""

from __future__ import annotations

import torch

from minimodel.grading.common import clip
from minimodel.grading.core import CheckFailed, expect, expect_shape
from minimodel.grading.i18n import Text, tr

NEG_INF = float("-inf")


def _ints(t: torch.Tensor, n: int = 8) -> str:
    """A short readable list of a tensor's values, rounded to 3 decimals."""
    return clip([round(x, 3) for x in t.flatten().tolist()], n)


def _kept(out: object, logits: torch.Tensor, what: str | Text) -> torch.Tensor:
    """The kept mask of a filter's output: Bool [B, V]; checks shape, dtype and kept values."""
    expect_shape(out, tuple(logits.shape), what)
    assert isinstance(out, torch.Tensor)
    expect(out.dtype == logits.dtype,
           tr("{what} should keep the logits' dtype {want}, got {got}", what=what,
              want=logits.dtype, got=out.dtype))
    removed = out == NEG_INF
    kept = ~removed
    if kept.any() and not torch.equal(out[kept], logits[kept]):
        changed = out[kept] != logits[kept]
        if bool((out[kept][changed] < -1e3).all()):
            raise CheckFailed(tr(
                "{what}: a removed token should be -inf (float('-inf')), got {got:.3g}: a very "
                "negative number still leaves it a tiny probability, and -inf is what the next "
                "filter and softmax expect", what=what, got=float(out[kept][changed][0])))
        raise CheckFailed(tr(
            "{what}: the kept logits should come back unchanged (a filter only writes -inf; it "
            "does not rescale, renormalise or turn logits into probabilities)", what=what))
    return kept


def _first_bad_row(kept: torch.Tensor, want: torch.Tensor) -> tuple[int, Text] | None:
    """The first row whose kept set (of kept [B, V]) is not the expected one, and how it differs
    ("kept 2 token(s), expected 3"); None when every row is right."""
    bad = (kept != want).any(-1)
    if not bad.any():
        return None
    row = int(bad.nonzero()[0])
    return row, tr("kept {kept} token(s), expected {want}", kept=int(kept[row].sum()),
                   want=int(want[row].sum()))


def _expect_unfiltered(out: object, logits: torch.Tensor, what: str, why: Text,
                       setting: str) -> None:
    """Fail unless a filter called with its no-filter `setting` ("k=0") gave back the logits as
    they were; `why` says why every logit stays."""
    expect_shape(out, tuple(logits.shape), what)
    assert isinstance(out, torch.Tensor)
    n = int((out == NEG_INF).sum())
    expect(n == 0, tr("{what} removed {n} tokens; {why}", what=what, n=n, why=why))
    expect(torch.equal(out, logits),
           tr("{what} changed the logits; with {setting} they come back as they were", what=what,
              setting=setting))
