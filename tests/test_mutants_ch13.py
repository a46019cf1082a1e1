"""Chapter 13's checks: every wrong verifier and step that learners write fails, every right one
passes.

The solutions below are written as a learner would, differently from the package's (a while
loop for greedy acceptance, an inverse-CDF draw for the residual, the target fed in two calls);
each mutant changes one thing in them."""

from __future__ import annotations

import pytest
import torch

from minimodel.engine import speculative as package
from minimodel.engine.speculative import probabilities
from minimodel.grading import check

# --- accept_greedy ----------------------------------------------------------------------------


def make_accept(no_bonus=False, bonus_index=None, emit_draft=False, skip_mismatch=False,
                one_short=False):
    def accept_greedy(draft, target_argmax):
        if skip_mismatch:  # every draft that agrees, even after a disagreement
            kept = [d for d, t in zip(draft, target_argmax) if d == t]
            return kept + [target_argmax[len(kept)]]
        n = 0
        while n < len(draft) and draft[n] == target_argmax[n]:
            n += 1
        if one_short and n == len(draft) and n > 0:  # stops before the last draft
            n -= 1
        out = list(draft[:n])
        if n == len(draft) and no_bonus:
            return out or [target_argmax[0]]
        if emit_draft and n < len(draft):  # the wrong draft instead of the target's token
            return out + [draft[n]]
        return out + [target_argmax[n if bonus_index is None else bonus_index(n)]]
    return accept_greedy


ACCEPT_MUTANTS = {
    "no bonus token after k accepted drafts": make_accept(no_bonus=True),
    "the token after the accepted drafts from the wrong row": make_accept(
        bonus_index=lambda n: max(n - 1, 0)),
    "the rejected draft emitted instead of the target's token": make_accept(emit_draft=True),
    "drafts after the first disagreement still accepted": make_accept(skip_mismatch=True),
    "an off-by-one that drops the last accepted draft": make_accept(one_short=True),
}

# --- rejection_sample ---------------------------------------------------------------------------


def _inverse_cdf(weights, generator, normalise=True):
    w = weights / weights.sum() if normalise else weights
    u = torch.rand((), dtype=torch.float64, generator=generator)
    return min(int((w.cumsum(-1) <= u).sum()), len(w) - 1)


def make_rejection(accept="ratio", residual="p-q", normalise=True, bonus="target",
                   go_on=False):
    def rejection_sample(draft, draft_probs, target_probs, generator=None):
        p, q = target_probs.double(), draft_probs.double()
        k = len(draft)
        out = []
        for i, d in enumerate(draft):
            u = torch.rand((), dtype=torch.float64, generator=generator)
            if accept == "ratio":
                ok = bool(u < p[i, d] / q[i, d])  # min(1, p/q): u < 1 anyway
            elif accept == "all":
                ok = True
            elif accept == "p>=q":
                ok = bool(p[i, d] >= q[i, d])
            elif accept == "q/p":
                ok = bool(u < q[i, d] / p[i, d]) if p[i, d] > 0 else False
            else:  # "p": accept with the target's probability of the draft alone
                ok = bool(u < p[i, d])
            if ok:
                out.append(int(d))
                continue
            if residual == "p-q":
                r = (p[i] - q[i]).clamp_min(0)
            elif residual == "q-p":
                r = (q[i] - p[i]).clamp_min(0)
            elif residual == "p":
                r = p[i]
            else:  # "q"
                r = q[i]
            if r.sum() == 0:
                r = p[i]
            out.append(_inverse_cdf(r, generator, normalise))
            if not go_on:
                return out
        if len(out) > k:
            return out[:k + 1]
        row = {"target": p[k], "draft": q[k - 1], "last": p[k - 1]}[bonus]
        out.append(_inverse_cdf(row, generator))
        return out
    return rejection_sample


def rejection_with_global_rng(draft, draft_probs, target_probs, generator=None):
    """Right rule, but its random numbers ignore the generator it is given."""
    return make_rejection()(draft, draft_probs, target_probs, None)


REJECTION_MUTANTS = {
    "every draft accepted": make_rejection(accept="all"),
    "accept when p >= q, without a random draw": make_rejection(accept="p>=q"),
    "accept with probability q/p": make_rejection(accept="q/p"),
    "accept with probability p(d), ignoring q": make_rejection(accept="p"),
    "the correction drawn from p, not the residual": make_rejection(residual="p"),
    "the correction drawn from the drafter": make_rejection(residual="q"),
    "the residual the wrong way round, max(0, q - p)": make_rejection(residual="q-p"),
    "the residual not normalised": make_rejection(normalise=False),
    "the bonus token drawn from the drafter": make_rejection(bonus="draft"),
    "the bonus token drawn from the target's row k - 1": make_rejection(bonus="last"),
    "drafts after a rejection still considered": make_rejection(go_on=True),
    "random numbers not from the generator": rejection_with_global_rng,
}

# --- speculative_step ----------------------------------------------------------------------------

accept_greedy = make_accept()
rejection_sample = make_rejection()


def make_step(truncate="right", greedy_drafts=False, draft_temperature=True,
              target_rows="right", target_temperature=True, verifier="own"):
    def speculative_step(target, draft, tokens, k, temperature=0.0, generator=None):
        tokens = list(tokens)
        drafts, rows = [], []
        feed = tokens[draft.num_cached:]
        for _ in range(k):
            logits = draft.extend(feed)[-1]
            q = probabilities(logits[None], temperature)[0]
            if temperature == 0 or greedy_drafts:
                d = int(q.argmax())
            else:  # drawn from q, or (a mutant) from another distribution than the q passed on
                drawn = q if draft_temperature else probabilities(logits[None], 1.0)[0]
                d = int(torch.multinomial(drawn, 1, generator=generator))
            drafts.append(d)
            rows.append(q)
            feed = [d]
        missing = tokens[target.num_cached:]
        if target_rows == "drafts only":  # forgets to feed the uncached context
            logits = target.extend(drafts)
            target.tokens[-len(drafts):] = drafts
        else:
            logits = torch.cat([target.extend(missing), target.extend(drafts)])
        rows_p = logits[-(k + 1):] if target_rows != "shifted" else logits[-(k + 2):-1]
        if target_rows == "drafts only":
            rows_p = torch.cat([logits[:1], logits])[-(k + 1):]
        p = probabilities(rows_p, temperature if target_temperature or temperature == 0
                          else 1.0)
        if verifier == "package":
            new = (package.accept_greedy(drafts, p.argmax(-1).tolist()) if temperature == 0
                   else package.rejection_sample(drafts, torch.stack(rows), p, generator))
        elif temperature == 0:
            new = accept_greedy(drafts, p.argmax(-1).tolist())
        else:
            new = rejection_sample(drafts, torch.stack(rows), p, generator)
        keep = len(tokens) + len(new) - 1
        if truncate == "right":
            target.truncate(keep)
            draft.truncate(min(draft.num_cached, keep))
        elif truncate == "target only":
            target.truncate(keep)
        elif truncate == "one more":  # keeps the last emitted token's slot too
            target.truncate(min(target.num_cached, keep + 1))
            draft.truncate(min(draft.num_cached, keep))
        elif truncate == "tokens only":  # forgets the list, not the pages
            del target.tokens[keep:]
            del draft.tokens[min(draft.num_cached, keep):]
        elif truncate == "draft to zero":  # recomputes the whole context every step
            target.truncate(keep)
            draft.truncate(0)
        return new
    return speculative_step


def package_step(target, draft, tokens, k, temperature=0.0, generator=None):
    """The package's own step: right, but not the learner's verifiers."""
    return package.speculative_step(target, draft, tokens, k, temperature, generator)


STEP_MUTANTS = {
    "rejected drafts' K/V kept (no truncation)": make_step(truncate="none"),
    "the drafter's cache never rolled back": make_step(truncate="target only"),
    "one token too many kept in the target's cache": make_step(truncate="one more"),
    "tokens forgotten but their pages kept": make_step(truncate="tokens only"),
    "the drafter's cache emptied every step": make_step(truncate="draft to zero"),
    "drafts taken by argmax while q is the sampled distribution": make_step(greedy_drafts=True),
    "drafts drawn at temperature 1, q passed on at the given temperature":
        make_step(draft_temperature=False),
    "the target's rows shifted by one": make_step(target_rows="shifted"),
    "the target fed the drafts without the uncached context": make_step(target_rows="drafts only"),
    "the target at temperature 1": make_step(target_temperature=False),
    "the package's verifiers instead of the learner's": make_step(verifier="package"),
    "the package's speculative_step": package_step,
}

# --- the tests -----------------------------------------------------------------------------------


def _passes(name, fn) -> bool:
    return check(name, fn).passed


def test_solutions_pass():
    assert _passes("ch13.accept_greedy", accept_greedy)
    assert _passes("ch13.rejection_sample", rejection_sample)
    assert _passes("ch13.speculative_step", make_step())


def test_the_package_verifiers_pass():
    assert _passes("ch13.accept_greedy", package.accept_greedy)
    assert _passes("ch13.rejection_sample", package.rejection_sample)


@pytest.mark.parametrize("name", list(ACCEPT_MUTANTS))
def test_accept_mutants_fail(name):
    assert not _passes("ch13.accept_greedy", ACCEPT_MUTANTS[name]), name


@pytest.mark.parametrize("name", list(REJECTION_MUTANTS))
def test_rejection_mutants_fail(name):
    assert not _passes("ch13.rejection_sample", REJECTION_MUTANTS[name]), name


@pytest.mark.parametrize("name", list(STEP_MUTANTS))
def test_step_mutants_fail(name):
    assert not _passes("ch13.speculative_step", STEP_MUTANTS[name]), name


def test_the_statistical_test_has_the_stated_false_alarm_rate():
    """chi_square's p-value is uniform under the null: about 1% of exact samples fall below
    0.01, and a biased sample far below 1e-4."""
    from minimodel.grading.ch13.common import chi_square

    g = torch.Generator().manual_seed(0)
    p = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    low = sum(chi_square(torch.bincount(torch.multinomial(p, 2000, True, generator=g),
                                        minlength=4), p)[0] < 0.01 for _ in range(400))
    assert low <= 12
    biased = torch.tensor([0.15, 0.2, 0.3, 0.35], dtype=torch.float64)
    counts = torch.bincount(torch.multinomial(biased, 4000, True, generator=g), minlength=4)
    assert chi_square(counts, p)[0] < 1e-4
