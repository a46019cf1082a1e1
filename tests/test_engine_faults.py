"""Faults and bad input in the engine's own API: each ends with a clear error, and neither the
failed request nor the error leaves anything behind (pages, queues, a poisoned LLM).

What it holds: a bad value is refused before it is queued; a step that raises aborts the
requests it ran and the next generate works; generate and stream abort their requests on any
exit (an error, Ctrl-C, a stream closed early); a tiny temperature is greedy; a request that
fills the whole pool says so.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import minimodel as mm
from minimodel.engine import LLM, StepError


def greedy(n: int = 6, **kw) -> mm.SamplingParams:
    return mm.SamplingParams(temperature=0.0, max_new_tokens=n, **kw)


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM("tiny", device="cpu", num_pages=64)


def idle(llm: LLM) -> bool:
    """No request left anywhere and every page back in the pool."""
    return (not llm.has_unfinished_requests() and not llm._active
            and llm.allocator.num_free == llm.allocator.num_pages)


# --- bad values are refused before anything is queued ----------------------------------------


@pytest.mark.parametrize("fields, name", [
    ({"top_k": 2**70}, "top_k"), ({"seed": 2**70}, "seed"),
    ({"max_new_tokens": 2**70}, "max_new_tokens"), ({"temperature": float("inf")}, "temperature"),
    ({"ignore_eos": "no"}, "ignore_eos"), ({"logprobs": -1}, "logprobs"),
    ({"logprobs": 1.5}, "logprobs"), ({"max_tokens": -1}, "max_tokens"),
    ({"top_k": True}, "top_k"),
])
def test_sampling_params_out_of_range_are_value_errors(fields, name):
    with pytest.raises(ValueError, match=f"SamplingParams.{name} must be"):
        mm.SamplingParams(**fields)


def test_a_value_changed_after_construction_is_refused_at_submit(llm):
    params = greedy()
    params.top_k = 2**70  # a dataclass field can be changed later: submit checks again
    before = llm._next_id
    with pytest.raises(ValueError, match="top_k"):
        llm.generate(["Hello"], params)
    assert llm._next_id == before and idle(llm)
    assert llm.generate(["Hello"], greedy())[0].token_ids


@pytest.mark.parametrize("prompts, message", [
    (None, "prompts must be"), (5, "prompts must be"), ({"text": "hi"}, "prompts must be"),
    ([[1, "a"]], r"prompt\[1\] is 'a'"), ([[1, 2.5]], r"prompt\[1\] is 2.5"),
    ([[1, True]], r"prompt\[1\] is True"), ([None], "A prompt must be"),
])
def test_bad_prompts_name_what_is_wrong(llm, prompts, message):
    with pytest.raises(ValueError, match=message):
        llm.generate(prompts, greedy())
    assert idle(llm)


def test_params_that_are_not_sampling_params_are_refused(llm):
    with pytest.raises(ValueError, match="params must be a SamplingParams or a list"):
        llm.generate(["Hello"], "greedy")
    with pytest.raises(ValueError, match="params must be a SamplingParams"):
        list(llm.stream("Hello", "greedy"))
    assert idle(llm)


def test_numpy_and_torch_token_ids_are_prompts(llm):
    ids = [9707, 1879, 0]
    expected = llm.generate([ids], greedy())[0].token_ids
    for prompt in (np.array(ids), np.array(ids, dtype=np.int32), torch.tensor(ids),
                   [np.int64(i) for i in ids]):
        assert llm.generate(prompt, greedy())[0].token_ids == expected, type(prompt)
    assert llm.generate(np.array([ids, ids]), greedy())[1].token_ids == expected


@pytest.mark.parametrize("kw, message", [
    ({"max_model_len": 0}, "max_model_len must be"), ({"max_model_len": -5}, "max_model_len"),
    ({"max_model_len": 10**9}, "longer than the model's context"),
    ({"dtype": "int8"}, "dtype 'int8'"), ({"dtype": torch.int64}, "dtype torch.int64"),
    ({"dtype": "float"}, "dtype 'float'"),
    ({"device": "bogus"}, "is not a device"), ({"device": "cuda"}, "no CUDA device is visible"),
    ({"device": "cuda:3"}, "no CUDA device"), ({"device": "meta"}, "'cpu' or 'cuda' only"),
    ({"kv_cache_bytes": "1GB"}, "kv_cache_bytes must be"), ({"page_size": True}, "page_size"),
    ({"enforce_eager": "no"}, "enforce_eager must be True or False"),
])
def test_bad_engine_arguments_are_value_errors(kw, message):
    with pytest.raises(ValueError, match=message):
        LLM("tiny", **{"device": "cpu", "num_pages": 8, **kw})


def test_dtype_names_and_torch_dtypes_both_work():
    assert LLM("tiny", device="cpu", num_pages=8, dtype="bfloat16").dtype == torch.bfloat16
    assert LLM("tiny", device="cpu", num_pages=8, dtype=torch.float32).dtype == torch.float32


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"eos_token_id": "two"}'])
def test_a_bad_generation_config_names_its_file(tmp_path: Path, text: str):
    folder = tmp_path / "model"
    shutil.copytree(mm.resolve_model("tiny"), folder)
    (folder / "generation_config.json").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match="generation_config.json"):
        LLM(folder, device="cpu", num_pages=8)


# --- a failed step aborts its requests; the LLM goes on ----------------------------------------


def test_a_failed_step_aborts_its_requests_and_the_llm_goes_on(llm, monkeypatch):
    expected = llm.generate(["Hello", "world"], greedy())
    run = llm.runner.run

    def failing(batch):
        raise RuntimeError("a kernel failed")

    monkeypatch.setattr(llm.runner, "run", failing)
    with pytest.raises(StepError, match="a kernel failed") as err:
        llm.generate(["Hello"], greedy())
    assert len(err.value.request_ids) == 1 and idle(llm)
    monkeypatch.setattr(llm.runner, "run", run)
    again = llm.generate(["Hello", "world"], greedy())  # not poisoned: the same answers
    assert [o.token_ids for o in again] == [o.token_ids for o in expected]
    assert idle(llm)


def test_a_failed_step_leaves_requests_it_did_not_run(llm, monkeypatch):
    """Only the requests of the failing batch are aborted; one queued with add_request that
    the failing step did not run finishes as it would have."""
    alone = llm.generate([[5, 6, 7]], greedy())[0].token_ids
    run = llm.runner.run
    marker = [11, 12, 13, 14]

    def failing(batch):
        if any(s.token_ids[:4] == marker for s in batch.seqs):
            raise RuntimeError("this batch fails")
        return run(batch)

    monkeypatch.setattr(llm.runner, "run", failing)
    other = llm.add_request([5, 6, 7], greedy())
    llm.step()  # the other request's prefill runs alone
    with pytest.raises(StepError):
        llm.generate([marker], greedy())
    outs = {}
    while llm.has_unfinished_requests():
        outs.update({o.request_id: o for o in llm.step()})
    outs.update({o.request_id: o for o in llm.step()})
    assert outs[other].token_ids == alone
    assert idle(llm)


@pytest.mark.parametrize("fault", [KeyboardInterrupt, RuntimeError])
def test_generate_aborts_its_requests_on_any_exit(llm, monkeypatch, fault):
    run = llm.runner.run
    calls = []

    def interrupted(batch):
        calls.append(batch)
        if len(calls) == 3:  # in the middle of decoding
            raise fault("stop")
        return run(batch)

    monkeypatch.setattr(llm.runner, "run", interrupted)
    with pytest.raises(fault):
        llm.generate(["Hello", "world"], greedy(20, ignore_eos=True))
    assert idle(llm)
    monkeypatch.setattr(llm.runner, "run", run)
    assert llm.generate(["Hello"], greedy())[0].token_ids


def test_a_stream_closed_early_frees_its_request(llm):
    pieces = llm.stream("Once upon a time", greedy(200, ignore_eos=True))
    next(pieces), next(pieces)
    assert llm.has_unfinished_requests()
    pieces.close()
    assert idle(llm)
    assert llm.generate(["Hello"], greedy())[0].token_ids


def test_a_tiny_temperature_is_greedy(llm):
    expected = llm.generate(["Hello world"], greedy(8))[0].token_ids
    for t in (1e-38, 5e-324, 1e-6):
        out = llm.generate(["Hello world"], mm.SamplingParams(temperature=t, max_new_tokens=8))
        assert out[0].token_ids == expected, t


def test_top_k_past_the_vocabulary_is_no_limit(llm):
    seeded = {"temperature": 0.9, "seed": 3, "max_new_tokens": 8}
    free = llm.generate(["Hi"], mm.SamplingParams(**seeded))[0].token_ids
    huge = llm.generate(["Hi"], mm.SamplingParams(top_k=2**62, **seeded))[0].token_ids
    assert huge == free


def test_a_request_that_fills_the_whole_pool_says_so(caplog):
    small = LLM("tiny", device="cpu", num_pages=1, page_size=16)
    with caplog.at_level(logging.WARNING, logger="minimodel.engine"):
        out = small.generate([[1, 2, 3]], greedy(100, ignore_eos=True))[0]
    assert out.finish_reason == "length" and len(out.token_ids) < 100
    assert any("every page of the KV cache" in r.getMessage() and "num_pages" in r.getMessage()
               for r in caplog.records), caplog.text


def test_generation_config_eos_still_read(tmp_path: Path):
    folder = tmp_path / "model"
    shutil.copytree(mm.resolve_model("tiny"), folder)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 8]}))
    llm = LLM(folder, device="cpu", num_pages=8)
    assert llm.config.eos_token_ids == {7, 8}
    # every request stops at them: a Sequence carries the ids its stop_reason reads
    request_id = llm.add_request([1, 2, 3], mm.SamplingParams(max_tokens=4))
    assert llm._active[request_id].eos_token_ids == {7, 8}
