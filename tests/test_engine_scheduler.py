"""Continuous batching: budgets, preemption, batch invariance, bad input.

Every test compares against a run that cannot be affected by the thing under test (a request
alone, a big pool), so a scheduling bug shows up as different tokens.
"""

from __future__ import annotations

import pytest
import torch
from checkpoints import CONFIGS
from engine_runs import run_traced

import minimodel as mm
from minimodel.engine import LLM

CONFIG = CONFIGS["gqa2-tied-hd!=C"]


def prompts(lengths: list[int], seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 512, (n,), generator=g).tolist() for n in lengths]


GREEDY = mm.SamplingParams(temperature=0.0, max_new_tokens=24)
SAMPLED = [mm.SamplingParams(temperature=0.8, top_k=40, top_p=0.9, seed=s, max_new_tokens=24)
           for s in range(6)]


def test_preemption_with_a_tiny_pool(small_checkpoint):
    """6 requests that need 6 * 12 pages at the end share 24 pages: the newest are preempted
    and recomputed; every request still finishes with the big pool's output."""
    folder = small_checkpoint(**CONFIG)
    reqs = list(zip(prompts([20, 3, 25, 9, 17, 30]), [GREEDY, *SAMPLED[:5]], strict=True))
    big, _ = run_traced(LLM(folder, page_size=4, num_pages=512, skip_tokenizer_init=True), reqs)
    small = LLM(folder, page_size=4, num_pages=24, skip_tokenizer_init=True)
    outs, trace = run_traced(small, reqs)
    preempted = [s.request_id for b in trace if b is not None for s in b.preempted]
    assert preempted, "the pool was big enough: this test would not test preemption"
    assert sum(o.metrics.num_preemptions for o in outs) == len(preempted)
    assert [o.token_ids for o in outs] == [o.token_ids for o in big]
    assert all(o.finish_reason == "length" for o in outs)
    assert small.allocator.num_free == small.allocator.num_pages


def test_a_request_larger_than_the_pool_ends_with_length(small_checkpoint):
    folder = small_checkpoint(**CONFIG)
    llm = LLM(folder, page_size=4, num_pages=3, skip_tokenizer_init=True)  # 12 tokens
    out = llm.generate([list(range(5))], mm.SamplingParams(temperature=0, max_new_tokens=50))[0]
    assert out.finish_reason == "length" and 0 < len(out.token_ids) < 50
    assert llm.allocator.num_free == 3


def test_waiting_requests_start_when_a_full_pool_ends_one(small_checkpoint):
    """A request that fills the pool ends with "length"; the one waiting behind it then runs
    (the step that ended it must not leave the scheduler with nothing to do)."""
    llm = LLM(small_checkpoint(**CONFIG), page_size=4, num_pages=8, skip_tokenizer_init=True)
    sp = mm.SamplingParams(temperature=0, max_new_tokens=5)
    full, small = llm.generate([list(range(31)), [5, 6]], sp)
    assert full.finish_reason == "length" and len(full.token_ids) == 2  # 33 tokens: 9 pages
    assert small.finish_reason == "length" and len(small.token_ids) == 5
    assert llm.allocator.num_free == 8


def test_budgets_hold_in_every_step(small_checkpoint):
    folder = small_checkpoint(**CONFIG)
    reqs = [(p, GREEDY) for p in prompts([30, 2, 11, 7, 19])]
    alone = [LLM(folder, num_pages=64, skip_tokenizer_init=True).generate([p], sp)[0].token_ids
             for p, sp in reqs]
    llm = LLM(folder, page_size=4, num_pages=128, max_num_seqs=2, max_num_batched_tokens=8,
              skip_tokenizer_init=True)
    outs, trace = run_traced(llm, reqs)
    assert [o.token_ids for o in outs] == alone
    assert all(b.num_tokens <= 8 for b in trace if b is not None)
    assert max(len(b.seqs) for b in trace if b is not None) == 2
    kinds = {b.is_prefill for b in trace if b is not None}
    assert kinds == {True, False}
    # several requests share one prefill step when they fit
    llm = LLM(folder, num_pages=128, skip_tokenizer_init=True)
    _, trace = run_traced(llm, reqs)
    assert len(trace[0].seqs) == 5 and trace[0].is_prefill


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "seeded"])
def test_batch_invariance(small_checkpoint, params):
    """A request gives the same tokens alone and inside a batch, in any order."""
    folder = small_checkpoint(**CONFIG)
    ps = prompts([13, 1, 40, 6, 22, 8], seed=4)
    sps = params if isinstance(params, list) else [params] * len(ps)
    llm = LLM(folder, page_size=3, num_pages=256, skip_tokenizer_init=True)
    alone = [llm.generate([p], sp)[0].token_ids for p, sp in zip(ps, sps, strict=True)]
    batched = [o.token_ids for o in llm.generate(ps, sps)]
    order = [3, 0, 5, 1, 4, 2]
    shuffled = llm.generate([ps[i] for i in order], [sps[i] for i in order])
    assert batched == alone
    assert [shuffled[order.index(i)].token_ids for i in range(len(ps))] == alone
    if isinstance(params, list):  # seeded sampling really samples: not the greedy answer
        greedy = [o.token_ids for o in llm.generate(ps, GREEDY)]
        assert greedy != alone


def test_unseeded_sampling_differs_between_requests(small_checkpoint):
    folder = small_checkpoint(**CONFIG)
    llm = LLM(folder, num_pages=64, skip_tokenizer_init=True)
    sp = mm.SamplingParams(temperature=1.0, max_new_tokens=16)
    a, b = llm.generate([[1, 2, 3], [1, 2, 3]], sp)
    assert a.token_ids != b.token_ids


BAD_PROMPTS = {
    "empty": ([], "empty"),
    "too long": (list(range(300)), "context length"),
    "id >= vocab": ([1, 2, 512], "outside the vocabulary"),
    "negative id": ([-1], "outside the vocabulary"),
    "not ids": ([1.5, 2], r"prompt\[0\] is 1.5 \(float\)"),
}


@pytest.mark.parametrize("case", sorted(BAD_PROMPTS))
def test_bad_prompt_raises_and_changes_nothing(small_checkpoint, case):
    folder = small_checkpoint(**CONFIG)
    good = prompts([12])[0]
    llm = LLM(folder, num_pages=64, max_model_len=256, skip_tokenizer_init=True)
    alone = llm.generate([good], GREEDY)[0].token_ids
    rid = llm.add_request(good, GREEDY)
    llm.step()
    bad, message = BAD_PROMPTS[case]
    with pytest.raises(ValueError, match=message):
        llm.add_request(bad, GREEDY)
    with pytest.raises(ValueError, match=message):
        llm.generate([good, bad], GREEDY)  # checked before anything is queued
    assert len(llm.scheduler.waiting) + len(llm.scheduler.running) == 1
    outs = []
    while llm.has_unfinished_requests():
        outs += llm.step()
    assert [(o.request_id, o.token_ids) for o in outs] == [(rid, alone)]
    assert llm.allocator.num_free == llm.allocator.num_pages


def test_bad_sampling_params(small_checkpoint):
    with pytest.raises(ValueError, match="temperature"):
        mm.SamplingParams(temperature=-1.0)
    with pytest.raises(ValueError, match="top_p"):
        mm.SamplingParams(top_p=0.0)
    llm = LLM(small_checkpoint(**CONFIG), num_pages=64, skip_tokenizer_init=True)
    params = mm.SamplingParams()
    params.top_k = -3  # changed after construction: caught when submitted
    with pytest.raises(ValueError, match="top_k"):
        llm.add_request([1, 2], params)
    with pytest.raises(ValueError, match="SamplingParams"):
        llm.add_request([1, 2], {"temperature": 0})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="2 prompts but 1"):
        llm.generate([[1], [2]], [GREEDY])
    with pytest.raises(ValueError, match="tokenizer"):
        llm.add_request([1, 2], mm.SamplingParams(stop=["x"]))
    assert not llm.has_unfinished_requests()


def test_prompt_that_does_not_fit_the_pool(small_checkpoint):
    llm = LLM(small_checkpoint(**CONFIG), page_size=4, num_pages=2, skip_tokenizer_init=True)
    with pytest.raises(ValueError, match="KV cache"):
        llm.add_request(list(range(8)), GREEDY)


def test_zero_new_tokens(small_checkpoint):
    llm = LLM(small_checkpoint(**CONFIG), num_pages=64, skip_tokenizer_init=True)
    out = llm.generate([[5, 6]], mm.SamplingParams(max_new_tokens=0))[0]
    assert out.token_ids == [] and out.finish_reason == "length"


def test_trace_names_the_steps(small_checkpoint):
    llm = LLM(small_checkpoint(**CONFIG), num_pages=64, skip_tokenizer_init=True)
    _, trace = run_traced(llm, [(p, mm.SamplingParams(temperature=0, max_new_tokens=2))
                                for p in prompts([4, 6])])
    assert [b.describe() for b in trace] == [
        "prefill    10 tokens: 0(4), 1(6)",
        "decode      2 tokens: 0(1), 1(1)",
    ]


def test_scheduler_alone_with_fake_tokens():
    """The scheduler needs no model: feed it made-up tokens and watch it batch and preempt."""
    from minimodel.engine import PageAllocator, Scheduler, Sequence

    alloc = PageAllocator(6)
    sched = Scheduler(alloc, page_size=4, max_num_seqs=4, max_num_batched_tokens=16,
                      max_model_len=64)
    for i, n in enumerate([5, 9, 3]):
        sched.add(Sequence(i, list(range(n)), mm.SamplingParams(max_new_tokens=6)))
    lines = []
    while sched.has_unfinished():
        batch = sched.schedule()
        lines.append(batch.describe())
        n = sum(batch.sample_mask)
        sched.postprocess(batch, tokens=[7] * n, logprobs=[0.0] * n)
    assert lines[0] == "prefill    16 tokens: 0(5), 1(9), 2(2)"  # budget 16: 2 is chunked
    assert lines[1] == "prefill     1 tokens: 2(1)"
    assert any("preempted" in line for line in lines)  # 24 pages' worth of tokens in 6 pages
    assert alloc.num_free == 6
