"""LLM.abort: a cancelled request frees its pages at once, wherever it is in the scheduler, and
the requests around it are not disturbed."""

from __future__ import annotations

import pytest
import torch
from checkpoints import CONFIGS

import minimodel as mm
from minimodel.engine import LLM

GREEDY = mm.SamplingParams(temperature=0.0, max_new_tokens=10)


def prompts(lengths: list[int], seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 512, (n,), generator=g).tolist() for n in lengths]


@pytest.fixture(scope="module")
def folder(small_checkpoint):
    return small_checkpoint(**CONFIGS["gqa2-tied-hd!=C"])


def run_all(llm: LLM) -> dict[int, mm.RequestOutput]:
    done = {}
    while llm.has_unfinished_requests():
        done.update({o.request_id: o for o in llm.step()})
    return done


@pytest.mark.parametrize("when", ["waiting", "mid-prefill", "running"])
def test_abort_frees_pages_and_leaves_the_others_alone(folder, when):
    ps = prompts([30, 7, 12])
    alone = LLM(folder, page_size=4, num_pages=64, skip_tokenizer_init=True).generate(
        [ps[1], ps[2]], GREEDY)
    # A token budget of 8 prefills the 30-token prompt in chunks over four steps.
    llm = LLM(folder, page_size=4, num_pages=64, max_num_batched_tokens=8,
              skip_tokenizer_init=True)
    victim = llm.add_request(ps[0], GREEDY)
    others = [llm.add_request(p, GREEDY) for p in ps[1:]]
    steps = {"waiting": 0, "mid-prefill": 2, "running": 6}[when]
    done = {}
    for _ in range(steps):
        done.update({o.request_id: o for o in llm.step()})
    seq = llm.get_request(victim)
    assert seq is not None and not seq.is_finished
    if when == "mid-prefill":
        assert 0 < seq.num_cached_tokens < seq.num_prompt_tokens and seq.page_table
    if when == "running":
        assert seq.num_output_tokens > 0
    held = len(seq.page_table)
    free_before = llm.allocator.num_free
    assert llm.abort(victim) is True
    assert llm.allocator.num_free == free_before + held
    assert llm.get_request(victim) is None
    assert llm.abort(victim) is False  # a second abort changes nothing
    done.update(run_all(llm))
    assert victim not in done
    assert [done[i].token_ids for i in others] == [o.token_ids for o in alone]
    assert llm.allocator.num_free == llm.allocator.num_pages


def test_abort_of_unknown_or_finished_requests_is_false(folder):
    llm = LLM(folder, page_size=4, num_pages=64, skip_tokenizer_init=True)
    assert llm.abort(12345) is False
    rid = llm.add_request(prompts([5])[0], GREEDY)
    run_all(llm)
    assert llm.abort(rid) is False
    assert llm.allocator.num_free == llm.allocator.num_pages


def test_aborting_everything_empties_the_scheduler(folder):
    llm = LLM(folder, page_size=4, num_pages=64, skip_tokenizer_init=True)
    ids = [llm.add_request(p, GREEDY) for p in prompts([9, 3, 17, 4])]
    llm.step()
    llm.step()
    assert all(llm.abort(i) for i in ids)
    assert not llm.has_unfinished_requests()
    assert llm.step() == []
    assert llm.allocator.num_free == llm.allocator.num_pages
