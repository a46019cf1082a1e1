"""Checks of ch13.rejection_sample: modified rejection sampling of k drafts.

    rejection_sample(draft: list[int], draft_probs [k, V], target_probs [k + 1, V],
                     generator: torch.Generator) -> list[int]

Draft i is accepted with probability min(1, p_i(d_i) / q_i(d_i)); at the first rejection one
token is drawn from norm(max(0, p_i - q_i)) and the step ends; after k accepted drafts a bonus
token is drawn from p_k. Exact cases first (what must always or never happen), then the
distribution of what comes out, by a chi-square test at a false-alarm rate of 1e-4 (common.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.ch13.common import (
    as_tokens,
    expect_distribution,
    nearby_rows,
    random_rows,
    single_threaded,
)
from minimodel.grading.common import clip
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import tr

# The titles below write TRIALS and common.FALSE_ALARM out: a title is a literal, the key of its
# Chinese in zh/ch13.py.
TRIALS = 4000


def _call(fn: Callable, draft: list[int], q: torch.Tensor, p: torch.Tensor,
          g: torch.Generator) -> list[int]:
    """The learner's tokens, after checking their form and that the inputs are untouched."""
    k = len(draft)
    what = f"rejection_sample(draft={clip(draft)}, draft_probs [{k}, {q.shape[-1]}], " \
           f"target_probs [{k + 1}, {p.shape[-1]}])"
    d, qq, pp = list(draft), q.clone(), p.clone()
    out = as_tokens(fn(d, qq, pp, g), what)
    expect(d == draft and torch.equal(qq, q) and torch.equal(pp, p),
           tr("{what} changed its arguments; read them, do not modify them", what=what))
    expect(1 <= len(out) <= k + 1,
           tr("{what} returned {n} tokens; a step emits 1 to k + 1 = {most} (the accepted "
              "drafts and one more)", what=what, n=len(out), most=k + 1))
    expect(out[:-1] == draft[:len(out) - 1],
           tr("{what} returned {out}: all but its last token must be the first drafts, "
              "{drafts}; a step emits a prefix of the drafts and then one token of its own",
              what=what, out=clip(out), drafts=clip(draft[:len(out) - 1])))
    V = p.shape[-1]
    expect(all(0 <= t < V for t in out), tr("{what} returned {out}: ids outside 0..{last}",
                                            what=what, out=clip(out), last=V - 1))
    return out


def _draw(q: torch.Tensor, g: torch.Generator) -> list[int]:
    return [int(torch.multinomial(row, 1, generator=g)) for row in q]


@exercise("ch13.rejection_sample", "returns the accepted drafts and one more token, as Python "
                                   "ints; the same generator seed gives the same tokens")
@single_threaded
def _form(fn: Callable) -> None:
    g = torch.Generator().manual_seed(1)
    for k in (1, 2, 4):
        for V in (3, 7, 64):
            p = random_rows(k + 1, V, g)
            q = nearby_rows(p[:k], g)
            draft = _draw(q, g)
            runs = [_call(fn, draft, q, p, torch.Generator().manual_seed(s)) for s in (7, 7)]
            expect(runs[0] == runs[1],
                   tr("rejection_sample gave {first} and then {second} with two generators "
                      "seeded alike: draw every random number (the acceptance test's uniform "
                      "number too) from the generator it is given", first=runs[0],
                      second=runs[1]))


@exercise("ch13.rejection_sample", "exact cases: q = p accepts every draft; a draft the target "
                                   "gives probability 0 is never accepted; a corrected token is "
                                   "never the draft it replaces when the drafter was sure")
@single_threaded
def _exact(fn: Callable) -> str:
    g = torch.Generator().manual_seed(2)
    n = 0
    for k in (1, 3):
        for _ in range(30):  # the drafter proposes from the target's own distribution
            p = random_rows(k + 1, 6, g)
            draft = _draw(p[:k], g)
            out = _call(fn, draft, p[:k].clone(), p, g)
            expect(len(out) == k + 1,
                   tr("draft_probs equal to target_probs (the drafter is the target) should "
                      "accept all {k} drafts, since min(1, p/q) = 1; got {out} for drafts "
                      "{drafts}", k=k, out=clip(out), drafts=clip(draft)))
            n += 1
        for _ in range(30):  # the target never emits the drafted token
            p = random_rows(k + 1, 6, g)
            draft = _draw(random_rows(k, 6, g), g)
            p[0, draft[0]] = 0
            p[0] /= p[0].sum()
            q = random_rows(k, 6, g)
            q[0] = 0.02
            q[0, draft[0]] = 1 - 0.02 * 5
            out = _call(fn, draft, q, p, g)
            expect(len(out) == 1 and out[0] != draft[0],
                   tr("draft {draft} has target probability 0 at its position, so it must be "
                      "rejected and replaced by a token the target can emit; got {out}",
                      draft=draft[0], out=clip(out)))
            n += 1
        for _ in range(60):  # a sure drafter (one-hot q), as the n-gram drafter
            p = random_rows(k + 1, 5, g)
            draft = _draw(random_rows(k, 5, g), g)
            q = torch.nn.functional.one_hot(torch.tensor(draft), 5).double()
            out = _call(fn, draft, q, p, g)
            if len(out) <= k:
                i = len(out) - 1
                expect(out[i] != draft[i],
                       tr("draft {draft} (proposed for sure: q = 1) was rejected at position "
                          "{i}, yet the token emitted there is {out}, the same token. The "
                          "correction comes from the residual max(0, p - q), normalised, which "
                          "is 0 at the rejected token", draft=draft[i], i=i, out=out[i]))
            n += 1
    return tr("{n} steps", n=n)


def _counts(fn: Callable, make: Callable, g: torch.Generator, trials: int,
            keep: Callable[[list[int], list[int]], int | None], V: int) -> torch.Tensor:
    counts = torch.zeros(V, dtype=torch.float64)
    for _ in range(trials):
        draft, q, p = make()
        out = _call(fn, draft, q, p, g)
        t = keep(draft, out)
        if t is not None:
            counts[t] += 1
    return counts


@exercise("ch13.rejection_sample", "the first token emitted follows the target's distribution "
                                   "(chi-square over 4000 steps per case, false-alarm rate "
                                   "0.0001), whatever the drafter proposed")
@single_threaded
def _first(fn: Callable) -> str:
    g = torch.Generator().manual_seed(3)
    notes = []
    V = 5
    for k, kind in ((1, "near"), (3, "near"), (2, "unrelated"), (2, "sure")):
        p = random_rows(k + 1, V, g)
        if kind == "unrelated":
            q = random_rows(k, V, g)
            drafter = tr("an unrelated drafter")
        elif kind == "sure":
            q = None
            drafter = tr("a sure drafter (one-hot q)")
        else:
            q = nearby_rows(p[:k], g)
            drafter = tr("a drafter near the target")

        def make(p=p, q=q, k=k):
            if q is None:
                d = torch.randint(0, V, (k,), generator=g)
                return d.tolist(), torch.nn.functional.one_hot(d, V).double(), p
            return _draw(q, g), q, p

        counts = _counts(fn, make, g, TRIALS, lambda d, out: out[0], V)
        notes.append(expect_distribution(
            counts, p[0], tr("k = {k}, {drafter}: the first token", k=k, drafter=drafter),
            tr("Accept draft d with probability min(1, p(d) / q(d)); when it is rejected, draw "
               "from max(0, p - q) normalised to sum to 1: together the two give exactly p.")))
    return tr("{note} (and {more} more cases)", note=notes[0], more=len(notes) - 1)


@exercise("ch13.rejection_sample", "after accepted drafts, the next token follows the target's "
                                   "row at its position, the bonus token included (chi-square, "
                                   "false-alarm rate 0.0001)")
@single_threaded
def _later(fn: Callable) -> str:
    g = torch.Generator().manual_seed(4)
    V = 5
    notes = []
    for k, pos in ((1, 1), (2, 1), (2, 2)):
        p = random_rows(k + 1, V, g)
        q = nearby_rows(p[:k], g, noise=0.4)

        def keep(d, out, pos=pos):  # the token at pos, when every draft before it was accepted
            return out[pos] if len(out) > pos else None

        counts = _counts(fn, lambda p=p, q=q: (_draw(q, g), q, p), g, TRIALS, keep, V)
        what = tr("the bonus token") if pos == k else tr("token {pos}", pos=pos)
        notes.append(expect_distribution(
            counts, p[pos], tr("k = {k}, {what} (after {pos} accepted draft(s))", k=k, what=what,
                               pos=pos),
            tr("Row i of target_probs is the target's distribution at draft i's position (row k "
               "after all k drafts): an accepted draft moves on to the next row, and the bonus "
               "token is drawn from the target's last row, not the drafter's.")))
        if int(counts.sum()) < TRIALS // 4:
            raise CheckFailed(tr("k = {k}: only {n} of {trials} steps accepted the first {pos} "
                                 "draft(s) of a drafter close to the target; accept with "
                                 "probability min(1, p(d) / q(d)).", k=k, n=int(counts.sum()),
                                 trials=TRIALS, pos=pos))
    return notes[-1]
