"""vLLM's sampling parameters, against values worked out by hand in each test.

Penalties (repetition over prompt + output, frequency and presence over the output), min_p
after temperature, min_tokens holding EOS and stop_token_ids back, stop_token_ids ending with
"stop", top-N log-probabilities of the raw model distribution, the max_tokens alias, negative
seeds, top_k=-1; then the engine with the `tiny` model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

import minimodel as mm
from minimodel.sampling import Sampler, SamplingParams, min_p_filter

INF = float("-inf")


@dataclass
class Row:
    """A request's tokens as the sampler reads them (prompt, then output)."""

    token_ids: list[int]
    num_prompt_tokens: int


def row(prompt: list[int], output: list[int]) -> Row:
    return Row(prompt + output, len(prompt))


def processed(logits: list[float], sp: SamplingParams, r: Row, eos: set[int] = frozenset()
              ) -> list[float]:
    """The logits after min_tokens and the penalties, as the sampler computes them."""
    sampler = Sampler()
    sampler.eos_token_ids = set(eos)
    out = sampler._mask_and_penalise(torch.tensor([logits]), [sp], [r])
    return out[0].tolist()


# --- penalties ------------------------------------------------------------------------------

def test_repetition_penalty_divides_positive_and_multiplies_negative_logits():
    logits = [2.0, -1.0, 0.5, 3.0, -2.0, 0.0]
    sp = SamplingParams(repetition_penalty=2.0)
    # prompt has tokens 0 and 1, output has 4 and 5: all four are penalised, 2 and 3 are not
    got = processed(logits, sp, row([0, 1], [4, 5]))
    assert got == [2.0 / 2, -1.0 * 2, 0.5, 3.0, -2.0 * 2, 0.0]


def test_repetition_penalty_below_one_rewards_repeats():
    got = processed([2.0, -1.0, 1.0], SamplingParams(repetition_penalty=0.5), row([0, 1], []))
    assert got == [4.0, -0.5, 1.0]


def test_frequency_and_presence_count_the_output_only():
    logits = [1.0, 1.0, 1.0, 1.0]
    sp = SamplingParams(frequency_penalty=0.5, presence_penalty=1.0)
    # token 0 only in the prompt: untouched; token 2 twice in the output, token 3 once
    got = processed(logits, sp, row([0], [2, 2, 3]))
    assert got == [1.0, 1.0, 1.0 - (0.5 * 2 + 1.0), 1.0 - (0.5 * 1 + 1.0)]


def test_negative_frequency_and_presence_reward_repeats():
    sp = SamplingParams(frequency_penalty=-1.0, presence_penalty=-2.0)
    got = processed([0.0, 0.0, 0.0], sp, row([1], [0, 0, 0]))
    assert got == [0.0 + 3 * 1.0 + 2.0, 0.0, 0.0]


def test_repetition_is_applied_before_frequency():
    sp = SamplingParams(repetition_penalty=1.5, frequency_penalty=1.0)
    got = processed([3.0, 0.0], sp, row([1], [0, 0]))
    assert got[0] == pytest.approx(3.0 / 1.5 - 2 * 1.0)  # 0.0; the other order gives 0.667
    assert got[1] == 0.0  # in the prompt, logit 0: 0 * 1.5 = 0


def test_greedy_takes_the_argmax_of_the_penalised_logits():
    sampler = Sampler()
    logits = torch.tensor([[3.0, 2.5, 1.0]])
    sp = SamplingParams(temperature=0.0, repetition_penalty=4.0)
    tok, lp = sampler(logits, [sp], rows=[row([0], [])])
    assert tok.item() == 1  # 3 / 4 = 0.75, 2.5 (not seen), 1.0
    tok, lp = sampler(logits, [sp], rows=[row([0], [1])])
    assert tok.item() == 2  # 0.75, 0.625, 1.0
    assert lp.item() == pytest.approx(torch.log_softmax(logits[0], 0)[2].item())  # raw


def test_penalties_without_the_tokens_are_an_error():
    with pytest.raises(ValueError, match="rows="):
        Sampler()(torch.zeros(1, 4), [SamplingParams(presence_penalty=1.0)])


# --- min_p ----------------------------------------------------------------------------------

def test_min_p_drops_tokens_below_a_fraction_of_the_top_probability():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    # p_i / p_max = e^(l_i - 2): 1, 0.368, 0.135, 0.0498
    out = min_p_filter(logits, torch.tensor([0.2]))
    assert out[0].tolist() == [2.0, 1.0, INF, INF]
    out = min_p_filter(logits, torch.tensor([0.1]))
    assert out[0].tolist() == [2.0, 1.0, 0.0, INF]
    assert torch.equal(min_p_filter(logits, torch.tensor([0.0])), logits)


def draws(logits: list[float], sp: SamplingParams, n: int = 3000) -> set[int]:
    sampler = Sampler()
    gen = sampler.make_generator(0)
    batch = torch.tensor([logits]).expand(n, -1)
    return set(sampler(batch, [sp] * n, [gen] * n)[0].tolist())


def test_min_p_works_on_the_distribution_after_temperature():
    logits = [2.0, 1.0, 0.0, -1.0]
    # T = 1: ratios 1, 0.368, 0.135, 0.05 -> min_p 0.3 keeps {0, 1}
    assert draws(logits, SamplingParams(temperature=1.0, min_p=0.3)) == {0, 1}
    # T = 2: ratios e^(-d/2) = 1, 0.607, 0.368, 0.223 -> min_p 0.3 keeps {0, 1, 2}
    assert draws(logits, SamplingParams(temperature=2.0, min_p=0.3)) == {0, 1, 2}


def test_top_k_minus_one_is_off_like_zero():
    logits = torch.randn(40, 30, generator=torch.Generator().manual_seed(3))
    sampler = Sampler()
    runs = [sampler(logits, [SamplingParams(top_k=k, seed=5)] * 40,
                    [sampler.make_generator(5)] * 40)[0] for k in (-1, 0)]
    assert torch.equal(runs[0], runs[1])
    assert len(set(runs[0].tolist())) > 5  # nothing cut it to a few tokens


# --- min_tokens, stop_token_ids -------------------------------------------------------------

def test_min_tokens_masks_eos_and_stop_token_ids_until_n_tokens():
    logits = [0.0, 5.0, 4.0, 3.0]  # 1 is EOS, 2 a stop token id
    sp = SamplingParams(temperature=0.0, min_tokens=3, stop_token_ids=[2])
    assert processed(logits, sp, row([0], [3, 3]), eos={1}) == [0.0, INF, INF, 3.0]
    assert processed(logits, sp, row([0], [3, 3, 3]), eos={1}) == logits  # 3 generated
    # ignore_eos: EOS is no stop, so nothing holds it back; the stop token id still is
    sp = SamplingParams(min_tokens=3, stop_token_ids=[2], ignore_eos=True)
    assert processed(logits, sp, row([0], []), eos={1}) == [0.0, 5.0, INF, 3.0]


@pytest.fixture(scope="module")
def tiny():
    return mm.LLM("tiny")


def greedy(n: int = 10, **kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n, **kw)


PROMPT = "Hello there"


@pytest.fixture(scope="module")
def free_run(tiny):
    """The greedy continuation with no penalties, stop or min_tokens."""
    return tiny.generate([PROMPT], greedy(12))[0]


def a_later_token(ids: list[int], after: int) -> tuple[int, int]:
    """(index, token) of the first token at index >= after that did not occur before it."""
    return next((i, t) for i, t in enumerate(ids) if i >= after and t not in ids[:i])


def test_stop_token_ids_end_with_stop_and_stay_out_of_the_text(tiny, free_run):
    i, stop = a_later_token(free_run.token_ids, 1)
    for stream in (False, True):
        sp = greedy(12, stop_token_ids=[stop])
        if stream:
            text = "".join(tiny.stream(PROMPT, sp))
        else:
            out = tiny.generate([PROMPT], sp)[0]
            assert out.token_ids == free_run.token_ids[: i + 1]
            assert out.finish_reason == "stop"
            text = out.text
        assert text == tiny.tokenizer.decode(free_run.token_ids[:i])


def test_min_tokens_holds_the_stop_token_back(tiny, free_run):
    i, stop = a_later_token(free_run.token_ids, 1)
    out = tiny.generate([PROMPT], greedy(12, stop_token_ids=[stop], min_tokens=i + 2))[0]
    assert stop not in out.token_ids[: i + 2]
    if out.finish_reason == "stop":
        assert out.token_ids[-1] == stop and len(out.token_ids) > i + 2
    assert out.token_ids[:i] == free_run.token_ids[:i]


def test_stop_strings_are_not_honoured_before_min_tokens(tiny, free_run):
    ids = free_run.token_ids
    piece = tiny.tokenizer.decode(ids[2:3])
    first = tiny.tokenizer.decode(ids[:3])
    assert piece.strip() and first.find(piece) == len(first) - len(piece)  # first there
    out = tiny.generate([PROMPT], greedy(12, stop=piece))[0]
    assert out.text == first[: -len(piece)] and len(out.token_ids) == 3
    # With min_tokens=len(ids): the stop string must end in the text of the last tokens.
    late = tiny.generate([PROMPT], greedy(12, stop=piece, min_tokens=12))[0]
    full = tiny.tokenizer.decode(ids)
    base = len(tiny.tokenizer.decode(ids[:11]))
    hit = full.find(piece, max(0, base - len(piece) + 1))
    assert late.text == (full if hit < 0 else full[:hit])
    assert len(late.token_ids) == 12


# --- log-probabilities ----------------------------------------------------------------------

def test_top_logprobs_are_the_raw_log_softmax_with_the_chosen_token():
    logits = torch.tensor([[3.0, 2.9, 0.5, -1.0, 0.0]])
    sampler = Sampler()
    # repetition 100 on tokens 0 and 1: 0.03 and 0.029 < 0.5, so greedy picks token 2
    sp = SamplingParams(temperature=0.0, repetition_penalty=100.0, logprobs=2)
    tok, lp = sampler(logits, [sp], rows=[row([0, 1], [])])
    raw = torch.log_softmax(logits[0], 0)
    assert tok.item() == 2 and lp.item() == pytest.approx(raw[2].item())
    top = sampler.last_top_logprobs[0]
    # the 2 most likely raw tokens (0, 1), and the chosen one (2) as a third: sorted
    assert [t for t, _ in top] == [0, 1, 2]
    assert [v for _, v in top] == pytest.approx([raw[0].item(), raw[1].item(), raw[2].item()])
    assert sum(math.exp(v) for _, v in top) <= 1.0


def test_top_logprobs_zero_is_the_chosen_token_only_and_all_sum_to_one():
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(2, 12, generator=g)
    sampler = Sampler()
    sps = [SamplingParams(temperature=0.0, logprobs=0), SamplingParams(seed=3, logprobs=12)]
    tokens, lps = sampler(logits, sps, [None, sampler.make_generator(3)])
    first, whole = sampler.last_top_logprobs
    assert first == [(tokens[0].item(), pytest.approx(lps[0].item()))]
    assert len(whole) == 12 and sum(math.exp(v) for _, v in whole) == pytest.approx(1.0)
    values = [v for _, v in whole]
    assert values == sorted(values, reverse=True)
    raw = torch.log_softmax(logits[1], 0)
    assert all(v == pytest.approx(raw[t].item(), abs=1e-6) for t, v in whole)


def test_logprobs_bool_keeps_working():
    assert SamplingParams(logprobs=True).num_logprobs == 0
    assert SamplingParams(logprobs=False).num_logprobs is None
    assert SamplingParams(logprobs=5).num_logprobs == 5
    assert SamplingParams().num_logprobs is None


def test_engine_top_logprobs_match_the_reference_model(tiny):
    out = tiny.generate([PROMPT], SamplingParams(temperature=0.9, seed=-3, max_tokens=6,
                                                 logprobs=3))[0]
    ref = mm.reference.Qwen3ForCausalLM.from_pretrained(tiny.folder, dtype=torch.float32)
    prompt = out.prompt_token_ids
    with torch.no_grad():
        logp = ref(torch.tensor([prompt + out.token_ids]))[0].log_softmax(-1)
    assert len(out.top_logprobs) == len(out.token_ids)
    for k, (tok, lp, top) in enumerate(zip(out.token_ids, out.logprobs, out.top_logprobs,
                                           strict=True)):
        want = logp[len(prompt) - 1 + k]
        ids = dict(top)
        assert ids[tok] == pytest.approx(lp)
        assert 3 <= len(top) <= 4
        best = want.topk(3)
        assert set(best.indices.tolist()) <= set(ids)
        for t, v in top:
            assert abs(v - want[t].item()) <= 1e-4
        assert sum(math.exp(v) for _, v in top) <= 1.0 + 1e-6


# --- the fields -----------------------------------------------------------------------------

def test_max_tokens_and_max_new_tokens_are_one_setting():
    assert SamplingParams().max_tokens == SamplingParams().max_new_tokens == 16
    a = SamplingParams(max_tokens=5)
    b = SamplingParams(max_new_tokens=5)
    assert a == b and a.max_new_tokens == 5 and b.max_tokens == 5
    b.max_new_tokens = 7
    assert b.max_tokens == 7
    with pytest.raises(ValueError, match="both max_tokens=5 and max_new_tokens=6"):
        SamplingParams(max_tokens=5, max_new_tokens=6)
    with pytest.raises(ValueError, match="only one"):
        SamplingParams(max_tokens=5, max_new_tokens=5)


def test_engine_stops_at_max_tokens(tiny):
    out = tiny.generate([PROMPT], SamplingParams(max_tokens=3, seed=1, ignore_eos=True))[0]
    assert len(out.token_ids) == 3 and out.finish_reason == "length"


def test_negative_seed_is_reproducible(tiny):
    sampler = Sampler()
    logits = torch.randn(1, 50, generator=torch.Generator().manual_seed(0))
    runs = [[sampler(logits, [SamplingParams(seed=-(2**63))], [gen])[0].item()
             for _ in range(20)] for gen in (sampler.make_generator(-(2**63)),
                                             sampler.make_generator(-(2**63)))]
    assert runs[0] == runs[1]
    sp = SamplingParams(seed=-12345, max_tokens=8, temperature=1.0)
    assert tiny.generate([PROMPT], sp)[0].token_ids == tiny.generate([PROMPT], sp)[0].token_ids


def test_a_failed_validation_changes_nothing(tiny):
    sp = SamplingParams()
    sp.stop = "x"
    sp.min_p = 5
    with pytest.raises(ValueError, match="SamplingParams.min_p"):
        tiny.add_request(PROMPT, sp)
    assert sp.stop == "x" and not tiny.has_unfinished_requests()
    with pytest.raises(ValueError, match="stop_token_ids"):
        tiny.add_request(PROMPT, SamplingParams(stop_token_ids=[tiny.cfg.vocab_size]))
    assert not tiny.has_unfinished_requests()


# --- the engine -----------------------------------------------------------------------------

def test_penalties_change_greedy_output(tiny, free_run):
    for kw in ({"repetition_penalty": 1.5}, {"frequency_penalty": 2.0},
               {"presence_penalty": 2.0}):
        out = tiny.generate([PROMPT], greedy(12, **kw))[0]
        assert out.token_ids != free_run.token_ids, kw
    off = {"repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}
    assert tiny.generate([PROMPT], greedy(12, **off))[0].token_ids == free_run.token_ids


def test_greedy_repetition_penalty_equals_a_hand_loop_over_the_reference(tiny):
    ref = mm.reference.Qwen3ForCausalLM.from_pretrained(tiny.folder, dtype=torch.float32)
    penalty = 1.7
    ids = tiny.tokenizer.encode(PROMPT)
    prompt_len = len(ids)
    with torch.no_grad():
        for _ in range(6):
            logits = ref(torch.tensor([ids]))[0, -1].clone()
            for t in set(ids):  # prompt and output so far
                v = logits[t].item()
                logits[t] = v / penalty if v > 0 else v * penalty
            ids.append(int(logits.argmax()))
    out = tiny.generate([PROMPT], greedy(6, repetition_penalty=penalty))[0]
    assert out.token_ids == ids[prompt_len:]


MIXED = [
    greedy(10, repetition_penalty=1.3, logprobs=2),
    SamplingParams(temperature=0.8, seed=-1, max_tokens=10, frequency_penalty=0.7,
                   presence_penalty=0.4, min_p=0.05),
    SamplingParams(temperature=1.1, seed=9, max_tokens=10, top_k=-1, top_p=0.9,
                   min_tokens=4, logprobs=1),
    SamplingParams(temperature=0.7, seed=2**40, max_tokens=10, top_k=20),
]
MIXED_PROMPTS = ["Hello there", "The cat sat", "One two three four", "Why"]


def test_mixed_parameters_in_one_batch_equal_each_request_alone(tiny):
    alone = [tiny.generate([p], sp)[0] for p, sp in zip(MIXED_PROMPTS, MIXED, strict=True)]
    together = tiny.generate(MIXED_PROMPTS, MIXED)
    for a, b in zip(alone, together, strict=True):
        assert a.token_ids == b.token_ids
        assert (a.top_logprobs is None) == (b.top_logprobs is None)
        if a.top_logprobs is not None:
            for x, y in zip(a.top_logprobs, b.top_logprobs, strict=True):
                assert [t for t, _ in x] == [t for t, _ in y]
                assert [v for _, v in x] == pytest.approx([v for _, v in y], abs=1e-4)


def test_sampler_rows_are_batch_invariant_bit_for_bit():
    g = torch.Generator().manual_seed(6)
    logits = torch.randn(4, 200, generator=g) * 2
    hist = [row([1, 2, 3], [4, 4]), row([5], []), row([7, 8], [9]), row([0], [1, 1, 1])]
    sps = [MIXED[1], MIXED[2], MIXED[0], SamplingParams(temperature=0.9, seed=4, min_p=0.2,
                                                        repetition_penalty=0.8)]
    seeds = [-1, 9, None, 4]
    sampler = Sampler()
    sampler.eos_token_ids = {3}

    def gens(idx):
        return [sampler.make_generator(seeds[i]) for i in idx]

    together, lps = sampler(logits, sps, gens(range(4)), rows=hist)
    tops = sampler.last_top_logprobs
    for i in range(4):
        tok, lp = sampler(logits[i:i + 1], [sps[i]], gens([i]), rows=[hist[i]])
        assert tok.item() == together[i].item() and lp.item() == lps[i].item()
        assert sampler.last_top_logprobs[0] == tops[i]
