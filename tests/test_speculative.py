"""Speculative decoding's pure pieces (engine/speculative.py): the n-gram drafter, greedy
verification, and modified rejection sampling, whose first emitted token must follow the
target's distribution whatever the drafter proposes (a chi-square test at a false-alarm rate
of 1e-4, on a fixed seed), while an acceptance rule that trusts the drafter fails that test."""

from __future__ import annotations

import pytest
import torch

from minimodel.engine.speculative import (
    accept_greedy,
    expected_tokens_per_step,
    ngram_propose,
    rejection_sample,
)

V = 5
TRIALS = 20000
CHI2_DF4_1E4 = 23.51  # the chi-square quantile for 4 degrees of freedom at 1 - 1e-4


def test_ngram_proposes_what_followed_the_earliest_match():
    assert ngram_propose([1, 2, 3, 9, 1, 2, 3], k=2) == [9, 1]  # the 3-gram [1 2 3] recurs
    assert ngram_propose([5, 1, 2, 7, 1, 2], k=3) == [7, 1, 2]
    assert ngram_propose([1, 2, 1, 3, 1], k=2) == [2, 1], "the earliest occurrence of [1]"
    assert ngram_propose([4, 4, 4, 4], k=3) == [4], "the longest suffix [4 4 4] first"
    assert ngram_propose([4, 4, 4, 4, 4, 4], k=3) == [4, 4, 4], "a loop proposes itself"
    assert ngram_propose([1, 2, 1, 2, 1, 2], k=4, max_n=2) == [1, 2, 1, 2]
    assert ngram_propose([1, 2, 3], k=2) == [], "no suffix recurs"
    assert ngram_propose([7], k=2) == []
    assert ngram_propose([1, 2, 3, 1, 2, 3], k=2, max_n=1) == [1, 2]
    with pytest.raises(ValueError, match="k >= 1"):
        ngram_propose([1, 2], k=0)


def test_greedy_verification_keeps_the_agreeing_prefix_and_adds_one():
    assert accept_greedy([5, 6, 7], [5, 6, 7, 8]) == [5, 6, 7, 8], "all right: a bonus token"
    assert accept_greedy([5, 6, 7], [1, 6, 7, 8]) == [1], "wrong at once: the target's token"
    assert accept_greedy([5, 6, 7], [5, 9, 7, 8]) == [5, 9]
    assert accept_greedy([], [3]) == [3]
    with pytest.raises(ValueError, match="len\\(draft\\) \\+ 1"):
        accept_greedy([1, 2], [1, 2])


def _first_token_counts(k: int, seed: int,
                        rule=rejection_sample) -> tuple[torch.Tensor, torch.Tensor]:
    """Counts of the first emitted token over TRIALS steps, drafts drawn from the drafter's q,
    and the target's first distribution."""
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(k + 1, V, generator=g) * 1.5, -1)
    q = torch.softmax(torch.randn(k, V, generator=g) * 1.5, -1)
    counts = torch.zeros(V)
    for _ in range(TRIALS):
        draft = [int(torch.multinomial(q[i], 1, generator=g)) for i in range(k)]
        counts[rule(draft, q, p, g)[0]] += 1
    return counts, p[0]


def _chi2(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs.double() * counts.sum()
    return float(((counts.double() - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("k", [1, 2, 4])
def test_the_first_token_follows_the_target_distribution(k):
    counts, p = _first_token_counts(k, seed=k)
    assert _chi2(counts, p) < CHI2_DF4_1E4


def _trusting(draft, q, p, g):
    """A biased rule: accept every draft (the drafter's distribution comes out)."""
    return [*draft, int(torch.multinomial(p[len(draft)], 1, generator=g))]


def _bonus_from_draft(draft, q, p, g):
    """A biased rule: the corrected token drawn from the drafter, not the residual."""
    for i, d in enumerate(draft):
        if torch.rand((), dtype=torch.float64, generator=g) * q[i, d] <= p[i, d]:
            continue
        return [*draft[:i], int(torch.multinomial(q[i], 1, generator=g))]
    return [*draft, int(torch.multinomial(p[len(draft)], 1, generator=g))]


@pytest.mark.parametrize("rule", [_trusting, _bonus_from_draft])
def test_a_biased_acceptance_rule_fails_the_same_test(rule):
    counts, p = _first_token_counts(1, seed=1, rule=rule)
    assert _chi2(counts, p) > CHI2_DF4_1E4


def test_exact_cases():
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    one_hot = torch.eye(3)
    # a drafter that proposes the target's only possible tokens: all accepted, then the bonus
    assert rejection_sample([1, 2], one_hot[[1, 2]], p, g) == [1, 2, 0]
    # a drafter that is always wrong: its token has target probability 0, so the residual
    # (the target's whole distribution) gives the target's token at once
    assert rejection_sample([0, 0], one_hot[[0, 0]], p, g) == [1]
    with pytest.raises(ValueError, match="k \\+ 1"):
        rejection_sample([0], one_hot[[0]], p, g)


def test_expected_tokens_per_step():
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert expected_tokens_per_step(1.0, 4) == 5.0
    assert expected_tokens_per_step(0.5, 2) == pytest.approx(1.75)
