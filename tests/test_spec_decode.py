"""Speculative decoding in the engine (engine/spec_decode.py): with either drafter and any k,
greedy decoding gives the tokens of the run without speculation; sampling keeps the target's
distribution exactly (a chi-square test over many seeds, which a biased acceptance rule
fails); stops inside an accepted run, preemption, abort, chunked prefill and the prefix cache
all behave as without speculation, and rejected drafts' pages go back to the pool."""

from __future__ import annotations

import json
import math

import pytest
import torch

import minimodel as mm
from minimodel.checkpoints import random_state_dict_torch, write_checkpoint
from minimodel.config import Qwen3Config
from minimodel.engine import spec_decode
from minimodel.engine.speculative import DRAFT_VOCAB
from minimodel.reference.model import Qwen3ForCausalLM

ENGINE = dict(skip_tokenizer_init=True, page_size=4, tune_kernels=False)
PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9, 7, 8, 9, 7, 8], [100, 200, 300], list(range(40, 61))]
GREEDY = mm.SamplingParams(max_tokens=40, temperature=0, logprobs=2)


@pytest.fixture(scope="module")
def baseline():
    return mm.LLM("tiny", **ENGINE).generate(PROMPTS, GREEDY)


def free_pages_back(llm: mm.LLM) -> None:
    """Every page is free (or only the prefix cache holds it) once nothing runs."""
    assert not llm.has_unfinished_requests()
    assert llm.allocator.num_free == llm.allocator.num_pages


def same_as(outs, base) -> None:
    for o, b in zip(outs, base, strict=True):
        assert o.token_ids == b.token_ids
        assert o.finish_reason == b.finish_reason
        assert max(abs(x - y) for x, y in zip(o.logprobs, b.logprobs, strict=True)) < 1e-4
        assert [t[0][0] for t in o.top_logprobs] == [t[0][0] for t in b.top_logprobs]


@pytest.mark.parametrize("drafter", ["ngram", "tiny"])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6])
def test_greedy_is_the_run_without_speculation(baseline, drafter, k):
    llm = mm.LLM("tiny", speculative_model=drafter, num_speculative_tokens=k, **ENGINE)
    outs = llm.generate(PROMPTS, GREEDY)
    same_as(outs, baseline)
    stats = llm.spec_decode_stats()
    assert stats["draft_tokens"] == sum(o.metrics.draft_tokens for o in outs) > 0
    assert stats["accepted_tokens"] == sum(o.metrics.accepted_tokens for o in outs)
    for o in outs:  # each step gives a request its accepted drafts and one token more
        assert o.metrics.steps + o.metrics.accepted_tokens == o.metrics.generated_tokens
    if drafter == "tiny":  # the target as its own draft: every draft is right
        assert stats["acceptance_rate"] == 1.0
        assert all(o.metrics.tokens_per_step > min(k, 2) for o in outs)
    free_pages_back(llm)


@pytest.mark.parametrize("k", [1, 3])
def test_the_target_as_its_own_draft_one_request_at_a_time(baseline, k):
    """Alone in the engine, a request's draft catches up on two tokens after every fully
    accepted step (the last draft and the bonus token): with the target as its own draft, it
    must still propose the target's next token every time."""
    llm = mm.LLM("tiny", speculative_model="tiny", num_speculative_tokens=k, **ENGINE)
    outs = [llm.generate([p], GREEDY)[0] for p in PROMPTS]
    same_as(outs, baseline)
    assert llm.spec_decode_stats()["acceptance_rate"] == 1.0
    free_pages_back(llm)


def test_a_bfloat16_engine_drafts_in_bfloat16():
    """The draft model runs in the engine's dtype: in bfloat16 it proposes, the target checks,
    every request ends at max_tokens with most drafts accepted (the target drafts for itself)
    and every page goes back."""
    llm = mm.LLM("tiny", dtype="bfloat16", speculative_model="tiny", num_speculative_tokens=3,
                 **ENGINE)
    outs = llm.generate(PROMPTS[:2], GREEDY)
    assert [len(o.token_ids) for o in outs] == [GREEDY.max_tokens] * 2
    assert llm.speculator.drafter.model.model.embed_tokens.weight.dtype == torch.bfloat16
    assert llm.spec_decode_stats()["acceptance_rate"] > 0.5
    free_pages_back(llm)


class Oracle:
    """A test drafter that knows the greedy output: right proposes it, wrong proposes
    another token at every position."""

    name = "oracle"

    def __init__(self, base, right: bool) -> None:
        self.outputs = {tuple(b.prompt_token_ids): b.token_ids for b in base}
        self.right = right

    def prefill(self, batch, runner) -> None:
        pass

    def propose(self, seqs, ks):
        drafts = []
        for seq, k in zip(seqs, ks, strict=True):
            out = self.outputs[tuple(seq.token_ids[:seq.num_prompt_tokens])]
            nxt = out[seq.num_output_tokens:seq.num_output_tokens + k]
            drafts.append(nxt if self.right else [(t + 1) % 1000 for t in nxt])
        return drafts, [None] * len(seqs)

    def after_verify(self, seq, num_written, num_kept) -> None:
        pass


@pytest.mark.parametrize("right", [True, False])
def test_a_draft_always_right_or_always_wrong(baseline, right):
    llm = mm.LLM("tiny", speculative_model="ngram", num_speculative_tokens=4, **ENGINE)
    llm.speculator.drafter = Oracle(baseline, right)
    outs = llm.generate(PROMPTS, GREEDY)
    same_as(outs, baseline)
    stats = llm.spec_decode_stats()
    assert stats["acceptance_rate"] == (1.0 if right else 0.0)
    assert stats["tokens_per_step"] == pytest.approx(5.0 if right else 1.0, abs=0.6)
    free_pages_back(llm)


def test_stops_inside_an_accepted_run(baseline):
    """A stop token, EOS (as a stop token id) and max_tokens land in the middle of a run of
    accepted drafts: the request ends there, as without speculation."""
    base = baseline[3].token_ids
    cases = [mm.SamplingParams(max_tokens=40, temperature=0, stop_token_ids=[base[9]]),
             mm.SamplingParams(max_tokens=7, temperature=0),
             mm.SamplingParams(max_tokens=40, temperature=0, min_tokens=5,
                               stop_token_ids=[base[2], base[12]])]
    plain = mm.LLM("tiny", **ENGINE)
    for sp in cases:
        want = plain.generate([PROMPTS[3]], sp)[0]
        llm = mm.LLM("tiny", speculative_model="ngram", num_speculative_tokens=6, **ENGINE)
        llm.speculator.drafter = Oracle(baseline, right=True)
        got = llm.generate([PROMPTS[3]], sp)[0]
        assert got.token_ids == want.token_ids and got.finish_reason == want.finish_reason
        assert got.stop_reason == want.stop_reason
        free_pages_back(llm)


def test_stop_strings_inside_an_accepted_run():
    prompt = "To be, or not to be, that is the question"
    sp = mm.SamplingParams(max_tokens=30, temperature=0)
    want_full = mm.LLM("bard", tune_kernels=False).generate([prompt], sp)[0]
    stop = want_full.text[12:16]
    sp = mm.SamplingParams(max_tokens=30, temperature=0, stop=[stop])
    want = mm.LLM("bard", tune_kernels=False).generate([prompt], sp)[0]
    llm = mm.LLM("bard", speculative_model="ngram", num_speculative_tokens=4,
                 tune_kernels=False)
    llm.speculator.drafter = Oracle([want_full], right=True)
    got = llm.generate([prompt], sp)[0]
    assert (got.text, got.stop_reason, got.finish_reason) == (want.text, stop, "stop")
    streamed = "".join(llm.stream(prompt, sp))
    assert streamed == want.text


def test_preemption_abort_chunked_prefill_and_prefix_cache(baseline):
    """A pool too small for every request at once (preemption), prompts prefilled in chunks,
    shared prefixes in the prefix cache, a request aborted mid-decode: the tokens of the run
    without speculation, and every page back in the end."""
    shared = list(range(500, 530))
    prompts = [shared + p for p in PROMPTS] + PROMPTS
    settings = dict(ENGINE, num_pages=40, max_num_batched_tokens=16)
    want = mm.LLM("tiny", **settings).generate(prompts, GREEDY)
    for drafter in ("ngram", "tiny"):
        llm = mm.LLM("tiny", speculative_model=drafter, num_speculative_tokens=3, **settings)
        got = llm.generate(prompts, GREEDY)
        same_as(got, want)
        assert sum(o.metrics.num_preemptions for o in got) > 0
        assert sum(o.metrics.cached_tokens for o in got) > 0
        victim = llm.add_request(PROMPTS[0], GREEDY)
        keep = llm.add_request(PROMPTS[1], GREEDY)
        for _ in range(4):
            llm.step()
        assert llm.abort(victim)
        outs = []
        while llm.has_unfinished_requests():
            outs += llm.step()
        assert [o.request_id for o in outs] == [keep]
        assert outs[0].token_ids == want[len(PROMPTS) + 1].token_ids
        llm.reset_prefix_cache()
        free_pages_back(llm)


def test_a_draft_model_prefix_cache_holds_its_kv_too():
    """The draft's pool mirrors the target's pages: a request that starts from cached pages
    drafts as well as one that computed them (the same drafts: full acceptance both times)."""
    prompt = list(range(300, 340))
    llm = mm.LLM("tiny", speculative_model="tiny", num_speculative_tokens=4, **ENGINE)
    first = llm.generate([prompt], GREEDY)[0]
    second = llm.generate([prompt], GREEDY)[0]
    assert second.metrics.cached_tokens >= 36
    assert second.token_ids == first.token_ids
    assert second.metrics.acceptance_rate == first.metrics.acceptance_rate == 1.0


def test_penalties_and_min_tokens_decode_without_drafts():
    """Penalties change the distribution with every token, and min_tokens holds EOS back:
    such requests get no drafts until they can be checked exactly, and match the run
    without speculation token for token (seeded sampling too, since they draw as always)."""
    cases = [mm.SamplingParams(max_tokens=12, temperature=0, repetition_penalty=1.3),
             mm.SamplingParams(max_tokens=12, temperature=0.8, seed=3, presence_penalty=0.5)]
    plain = mm.LLM("tiny", **ENGINE)
    llm = mm.LLM("tiny", speculative_model="tiny", num_speculative_tokens=3, **ENGINE)
    for sp in cases:
        want = plain.generate(PROMPTS[:2], sp)
        got = llm.generate(PROMPTS[:2], sp)
        assert [o.token_ids for o in got] == [o.token_ids for o in want]
        assert all(o.metrics.draft_tokens == 0 for o in got)
    sp = mm.SamplingParams(max_tokens=12, temperature=0, min_tokens=6)
    got = llm.generate(PROMPTS[:1], sp)[0]
    assert got.token_ids == plain.generate(PROMPTS[:1], sp)[0].token_ids
    assert 0 < got.metrics.draft_tokens


def test_seeded_sampling_repeats():
    sp = mm.SamplingParams(max_tokens=24, temperature=0.9, top_p=0.95, seed=11)
    runs = [mm.LLM("tiny", speculative_model=d, num_speculative_tokens=3, **ENGINE)
            .generate(PROMPTS, sp) for d in ("tiny", "tiny")]
    assert [o.token_ids for o in runs[0]] == [o.token_ids for o in runs[1]]


@pytest.mark.parametrize("bad, message", [
    (dict(num_speculative_tokens=2), "needs a speculative_model"),
    (dict(speculative_model="ngram"), "num_speculative_tokens must be an integer from 1"),
    (dict(speculative_model="ngram", num_speculative_tokens=0), "from 1 to 16"),
    (dict(speculative_model="ngram", num_speculative_tokens=17), "from 1 to 16"),
    (dict(speculative_model="ngram", num_speculative_tokens=True), "from 1 to 16"),
    (dict(speculative_model=3, num_speculative_tokens=2), "speculative_model must be"),
    (dict(speculative_model="ngram", num_speculative_tokens=2, tensor_parallel_size=2),
     "tensor_parallel_size=1"),
])
def test_bad_settings_are_named(bad, message):
    with pytest.raises(ValueError, match=message):
        mm.LLM("tiny", skip_tokenizer_init=True, **bad)


def test_an_unknown_draft_or_another_vocabulary_is_named(small):
    with pytest.raises(FileNotFoundError, match="Unknown model 'no-such-draft'"):
        mm.LLM("tiny", speculative_model="no-such-draft", num_speculative_tokens=2)
    with pytest.raises(ValueError, match="vocabulary of 8 ids, the target 151936"):
        mm.LLM("tiny", speculative_model=str(small[0]), num_speculative_tokens=2)


# --- the distribution: a small vocabulary, many seeds -------------------------------------

V = 8


def small_model(folder, seed: int, sharpen: float, vocab: list[int] | None = None):
    """A 2-layer Qwen3 over V ids (or over the compact `vocab` + a shared row, as bard-draft),
    its final norm scaled so that its distributions are far from uniform."""
    n = V if vocab is None else len(vocab) + 1
    cfg = Qwen3Config(vocab_size=n, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      head_dim=16, max_position_embeddings=64, tie_word_embeddings=True,
                      torch_dtype="float32")
    sd = random_state_dict_torch(cfg, seed=seed)
    sd["model.norm.weight"] = sd["model.norm.weight"] * sharpen
    write_checkpoint(folder, cfg, sd)
    if vocab is not None:
        (folder / DRAFT_VOCAB).write_text(json.dumps({"target_vocab_size": V, "ids": vocab}))
    return folder


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("small")
    target = small_model(root / "target", seed=1, sharpen=10.0)
    draft = small_model(root / "draft", seed=2, sharpen=10.0, vocab=[0, 2, 3, 5, 6])
    return target, draft


PROMPT = [1, 4, 2]
TEMPERATURE = 1.0
N_SEEDS = 3000


def exact_two_tokens(folder) -> torch.Tensor:
    """The target's exact distribution [V, V] of its second and third tokens (the first comes
    from the prefill step; the next two from a verify step with one draft, or two steps),
    from the reference model (no engine, no cache)."""
    model = Qwen3ForCausalLM.from_pretrained(folder).float().eval()

    def next_probs(prefixes: list[list[int]]) -> torch.Tensor:
        with torch.no_grad():
            logits = model(torch.tensor(prefixes))[:, -1]
        return (logits / TEMPERATURE).softmax(-1).double()

    p1 = next_probs([PROMPT])[0]  # [V]
    p2 = next_probs([PROMPT + [a] for a in range(V)])  # [a, b]
    p3 = next_probs([PROMPT + [a, b] for a in range(V) for b in range(V)]).view(V, V, V)
    return (p1[:, None, None] * p2[:, :, None] * p3).sum(0)  # [b, c]


def two_token_counts(llm: mm.LLM) -> torch.Tensor:
    sps = [mm.SamplingParams(max_tokens=3, temperature=TEMPERATURE, seed=s)
           for s in range(N_SEEDS)]
    outs = llm.generate([PROMPT] * N_SEEDS, sps, use_tqdm=False)
    counts = torch.zeros(V, V, dtype=torch.float64)
    for o in outs:
        counts[o.token_ids[1], o.token_ids[2]] += 1
    return counts


def chi_square_p(counts: torch.Tensor, p: torch.Tensor) -> float:
    """Pearson's test of counts against p, the cells expected below 5 pooled into one."""
    n = counts.sum()
    expected = (p * n).flatten()
    observed = counts.flatten()
    big = expected >= 5
    e = torch.cat([expected[big], expected[~big].sum()[None]])
    o = torch.cat([observed[big], observed[~big].sum()[None]])
    if e[-1] == 0:
        e, o = e[:-1], o[:-1]
    stat = float(((o - e) ** 2 / e).sum())
    df = len(e) - 1  # the chi-square survival function: Q(df / 2, stat / 2)
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


ALPHA = 1e-4  # the false-alarm rate: a correct engine fails one run in 10,000


@pytest.fixture(scope="module")
def exact(small):
    p = exact_two_tokens(small[0])
    assert p.max() > 0.05 and (p > 0.001).sum() > 10  # spread, yet far from uniform
    return p


@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_sampled_tokens_follow_the_target_exactly(small, exact, drafter):
    target, draft = small
    spec = str(draft) if drafter == "model" else "ngram"
    llm = mm.LLM(str(target), speculative_model=spec, num_speculative_tokens=2,
                 **dict(ENGINE, page_size=2))
    counts = two_token_counts(llm)
    stats = llm.spec_decode_stats()
    if drafter == "model":  # both tokens mostly from one verify step, some drafts rejected
        assert 0.1 < stats["acceptance_rate"] < 0.95
    assert chi_square_p(counts, exact) > ALPHA


def test_a_biased_acceptance_rule_fails_the_same_test(small, exact, monkeypatch):
    """Accepting every draft (the drafter's distribution, not the target's) is caught."""

    def trusting(draft, draft_probs, target_probs, generator=None):
        bonus = int(torch.multinomial(target_probs[len(draft)], 1, generator=generator))
        return [int(d) for d in draft] + [bonus]

    monkeypatch.setattr(spec_decode, "rejection_sample", trusting)
    target, draft = small
    llm = mm.LLM(str(target), speculative_model=str(draft), num_speculative_tokens=2,
                 **dict(ENGINE, page_size=2))
    assert chi_square_p(two_token_counts(llm), exact) < ALPHA


def test_the_draft_never_proposes_an_id_it_has_no_row_for(small):
    target, draft = small
    llm = mm.LLM(str(target), speculative_model=str(draft), num_speculative_tokens=3,
                 **dict(ENGINE, page_size=2))
    seen = []
    propose = llm.speculator.drafter.propose

    def spy(seqs, ks):
        drafts, probs = propose(seqs, ks)
        seen.extend(t for d in drafts for t in d)
        for q in probs:
            if q is not None:
                assert math.isclose(float(q[:, [1, 4, 7]].sum()), 0.0)
        return drafts, probs

    llm.speculator.drafter.propose = spy
    llm.generate([PROMPT] * 20, [mm.SamplingParams(max_tokens=8, temperature=1.0, seed=s)
                                 for s in range(20)])
    assert seen and set(seen) <= {0, 2, 3, 5, 6}
