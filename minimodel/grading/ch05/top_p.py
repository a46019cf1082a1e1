"""Checks of ch05.top_p_filter: keep each row's smallest set of most likely tokens whose
probabilities sum to >= p, and every token tied with the last of them; p=1.0 keeps everything.

The expected kept set is the grader's own top-p (oracle.py). Random cases are drawn clear of the
boundary, where a correct filter could round either way.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.ch05.common import NEG_INF, _expect_unfiltered, _first_bad_row, _ints, _kept
from minimodel.grading.ch05.oracle import _crossing, _margin_to_p, _top_p_mask
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import Text, tr

# (B, V, p, logit scale): flat and peaked rows, small and large p, the real vocabulary size.
TOP_P_CASES = [
    (1, 10, 0.5, 1.0), (3, 20, 0.9, 2.0), (2, 100, 0.3, 3.0), (4, 50, 0.75, 0.5),
    (2, 1000, 0.95, 2.0), (2, 151936, 0.8, 1.0),
]


def _clear_gap(logits: torch.Tensor, p: float) -> bool:
    """No logit of any row lies within 1e-5 of its row's crossing logit (except itself)."""
    threshold = _crossing(logits, p)[1]  # [B, 1]
    gap = (logits.double() - threshold).abs()
    return bool(((gap == 0).sum(-1) == 1).all() and (gap[gap > 0] > 1e-5).all())


def _logits_away_from_p(B: int, V: int, p: float, scale: float) -> torch.Tensor:
    """Random logits [B, V] whose cumulative probabilities stay clear of p.

    On a boundary a correct implementation may round either way; the checks avoid it. A large
    vocabulary gets a few dozen favourites over a long tail, like a real model's next token. The
    crossing token's logit is also kept clear of its neighbours, so that comparing probabilities
    or logits gives the same kept set.
    """
    for _ in range(200):
        logits = torch.randn(B, V) * scale
        if V > 1000:
            favourites = torch.randint(0, V, (B, 30))
            logits.scatter_add_(1, favourites, torch.full((B, 30), 14.0))
        if _margin_to_p(logits, p) > (1e-3 if V > 1000 else 2e-5) and _clear_gap(logits, p):
            return logits
    raise AssertionError(tr("could not draw logits away from p={p}", p=p))  # pragma: no cover


def _top_p_compare(fn: Callable, logits: torch.Tensor, p: float, what: str | Text) -> None:
    """Fail, with the likely mistake, unless fn(logits, p) keeps the expected tokens."""
    want = _top_p_mask(logits, p)
    kept = _kept(fn(logits.clone(), p), logits, what)
    bad = _first_bad_row(kept, want)
    if bad is None:
        return
    row, differs = bad
    probs = logits[row].double().softmax(-1)
    order = probs.argsort(descending=True)
    n_want = int(want[row].sum())
    n_kept = int(kept[row].sum())
    sorted_probs = probs[order]
    mass = float(probs[kept[row]].sum())
    hint: Text | str = ""
    index, threshold = _crossing(logits[row : row + 1], p)
    tied = int((logits[row].double() == threshold[0, 0]).sum())
    if tied > 1 and n_kept < n_want and bool((kept[row] <= want[row]).all()) \
            and n_kept >= int(index) + 1:
        hint = tr("; {tied} tokens have the same probability as the token that crosses p, but "
                  "only {kept} of them were kept: which of equal tokens survives should not "
                  "depend on where a sort happened to put them, so every token as likely as the "
                  "crossing token stays", tied=tied, kept=tied - (n_want - n_kept))
    elif n_kept == n_want - 1 and torch.equal(kept[row][order][:n_kept],
                                              torch.ones(n_kept, dtype=torch.bool)):
        hint = tr("; it dropped the token that crosses p (the one that brings the sum from "
                  "{before:.3f} to {after:.3f}): that token is kept",
                  before=float(sorted_probs[:n_kept].sum()),
                  after=float(sorted_probs[:n_want].sum()))
    elif n_kept == 0:
        hint = tr("; it removed every token: the most likely token always stays")
    elif n_kept > 0 and not kept[row][order[0]]:
        hint = tr("; it removed the most likely token: keep the most likely, drop the tail")
    elif mass < p:
        hint = tr("; the kept tokens hold only {mass:.3f} of the probability, less than p",
                  mass=mass)
    raise CheckFailed(tr(
        "{what}: row {row} {differs} (the smallest set of most likely tokens whose probabilities "
        "sum to >= p={p}, from the softmax of the row, and every token tied with the last of "
        "them){hint}", what=what, row=row, differs=differs, p=p, hint=hint))


@exercise("ch05.top_p_filter", "keeps each row's smallest most-likely set with mass >= p")
def _top_p_values(fn: Callable) -> str:
    for B, V, p, scale in TOP_P_CASES:
        logits = _logits_away_from_p(B, V, p, scale)
        logits[-1] += 5.0  # a shift changes no probability: the filter must not care
        _top_p_compare(fn, logits, p, f"top_p_filter(logits [{B}, {V}], p={p})")
    return tr("{n} cases, up to V = 151936", n=len(TOP_P_CASES))


@exercise("ch05.top_p_filter", "keeps the token whose probability crosses p")
def _top_p_crossing(fn: Callable) -> None:
    base = torch.tensor([0.5, 0.3, 0.15, 0.05])
    for p, n in [(0.7, 2), (0.85, 3), (0.55, 2), (0.4, 1), (0.97, 4)]:
        for _ in range(3):
            perm = torch.randperm(4)
            logits = (base[perm].log() + torch.randn(()) * 3)[None]  # [1, 4], shifted
            what = tr("top_p_filter with probabilities {probs} and p={p}",
                      probs=[round(float(x), 2) for x in base[perm]], p=p)
            _top_p_compare(fn, logits, p, what)
            kept = fn(logits.clone(), p) != NEG_INF
            expect(int(kept.sum()) == n,
                   tr("{what} should keep {n} token(s), the top ones up to and including the one "
                      "that crosses p, got {got}", what=what, n=n, got=int(kept.sum())))


def _tied_logits(B: int, V: int, p: float, dtype: torch.dtype) -> torch.Tensor:
    """Logits [B, V] with many exact ties, a tie at the crossing token of row 0, and running sums
    clear of p."""
    for _ in range(500):
        if dtype == torch.bfloat16:  # what a model in bfloat16 gives: few distinct values
            logits = (torch.randn(B, V) * 2).to(dtype)
            if V > 1000:
                favourites = torch.randint(0, V, (B, 40))
                logits = logits.float().scatter_add_(1, favourites,
                                                     torch.full((B, 40), 12.0)).to(dtype)
        else:
            logits = torch.randint(-3, 4, (B, V)).to(dtype)
        index, threshold = _crossing(logits[:1], p)
        kept_row0 = int((logits[0].double() >= threshold[0, 0]).sum())
        if kept_row0 > int(index) + 1 and _margin_to_p(logits, p) > (1e-3 if V > 1000 else 1e-4):
            return logits  # row 0: tokens tied with the crossing one come after it in a sort
    raise AssertionError(tr("could not draw tied logits"))  # pragma: no cover


@exercise("ch05.top_p_filter", "keeps every token as likely as the one that crosses p (ties)")
def _top_p_ties(fn: Callable) -> str:
    cases = [(2, 12, 0.5, torch.float32), (3, 40, 0.8, torch.float32),
             (2, 200, 0.3, torch.float64), (2, 64, 0.9, torch.bfloat16),
             (2, 151936, 0.9, torch.bfloat16)]
    for B, V, p, dtype in cases:
        logits = _tied_logits(B, V, p, dtype)
        _top_p_compare(fn, logits, p, tr("top_p_filter(logits [{B}, {V}] in {dtype} with ties, "
                                         "p={p})", B=B, V=V, dtype=dtype, p=p))
    probs = torch.tensor([0.4, 0.2, 0.2, 0.2])  # p=0.5: the first 0.2 crosses, all three tie
    for _ in range(3):
        logits = (probs[torch.randperm(4)].log() + torch.randn(()) * 3)[None]  # [1, 4]
        kept = _kept(fn(logits.clone(), 0.5), logits, "top_p_filter")
        expect(int(kept.sum()) == 4,
               tr("top_p_filter with probabilities {probs} and p=0.5 kept {kept} token(s): 0.4 "
                  "alone is below 0.5, a 0.2 crosses it, and the other two 0.2s are just as "
                  "likely, so all four stay", probs=_ints(logits.softmax(-1)[0]),
                  kept=int(kept.sum())))
    return tr("{n} cases, up to V = 151936 in bfloat16", n=len(cases) + 3)


@exercise("ch05.top_p_filter", "always keeps at least the most likely token")
def _top_p_at_least_one(fn: Callable) -> None:
    for B, V, p in [(2, 10, 1e-4), (3, 100, 0.01), (1, 151936, 0.05)]:
        logits = torch.randn(B, V) * 2
        logits[:, 0] += 20  # one clear favourite, with probability far above p
        out = fn(logits.clone(), p)
        what = f"top_p_filter(logits [{B}, {V}], p={p})"
        kept = _kept(out, logits, what)
        n = kept.sum(-1)
        expect(bool((n == 1).all()),
               tr("{what} kept {n} tokens per row; when the most likely token alone reaches p, it "
                  "is the only one kept: the most likely token always stays, so there is always "
                  "something to sample", what=what, n=n.tolist()))
        top = logits.argmax(-1)
        expect(bool(kept[torch.arange(B), top].all()),
               tr("{what} removed the most likely token", what=what))


@exercise("ch05.top_p_filter", "p=1.0 means no filter: the logits come back unchanged")
def _top_p_one(fn: Callable) -> None:
    for B, V, peak in [(1, 5, 0.0), (3, 64, 0.0), (2, 1000, 0.0), (2, 151936, 25.0)]:
        logits = torch.randn(B, V)
        logits[:, 0] += peak  # a sure favourite: a float32 running sum is 1.0 from the start
        _expect_unfiltered(fn(logits.clone(), 1.0), logits,
                           f"top_p_filter(logits [{B}, {V}], p=1.0)",
                           tr("p=1.0 means no top-p, so every logit stays (a float32 running "
                              "sum can reach 1.0 long before the tail ends, so at p=1.0 it "
                              "cannot decide what to drop)"), "p=1.0")


@exercise("ch05.top_p_filter", "works in float64, float16 and bfloat16")
def _top_p_dtypes(fn: Callable) -> None:
    base = torch.tensor([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])  # far from p on purpose
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        rows = torch.stack([base[torch.randperm(6)].log() for _ in range(3)])  # [3, 6]
        logits = rows.to(dtype)
        _top_p_compare(fn, logits, 0.7,
                       tr("top_p_filter(logits [3, 6] in {dtype}, p=0.7)", dtype=dtype))
