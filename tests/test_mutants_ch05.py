"""Chapter 05's checks: every wrong implementation learners write fails, every right one passes."""

from __future__ import annotations

import functools

import pytest
import torch

from minimodel.grading import check
from minimodel.sampling import Sampler, SamplingParams

NEG_INF = float("-inf")


@functools.cache
def result(name, fn):
    """check(name, fn), run once per function: the mutant and hint tests share it."""
    return check(name, fn)

# --- ch05.top_k_filter ---------------------------------------------------------------------


def top_k_solution(logits, k):
    if k == 0:
        return logits
    kth = logits.sort(dim=-1, descending=True).values[:, k - 1 : k]  # [B, 1]
    return logits.masked_fill(logits < kth, NEG_INF)


def top_k_topk_values(logits, k):
    if k <= 0:
        return logits.clone()
    kth = torch.topk(logits, k, dim=-1).values[..., -1, None]
    return torch.where(logits < kth, torch.full_like(logits, NEG_INF), logits)


def top_k_kthvalue(logits, k):
    V = logits.shape[-1]
    if k == 0 or k >= V:
        return logits
    kth = torch.kthvalue(logits.float(), V - k + 1, dim=-1, keepdim=True).values
    return logits.masked_fill(logits.float() < kth, NEG_INF)


def top_k_in_place(logits, k):
    if k:
        kth = logits.topk(k).values[:, -1:]
        logits[logits < kth] = NEG_INF
    return logits


def top_k_loop(logits, k):
    out = logits.clone()
    if k == 0:
        return out
    for row in out:
        threshold = sorted(row.tolist(), reverse=True)[k - 1]
        row[row < threshold] = NEG_INF
    return out


CORRECT_TOP_K = [top_k_solution, top_k_topk_values, top_k_kthvalue, top_k_in_place, top_k_loop]


def top_k_strictly_greater(logits, k):  # drops the k-th itself, and its ties
    if k == 0:
        return logits
    kth = logits.sort(dim=-1, descending=True).values[:, k - 1 : k]
    return logits.masked_fill(logits <= kth, NEG_INF)


def top_k_scatter_indices(logits, k):  # exactly k tokens: ties are dropped
    if k == 0:
        return logits
    idx = logits.topk(k, dim=-1).indices
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, idx, True)
    return logits.masked_fill(~keep, NEG_INF)


def top_k_kth_smallest(logits, k):  # kthvalue counts from the smallest
    if k == 0:
        return logits
    kth = torch.kthvalue(logits.float(), k, dim=-1, keepdim=True).values
    return logits.masked_fill(logits.float() < kth, NEG_INF)


def top_k_off_by_one(logits, k):  # 1-based k: keeps k+1 tokens
    if k == 0:
        return logits
    sorted_desc = logits.sort(dim=-1, descending=True).values
    kth = sorted_desc[:, min(k, logits.shape[-1] - 1)][:, None]
    return logits.masked_fill(logits < kth, NEG_INF)


def top_k_no_zero_case(logits, k):  # topk(0) has no k-th value
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, NEG_INF)


def top_k_batch_axis(logits, k):  # sorts down the batch instead of along the vocabulary
    if k == 0:
        return logits
    kth = logits.sort(dim=0, descending=True).values[min(k, logits.shape[0]) - 1]
    return logits.masked_fill(logits < kth, NEG_INF)


def top_k_whole_batch(logits, k):  # one threshold for every row
    if k == 0:
        return logits
    kth = logits.flatten().sort(descending=True).values[k - 1]
    return logits.masked_fill(logits < kth, NEG_INF)


def top_k_probabilities(logits, k):  # returns renormalised probabilities
    return top_k_solution(logits, k).softmax(-1)


def top_k_zero_fill(logits, k):  # 0 is not "removed": it is a perfectly likely logit
    if k == 0:
        return logits
    kth = logits.sort(dim=-1, descending=True).values[:, k - 1 : k]
    return logits.masked_fill(logits < kth, 0.0)


def top_k_big_negative(logits, k):  # -1e4 still leaves the token some probability
    if k == 0:
        return logits
    kth = logits.sort(dim=-1, descending=True).values[:, k - 1 : k]
    return logits.masked_fill(logits < kth, -1e4)


def top_k_float32(logits, k):  # computes in float32 and forgets the input dtype
    return top_k_solution(logits.float(), k)


def top_k_ascending(logits, k):  # forgot descending=True
    if k == 0:
        return logits
    kth = logits.sort(dim=-1).values[:, k - 1 : k]
    return logits.masked_fill(logits < kth, NEG_INF)


WRONG_TOP_K = [
    top_k_strictly_greater, top_k_scatter_indices, top_k_kth_smallest, top_k_off_by_one,
    top_k_no_zero_case, top_k_batch_axis, top_k_whole_batch, top_k_probabilities,
    top_k_zero_fill, top_k_big_negative, top_k_float32, top_k_ascending,
]


@pytest.mark.parametrize("fn", CORRECT_TOP_K, ids=lambda f: f.__name__)
def test_top_k_correct_passes(fn):
    result = check("ch05.top_k_filter", fn)
    assert result.passed, str(result)


@pytest.mark.parametrize("fn", WRONG_TOP_K, ids=lambda f: f.__name__)
def test_top_k_mutant_fails(fn):
    assert not result("ch05.top_k_filter", fn).passed


def test_top_k_hints():
    assert "tied" in str(result("ch05.top_k_filter", top_k_scatter_indices))
    assert "k-th smallest" in str(result("ch05.top_k_filter", top_k_kth_smallest))
    assert "-inf" in str(result("ch05.top_k_filter", top_k_big_negative))


# --- ch05.top_p_filter ---------------------------------------------------------------------


def top_p_solution(logits, p):
    if p >= 1.0:
        return logits
    sorted_logits = logits.sort(dim=-1, descending=True).values
    mass = sorted_logits.float().softmax(dim=-1).cumsum(dim=-1)
    crossing = (mass < p).sum(dim=-1, keepdim=True).clamp(max=logits.shape[-1] - 1)
    return logits.masked_fill(logits < sorted_logits.gather(-1, crossing), NEG_INF)


def top_p_probability_space(logits, p):  # compares probabilities, not logits
    if p >= 1.0:
        return logits
    probs = logits.float().softmax(-1)
    sorted_probs = probs.sort(-1, descending=True).values
    before = sorted_probs.cumsum(-1) - sorted_probs
    n = (before < p).sum(-1, keepdim=True)  # tokens of the smallest prefix
    return logits.masked_fill(probs < sorted_probs.gather(-1, n - 1), NEG_INF)


def top_p_ascending_hf_style(logits, p):  # the transformers way, then the ties put back
    if p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=False)
    cum = sorted_logits.float().softmax(dim=-1).cumsum(dim=-1)
    remove = cum <= 1 - p
    remove[..., -1] = False
    lowest_kept = sorted_logits.masked_fill(remove, float("inf")).min(-1, keepdim=True).values
    return logits.masked_fill(logits < lowest_kept, NEG_INF)


def top_p_loop(logits, p):
    out = logits.clone()
    if p >= 1.0:
        return out
    for b in range(logits.shape[0]):
        probs = logits[b].double().softmax(-1)
        total = 0.0
        for q in probs.sort(descending=True).values.tolist():
            total += q
            if total >= p:
                break
        out[b][probs < q] = NEG_INF  # q: the crossing token's probability
    return out


def top_p_prefix_then_ties(logits, p):  # the package's prefix, widened to its last value
    if p == 1.0:
        return logits
    sorted_logits, order = logits.sort(-1, descending=True)
    probs = sorted_logits.double().softmax(-1)
    keep_sorted = (probs.cumsum(-1) - probs) < p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    last = logits.masked_fill(~keep, float("inf")).min(-1, keepdim=True).values
    return logits.masked_fill(logits < last, NEG_INF)


CORRECT_TOP_P = [top_p_solution, top_p_probability_space, top_p_ascending_hf_style, top_p_loop,
                 top_p_prefix_then_ties]


def top_p_package_rule(logits, p):  # the smallest prefix: a tie at the boundary is cut by sort
    if p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.float().softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # mass of the more likely tokens
    drop = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before >= p)
    return logits.masked_fill(drop, NEG_INF)


def top_p_strictly_above_crossing(logits, p):  # drops the crossing token and its ties
    if p >= 1.0:
        return logits
    sorted_logits = logits.sort(dim=-1, descending=True).values
    mass = sorted_logits.float().softmax(dim=-1).cumsum(dim=-1)
    crossing = (mass < p).sum(dim=-1, keepdim=True).clamp(max=logits.shape[-1] - 1)
    keep = (logits > sorted_logits.gather(-1, crossing)) | (logits == sorted_logits[:, :1])
    return logits.masked_fill(~keep, NEG_INF)


def top_p_one_value_too_far(logits, p):  # threshold at the token after the crossing one
    if p >= 1.0:
        return logits
    sorted_logits = logits.sort(dim=-1, descending=True).values
    mass = sorted_logits.float().softmax(dim=-1).cumsum(dim=-1)
    after = (mass < p).sum(dim=-1, keepdim=True).add(1).clamp(max=logits.shape[-1] - 1)
    return logits.masked_fill(logits < sorted_logits.gather(-1, after), NEG_INF)


def top_p_no_special_case_for_one(logits, p):  # float32 sums reach 1.0 early
    sorted_logits = logits.sort(dim=-1, descending=True).values
    mass = sorted_logits.float().softmax(dim=-1).cumsum(dim=-1)
    crossing = (mass < p).sum(dim=-1, keepdim=True).clamp(max=logits.shape[-1] - 1)
    return logits.masked_fill(logits < sorted_logits.gather(-1, crossing), NEG_INF)


def top_p_excludes_crossing(logits, p):  # keeps only the tokens whose running sum <= p
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    cum = sorted_logits.float().softmax(-1).cumsum(-1)
    drop = cum > p
    drop[:, 0] = False
    return logits.masked_fill(drop.scatter(-1, order, drop), NEG_INF)


def top_p_excludes_crossing_unguarded(logits, p):  # ... and may keep nothing at all
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    cum = sorted_logits.float().softmax(-1).cumsum(-1)
    drop = cum > p
    return logits.masked_fill(drop.scatter(-1, order, drop), NEG_INF)


def top_p_on_logits(logits, p):  # running sums of logits, not of probabilities
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    before = sorted_logits.cumsum(-1) - sorted_logits
    drop = before >= p
    drop[:, 0] = False
    return logits.masked_fill(drop.scatter(-1, order, drop), NEG_INF)


def top_p_normalised_logits(logits, p):  # logits / their sum are not probabilities
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    fake = sorted_logits / sorted_logits.sum(-1, keepdim=True)
    drop = (fake.cumsum(-1) - fake) >= p
    drop[:, 0] = False
    return logits.masked_fill(drop.scatter(-1, order, drop), NEG_INF)


def top_p_batch_softmax(logits, p):  # softmax over the batch axis
    if p >= 1.0:
        return logits
    probs = logits.float().softmax(dim=0)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    drop = (sorted_probs.cumsum(-1) - sorted_probs) >= p
    drop[:, 0] = False
    return logits.masked_fill(drop.scatter(-1, order, drop), NEG_INF)


def top_p_forgets_to_unsort(logits, p):  # the mask is in sorted order, applied unsorted
    sorted_logits, _ = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.float().softmax(-1)
    drop = (probs.cumsum(-1) - probs) >= p
    drop[:, 0] = False
    return logits.masked_fill(drop, NEG_INF)


def top_p_returns_sorted(logits, p):  # filters correctly but returns the sorted logits
    sorted_logits, _ = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.float().softmax(-1)
    drop = (probs.cumsum(-1) - probs) >= p
    drop[:, 0] = False
    return sorted_logits.masked_fill(drop, NEG_INF)


def top_p_ascending_keeps_tail(logits, p):  # forgot descending=True: keeps the unlikely ones
    sorted_logits, order = logits.sort(dim=-1)
    probs = sorted_logits.float().softmax(-1)
    drop = (probs.cumsum(-1) - probs) >= p
    drop[:, 0] = False
    return logits.masked_fill(drop.scatter(-1, order, drop), NEG_INF)


def top_p_threshold_each(logits, p):  # keeps tokens whose own probability is >= 1 - p
    probs = logits.float().softmax(-1)
    keep = (probs >= 1 - p) | (probs == probs.max(-1, keepdim=True).values)
    return logits.masked_fill(~keep, NEG_INF)


def top_p_one_minus_p(logits, p):  # mixes up p and 1 - p
    return top_p_solution(logits, 1.0 - p if p < 1.0 else 1.0)


def top_p_probabilities(logits, p):  # returns the renormalised probabilities
    return top_p_solution(logits, p).float().softmax(-1).to(logits.dtype)


WRONG_TOP_P = [
    top_p_package_rule, top_p_strictly_above_crossing, top_p_one_value_too_far,
    top_p_no_special_case_for_one, top_p_excludes_crossing, top_p_excludes_crossing_unguarded,
    top_p_on_logits, top_p_normalised_logits, top_p_batch_softmax, top_p_forgets_to_unsort,
    top_p_returns_sorted,
    top_p_ascending_keeps_tail, top_p_threshold_each, top_p_one_minus_p, top_p_probabilities,
]


@pytest.mark.parametrize("fn", CORRECT_TOP_P, ids=lambda f: f.__name__)
def test_top_p_correct_passes(fn):
    result = check("ch05.top_p_filter", fn)
    assert result.passed, str(result)


@pytest.mark.parametrize("fn", WRONG_TOP_P, ids=lambda f: f.__name__)
def test_top_p_mutant_fails(fn):
    assert not result("ch05.top_p_filter", fn).passed


def test_top_p_hints():
    assert "crosses p" in str(result("ch05.top_p_filter", top_p_excludes_crossing))
    assert "always stays" in str(result("ch05.top_p_filter", top_p_excludes_crossing_unguarded))
    assert "as likely as the crossing token" in str(result("ch05.top_p_filter",
                                                           top_p_package_rule))
    assert "long before the tail" in str(result("ch05.top_p_filter",
                                                top_p_no_special_case_for_one))


# --- ch05.sample ---------------------------------------------------------------------------


def sample_solution(logits, temperature, top_k, top_p, generator):
    if temperature == 0:
        return logits.argmax(dim=-1)
    scaled = logits.float() / temperature
    scaled = top_p_solution(top_k_solution(scaled, top_k), top_p)
    return torch.multinomial(scaled.softmax(-1), 1, generator=generator)[:, 0]


def sample_gumbel_max(logits, temperature, top_k, top_p, generator):
    if temperature == 0:
        return logits.argmax(dim=-1)
    scaled = top_p_prefix_then_ties(top_k_topk_values(logits.double() / temperature, top_k), top_p)
    u = torch.rand(scaled.shape, generator=generator, dtype=torch.float64).clamp_min(1e-300)
    return (scaled - torch.log(-torch.log(u))).argmax(-1)


def sample_inverse_cdf(logits, temperature, top_k, top_p, generator):
    if temperature == 0:
        return logits.argmax(-1).long()
    filtered = top_p_ascending_hf_style(top_k_loop(logits.float() / temperature, top_k), top_p)
    cdf = filtered.softmax(-1).cumsum(-1)  # [B, V]
    u = torch.rand(logits.shape[0], 1, generator=generator) * cdf[:, -1:]
    return torch.searchsorted(cdf, u)[:, 0].clamp(max=logits.shape[-1] - 1)


def sample_top_k_then_temperature(logits, temperature, top_k, top_p, generator):
    # top-k before temperature is fine: dividing by T > 0 keeps the order of the logits
    if temperature == 0:
        return logits.argmax(-1)
    scaled = top_k_solution(logits.float(), top_k) / temperature
    return torch.multinomial(top_p_solution(scaled, top_p).softmax(-1), 1, generator=generator
                             ).squeeze(1)


def sample_package_sampler(logits, temperature, top_k, top_p, generator):
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    B = logits.shape[0]
    tokens, _ = Sampler(logits.device)(logits, [params] * B, [generator] * B)
    return tokens


CORRECT_SAMPLE = [sample_solution, sample_gumbel_max, sample_inverse_cdf,
                  sample_top_k_then_temperature, sample_package_sampler]


def sample_argmax_always(logits, temperature, top_k, top_p, generator):
    return logits.argmax(-1)


def sample_global_rng(logits, temperature, top_k, top_p, generator):
    if temperature == 0:
        return logits.argmax(-1)
    scaled = top_p_solution(top_k_solution(logits.float() / temperature, top_k), top_p)
    return torch.multinomial(scaled.softmax(-1), 1)[:, 0]


def sample_reseeds(logits, temperature, top_k, top_p, generator):  # a fixed seed of its own
    if temperature == 0:
        return logits.argmax(-1)
    scaled = top_p_solution(top_k_solution(logits.float() / temperature, top_k), top_p)
    return torch.multinomial(scaled.softmax(-1), 1, generator=torch.Generator().manual_seed(0)
                             )[:, 0]


def sample_batch_softmax(logits, temperature, top_k, top_p, generator):
    if temperature == 0:
        return logits.argmax(-1)
    scaled = top_p_solution(top_k_solution(logits.float() / temperature, top_k), top_p)
    return torch.multinomial(scaled.softmax(dim=0), 1, generator=generator)[:, 0]


def sample_temperature_after_top_p(logits, temperature, top_k, top_p, generator):
    if temperature == 0:
        return logits.argmax(-1)
    filtered = top_p_solution(top_k_solution(logits.float(), top_k), top_p)
    return torch.multinomial((filtered / temperature).softmax(-1), 1, generator=generator)[:, 0]


def sample_top_p_before_top_k(logits, temperature, top_k, top_p, generator):
    if temperature == 0:
        return logits.argmax(-1)
    scaled = top_k_solution(top_p_solution(logits.float() / temperature, top_p), top_k)
    return torch.multinomial(scaled.softmax(-1), 1, generator=generator)[:, 0]


def sample_times_temperature(logits, temperature, top_k, top_p, generator):
    if temperature == 0:
        return logits.argmax(-1)
    scaled = top_p_solution(top_k_solution(logits.float() * temperature, top_k), top_p)
    return torch.multinomial(scaled.softmax(-1), 1, generator=generator)[:, 0]


def sample_no_greedy_case(logits, temperature, top_k, top_p, generator):  # divides by zero
    scaled = top_p_solution(top_k_solution(logits.float() / temperature, top_k), top_p)
    return torch.multinomial(scaled.softmax(-1), 1, generator=generator)[:, 0]


def sample_ignores_top_k(logits, temperature, top_k, top_p, generator):
    return sample_solution(logits, temperature, 0, top_p, generator)


def sample_ignores_top_p(logits, temperature, top_k, top_p, generator):
    return sample_solution(logits, temperature, top_k, 1.0, generator)


def sample_keeps_dim(logits, temperature, top_k, top_p, generator):  # [B, 1]
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    scaled = top_p_solution(top_k_solution(logits.float() / temperature, top_k), top_p)
    return torch.multinomial(scaled.softmax(-1), 1, generator=generator)


def sample_first_row_for_all(logits, temperature, top_k, top_p, generator):
    if temperature == 0:
        return logits.argmax(-1)
    scaled = top_p_solution(top_k_solution(logits.float() / temperature, top_k), top_p)
    return torch.multinomial(scaled[0].softmax(-1), logits.shape[0], replacement=True,
                             generator=generator)


def sample_unfiltered_draw(logits, temperature, top_k, top_p, generator):  # filters, then
    if temperature == 0:  # draws from the unfiltered softmax by mistake
        return logits.argmax(-1)
    scaled = logits.float() / temperature
    top_p_solution(top_k_solution(scaled, top_k), top_p)
    return torch.multinomial(scaled.softmax(-1), 1, generator=generator)[:, 0]


def sample_squeeze_all(logits, temperature, top_k, top_p, generator):  # B=1 -> a 0-d tensor
    if temperature == 0:
        return logits.argmax(-1)
    scaled = top_p_solution(top_k_solution(logits.float() / temperature, top_k), top_p)
    return torch.multinomial(scaled.softmax(-1), 1, generator=generator).squeeze()


def sample_int32(logits, temperature, top_k, top_p, generator):
    return sample_solution(logits, temperature, top_k, top_p, generator).int()


WRONG_SAMPLE = [
    sample_argmax_always, sample_global_rng, sample_reseeds, sample_batch_softmax,
    sample_temperature_after_top_p, sample_top_p_before_top_k, sample_times_temperature,
    sample_no_greedy_case, sample_ignores_top_k, sample_ignores_top_p, sample_keeps_dim,
    sample_first_row_for_all, sample_unfiltered_draw, sample_squeeze_all, sample_int32,
]


@pytest.mark.parametrize("fn", CORRECT_SAMPLE, ids=lambda f: f.__name__)
def test_sample_correct_passes(fn):
    result = check("ch05.sample", fn)
    assert result.passed, str(result)


@pytest.mark.parametrize("fn", WRONG_SAMPLE, ids=lambda f: f.__name__)
def test_sample_mutant_fails(fn):
    assert not result("ch05.sample", fn).passed


def test_sample_hints():
    assert "generator" in str(result("ch05.sample", sample_global_rng))
    assert "greedy" in str(result("ch05.sample", sample_no_greedy_case))
    assert "squeeze" in str(result("ch05.sample", sample_squeeze_all))
