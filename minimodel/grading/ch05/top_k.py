"""Checks of ch05.top_k_filter: keep each row's k largest logits (and every logit tied with the
k-th), write -inf elsewhere; k=0 keeps everything.

The expected kept set comes from the package's own top-k (minimodel/sampling.py), which keeps
ties the same way.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.ch05.common import NEG_INF, _expect_unfiltered, _first_bad_row, _ints, _kept
from minimodel.grading.core import CheckFailed, exercise
from minimodel.grading.i18n import Text, tr
from minimodel.sampling import top_k_filter as package_top_k

# (B, V, k): one token kept, a few, half, all of them, and the real vocabulary size.
TOP_K_CASES = [(1, 7, 1), (3, 10, 2), (2, 50, 5), (4, 100, 50), (2, 37, 37), (2, 151936, 20)]


def _top_k_expected(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Bool [B, V]: the tokens top-k keeps in each row."""
    B = logits.shape[0]
    return package_top_k(logits, torch.full((B,), k, dtype=torch.long)) != NEG_INF


def _top_k_compare(fn: Callable, logits: torch.Tensor, k: int, what: str | Text) -> None:
    """Fail, with the likely mistake, unless fn(logits, k) keeps the expected tokens."""
    want = _top_k_expected(logits, k)
    kept = _kept(fn(logits.clone(), k), logits, what)
    bad = _first_bad_row(kept, want)
    if bad is not None:
        row, differs = bad
        ranks = logits[row].sort(descending=True).values
        hint: Text | str = ""
        if int(kept[row].sum()) == k and int(want[row].sum()) > k:
            hint = tr("; the k-th largest value {kth:.3g} is tied, and every token equal to it "
                      "stays", kth=float(ranks[k - 1]))
        elif int(kept[row].sum()) < k:
            hint = tr("; a logit equal to the k-th largest ({kth:.3g}) must stay: remove only "
                      "logits strictly below it", kth=float(ranks[k - 1]))
        elif torch.equal(kept[row], logits[row] >= ranks[-k]):
            hint = tr("; it used the k-th smallest logit as the threshold: count from the "
                      "largest (sort in descending order)")
        raise CheckFailed(tr(
            "{what}: row {row} {differs}; keep every logit >= the row's k-th largest and set the "
            "others to -inf{hint}", what=what, row=row, differs=differs, hint=hint))


@exercise("ch05.top_k_filter", "keeps each row's k largest logits and writes -inf elsewhere")
def _top_k_values(fn: Callable) -> str:
    for B, V, k in TOP_K_CASES:
        logits = torch.randn(B, V) * 3
        logits[0] += 10 * torch.rand(1)  # rows on different scales: each row has its own k-th
        _top_k_compare(fn, logits, k, f"top_k_filter(logits [{B}, {V}], k={k})")
    return tr("{n} cases, up to V = 151936", n=len(TOP_K_CASES))


@exercise("ch05.top_k_filter", "keeps every token tied with the k-th largest")
def _top_k_ties(fn: Callable) -> None:
    for B, V, k in [(2, 12, 3), (3, 40, 7), (1, 9, 1), (2, 20, 10)]:
        logits = torch.randint(-3, 4, (B, V)).float()  # few distinct values: many ties
        _top_k_compare(fn, logits, k, f"top_k_filter(logits {_ints(logits[0])} ..., k={k})")


@exercise("ch05.top_k_filter", "k=0 means no filter: the logits come back unchanged")
def _top_k_zero(fn: Callable) -> None:
    for B, V in [(1, 5), (3, 64), (2, 151936)]:
        logits = torch.randn(B, V)
        _expect_unfiltered(fn(logits.clone(), 0), logits,
                           f"top_k_filter(logits [{B}, {V}], k=0)",
                           tr("k=0 means no top-k, so every logit stays"), "k=0")


@exercise("ch05.top_k_filter", "works in float32, float64, float16 and bfloat16")
def _top_k_dtypes(fn: Callable) -> None:
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        logits = (torch.randn(3, 30) * 2).to(dtype)
        _top_k_compare(fn, logits, 4,
                       tr("top_k_filter(logits [3, 30] in {dtype}, k=4)", dtype=dtype))
