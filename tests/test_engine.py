"""The engine against transformers and the reference: same tokens, same log-probabilities.

Configs cover GQA ratios 1, 2, 4 and MQA (tests/checkpoints.py); page sizes 1, 3 and 16;
batches that mix one-token and long prompts; requests that arrive while others run.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import transformers
from checkpoints import CONFIGS

import minimodel as mm
from minimodel.engine import LLM

PARITY_CONFIGS = ["mha-untied-theta1e4", "gqa2-tied-hd!=C", "gqa4-untied", "mqa-tied-theta1e4"]
NEW_TOKENS = 12


def make_prompts(vocab_size: int, lengths: list[int], seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, (n,), generator=g).tolist() for n in lengths]


PROMPT_LENGTHS = [1, 37, 5, 1, 90, 16]  # one-token prompts next to long ones


def hf_greedy(hf: transformers.PreTrainedModel, prompt: list[int], n: int) -> list[int]:
    """transformers' greedy continuation of one prompt (no padding): the new tokens only."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                          do_sample=False, pad_token_id=0)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module", params=PARITY_CONFIGS)
def parity(request, small_checkpoint):
    """(folder, prompts, transformers' greedy outputs) for one config."""
    folder = small_checkpoint(**CONFIGS[request.param])
    hf = transformers.Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    prompts = make_prompts(512, PROMPT_LENGTHS)
    return folder, prompts, [hf_greedy(hf, p, NEW_TOKENS) for p in prompts]


def greedy(n: int = NEW_TOKENS, **kw) -> mm.SamplingParams:
    return mm.SamplingParams(temperature=0.0, max_new_tokens=n, **kw)


@pytest.mark.parametrize("page_size", [1, 3, 16])
def test_greedy_matches_transformers(parity, page_size):
    folder, prompts, expected = parity
    llm = LLM(folder, page_size=page_size, num_pages=2048 // page_size, skip_tokenizer_init=True)
    outs = llm.generate(prompts, greedy())
    for i, (out, want) in enumerate(zip(outs, expected, strict=True)):
        assert out.token_ids == want, f"prompt {i} (len {len(prompts[i])}) differs"
        assert out.finish_reason == "length"
    assert llm.allocator.num_free == llm.allocator.num_pages


def test_chunked_prefill_matches_transformers(parity):
    """A token budget of 7 splits every long prompt over several steps."""
    folder, prompts, expected = parity
    llm = LLM(folder, page_size=4, num_pages=512, max_num_batched_tokens=7,
              skip_tokenizer_init=True)
    outs = llm.generate(prompts, greedy())
    assert [o.token_ids for o in outs] == expected


def test_requests_arriving_mid_run(parity):
    folder, prompts, expected = parity
    llm = LLM(folder, page_size=3, num_pages=512, skip_tokenizer_init=True)
    done = {}
    ids = [llm.add_request(prompts[0], greedy())]
    for _ in range(3):
        done.update({o.request_id: o for o in llm.step()})
    ids += [llm.add_request(p, greedy()) for p in prompts[1:3]]  # join a decoding batch
    for _ in range(5):
        done.update({o.request_id: o for o in llm.step()})
    ids += [llm.add_request(p, greedy()) for p in prompts[3:]]
    while llm.has_unfinished_requests():
        done.update({o.request_id: o for o in llm.step()})
    assert [done[i].token_ids for i in ids] == expected


@pytest.mark.parametrize("name", ["gqa2-tied-hd!=C", "gqa2-bias-3layers"])
def test_logprobs_match_reference(small_checkpoint, name):
    folder = small_checkpoint(**CONFIGS[name])
    ref = mm.reference.Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32)
    prompts = make_prompts(512, [1, 23, 60], seed=3)
    llm = LLM(folder, page_size=5, num_pages=256, skip_tokenizer_init=True)
    params = mm.SamplingParams(temperature=0.9, seed=11, max_new_tokens=10, logprobs=True)
    for prompt, out in zip(prompts, llm.generate(prompts, params), strict=True):
        full = torch.tensor([prompt + out.token_ids])
        logp = ref(full)[0].log_softmax(-1)  # [T, V]
        rows = torch.arange(len(prompt) - 1, full.shape[1] - 1)
        want = logp[rows, torch.tensor(out.token_ids)]
        got = torch.tensor(out.logprobs)
        assert got.shape == want.shape
        assert (got - want).abs().max().item() <= 1e-4


def test_eos_stops_and_is_included(small_checkpoint, tmp_path):
    """Make the 4th greedy token the EOS: engine and transformers both stop right after it."""
    src = small_checkpoint(**CONFIGS["gqa4-untied"])
    prompt = make_prompts(512, [9], seed=5)[0]
    free = LLM(src, num_pages=64, skip_tokenizer_init=True).generate([prompt], greedy(20))[0]
    eos = next(t for i, t in enumerate(free.token_ids) if i >= 3 and t not in free.token_ids[:i])
    cut = free.token_ids.index(eos) + 1
    folder = tmp_path / "with-eos"
    shutil.copytree(src, folder)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))

    llm = LLM(folder, num_pages=64, skip_tokenizer_init=True)
    out = llm.generate([prompt], greedy(20))[0]
    assert out.token_ids == free.token_ids[:cut] and out.finish_reason == "stop"
    ignored = llm.generate([prompt], greedy(20, ignore_eos=True))[0]
    assert ignored.token_ids == free.token_ids and ignored.finish_reason == "length"
    hf = transformers.Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    assert hf_greedy(hf, prompt, 20) == out.token_ids


def test_context_length_ends_with_length(small_checkpoint):
    folder = small_checkpoint(**CONFIGS["gqa2-tied-hd!=C"])
    llm = LLM(folder, num_pages=64, max_model_len=20, skip_tokenizer_init=True)
    out = llm.generate([list(range(15))], greedy(100))[0]
    assert len(out.token_ids) == 5 and out.finish_reason == "length"


def test_metrics_are_consistent(small_checkpoint):
    folder = small_checkpoint(**CONFIGS["gqa2-tied-hd!=C"])
    llm = LLM(folder, num_pages=64, skip_tokenizer_init=True)
    out = llm.generate([list(range(30))], greedy(8))[0]
    m = out.metrics
    assert (m.prompt_tokens, m.generated_tokens) == (30, 8)
    assert 0 < m.ttft_s <= m.e2e_s and m.tpot_s > 0
    assert m.ttft_s + 7 * m.tpot_s == pytest.approx(m.e2e_s, rel=1e-6)
