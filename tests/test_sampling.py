"""The sampler: truncation sets, greedy limits, frequencies, seeds, log-probabilities."""

from __future__ import annotations

import pytest
import torch

from minimodel.sampling import ARGMAX_CHUNK, Sampler, SamplingParams, argmax


def draws(logits: torch.Tensor, params: SamplingParams, n: int, seed: int = 0) -> torch.Tensor:
    """n draws for one row of logits [V] from a seeded generator -> Long [n]."""
    sampler = Sampler()
    gen = sampler.make_generator(seed)
    batch = logits[None].expand(n, -1)  # n identical rows, drawn one generator after another
    gens = [gen] * n
    return sampler(batch, [params] * n, gens)[0]


LOGITS = torch.tensor([2.0, 1.5, 1.2, 0.3, 0.0, -0.5, -1.0, -3.0])


def test_top_k_never_leaves_the_k_best():
    tokens = draws(LOGITS, SamplingParams(temperature=1.5, top_k=3), 4000)
    assert set(tokens.tolist()) == {0, 1, 2}  # all three are drawn, nothing else


def test_top_p_never_leaves_the_nucleus():
    probs = torch.softmax(LOGITS / 1.2, 0)  # descending already
    p = 0.8
    # smallest prefix whose mass reaches p: tokens 0..k-1
    k = int((torch.cumsum(probs, 0) < p).sum()) + 1
    tokens = draws(LOGITS, SamplingParams(temperature=1.2, top_p=p), 4000)
    assert set(tokens.tolist()) == set(range(k))
    assert k < len(LOGITS)


def test_low_temperature_equals_greedy():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 1000, generator=g) * 3
    sampler = Sampler()
    greedy, _ = sampler(logits, [SamplingParams(temperature=0.0)] * 64)
    cold, _ = sampler(logits, [SamplingParams(temperature=1e-4, seed=i) for i in range(64)],
                      [sampler.make_generator(i) for i in range(64)])
    assert torch.equal(greedy, logits.argmax(-1)) and torch.equal(cold, greedy)


# chi-square critical values at p = 0.001 (upper tail), by degrees of freedom
CHI2_CRITICAL_0_001 = {5: 20.515, 7: 24.322}


def chi_square(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    counts = torch.bincount(tokens, minlength=len(probs)).double()
    expected = probs.double() * len(tokens)
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.6])
def test_frequencies_match_softmax(temperature):
    logits = LOGITS[:6]
    tokens = draws(logits, SamplingParams(temperature=temperature), 6000, seed=123)
    stat = chi_square(tokens, torch.softmax(logits / temperature, 0))
    assert stat < CHI2_CRITICAL_0_001[5], f"chi2 {stat:.1f}"
    # the same test rejects the distribution of another temperature: it has power
    wrong = chi_square(tokens, torch.softmax(logits / (temperature * 1.5), 0))
    assert wrong > CHI2_CRITICAL_0_001[5]


def test_seeded_rows_ignore_the_rest_of_the_batch():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(5, 300, generator=g)
    sampler = Sampler()
    sp = [SamplingParams(temperature=1.0, top_k=50, seed=7)] + [SamplingParams()] * 4
    alone = [sampler(logits[:1], sp[:1], [sampler.make_generator(7)])[0].item()
             for _ in range(3)]
    batched = [sampler(logits, sp, [sampler.make_generator(7)] + [None] * 4)[0][0].item()
               for _ in range(3)]
    assert alone == batched


def test_logprobs_are_the_models_log_softmax():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(3, 50, generator=g)
    sampler = Sampler()
    sp = [SamplingParams(temperature=0.0), SamplingParams(temperature=0.5, top_k=3, seed=1),
          SamplingParams(temperature=2.0, top_p=0.5, seed=2)]
    tokens, logprobs = sampler(logits, sp, [None, sampler.make_generator(1),
                                            sampler.make_generator(2)])
    want = logits.log_softmax(-1)[torch.arange(3), tokens]
    assert torch.allclose(logprobs, want, atol=1e-6)


@pytest.mark.parametrize("field,value", [
    ("temperature", -0.1), ("top_k", -2), ("top_k", 1.5), ("top_p", 0.0), ("top_p", 1.5),
    ("max_tokens", -1), ("seed", 2**63), ("seed", -(2**63) - 1), ("stop", [""]),
    ("min_tokens", -1), ("min_tokens", 17), ("min_p", 1.5), ("min_p", -0.1),
    ("repetition_penalty", 0.0), ("repetition_penalty", float("inf")),
    ("presence_penalty", 2.5), ("frequency_penalty", -2.1), ("stop_token_ids", [-1]),
    ("stop_token_ids", 5), ("logprobs", -1), ("logprobs", 1.0),
])
def test_invalid_params_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"SamplingParams.{field}"):
        SamplingParams(**{field: value})


def test_max_tokens_errors_name_the_name_that_was_passed():
    with pytest.raises(ValueError, match=r"SamplingParams.max_new_tokens .*max_tokens"):
        SamplingParams(max_new_tokens=-1)
    sp = SamplingParams(max_new_tokens=3)
    sp.max_new_tokens = -1  # changed later: the check speaks of the field itself
    with pytest.raises(ValueError, match=r"SamplingParams.max_tokens .*max_new_tokens"):
        sp.validate()


def test_top_p_one_keeps_the_whole_vocabulary_even_in_a_mixed_batch():
    """A float32 running sum over 151,936 probabilities reaches 1.0 before the last token."""
    from minimodel.sampling import top_p_filter

    logits = torch.randn(2, 151936, generator=torch.Generator().manual_seed(0)) * 4
    out = top_p_filter(logits, torch.tensor([1.0, 0.5]))
    assert torch.isfinite(out[0]).all()
    assert not torch.isfinite(out[1]).all()


@pytest.mark.parametrize("width", [151_936, 40 * ARGMAX_CHUNK, 40 * ARGMAX_CHUNK + 1, 1000, 5])
def test_argmax_is_torchs_first_maximum(width):
    """The two-pass argmax returns torch.argmax's index in every case that could trip it: a
    maximum in the last, overlapping chunk; ties across and inside chunks (the first wins);
    NaN (torch takes the first NaN); rows of -inf; a batch; a strided view; no rows."""
    gen = torch.Generator().manual_seed(width)
    x = torch.randn(12, width, generator=gen)
    last = width - 1
    x[1, last] = 50.0  # in the tail chunk
    x[2, max(0, width - ARGMAX_CHUNK - 1)] = 50.0  # just before the tail chunk's start
    x[3, [min(7, last), last]] = 60.0  # a tie: the first wins
    x[4, [last, min(ARGMAX_CHUNK + 3, last)]] = 70.0  # a tie in two chunks
    x[5, min(100, last)] = float("nan")
    x[5, last] = float("nan")
    x[6] = float("-inf")
    x[7] = 0.0  # every column a maximum
    x[8, min(3, last)] = float("inf")
    x[9, last] = float("inf")
    x[9, min(ARGMAX_CHUNK * 2, last)] = float("nan")
    for rows in (x, x[:, :], x[::2], x.t().contiguous().t(), x[:0]):
        assert torch.equal(argmax(rows), rows.argmax(dim=-1))
    many = torch.randn(64, width, generator=gen)
    assert torch.equal(argmax(many), many.argmax(dim=-1))
