"""The draft model's lean decode step (engine/lean_decode.py) computes what the engine's model
computes: the same hidden states within float rounding and the same K/V in the same pool
slots, for one request (one token, or several as a draft catching up) and for several of
different lengths, across page boundaries."""

from __future__ import annotations

import pytest
import torch

from minimodel.engine.attention import TorchBackend, build_metadata
from minimodel.engine.kv_cache import KVCache
from minimodel.engine.lean_decode import LeanDecoder
from minimodel.engine.speculative import load_language_model

PAGE = 4


def pools(model, num_pages):
    heads, kv_heads = model.num_local_heads
    cache = KVCache(model.cfg, num_pages, PAGE, torch.float32, "cpu", num_kv_heads=kv_heads)
    return cache, TorchBackend(cache, heads, torch.float32)


@pytest.mark.parametrize("name", ["tiny", "bard-draft"])
@pytest.mark.parametrize("prompt_lens", [[9], [1], [8], [5, 12, 1], [3, 4, 16, 7]])
@torch.inference_mode()
def test_lean_decode_is_the_models_decode_step(name, prompt_lens):
    model, _ = load_language_model(name, max_positions=128)
    gen = torch.Generator().manual_seed(sum(prompt_lens))
    vocab = model.cfg.vocab_size
    # two caches with the same pages: one decoded by the model, one by the lean step
    caches = [pools(model, 64), pools(model, 64)]
    tables, start = [], 3  # pages out of order, as a pool lends them
    for n in prompt_lens:
        need = -(-(n + 5) // PAGE)
        tables.append([(start + 5 * j) % 64 for j in range(need)])
        start += 1
    assert len({p for t in tables for p in t}) == sum(map(len, tables))  # no page shared
    prompts = [torch.randint(0, vocab, (n,), generator=gen) for n in prompt_lens]
    for _, backend in caches:  # the same prefill into both
        md = build_metadata(tables, prompt_lens, prompt_lens, PAGE)
        backend.plan(md)
        model(torch.cat(prompts), md.positions, backend)
    lean = LeanDecoder(model, caches[1][0])
    lens = list(prompt_lens)
    # three decode steps, each a token per request; one request may bring three (catching up)
    for new in (1, 3 if len(lens) == 1 else 1, 1):
        ids = torch.randint(0, vocab, (len(lens) * new,), generator=gen)
        lens = [n + new for n in lens]
        md = build_metadata(tables, lens, [new] * len(lens), PAGE)
        caches[0][1].plan(md)
        want = model(ids, md.positions, caches[0][1])
        got = lean.decode(ids, tables, lens)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        for a, b in zip(caches[0][0].pools, caches[1][0].pools, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        assert caches[1][0].pools[0].abs().sum() > 0


def test_lean_decode_refuses_a_length_its_pages_cannot_hold():
    model, _ = load_language_model("tiny", max_positions=64)
    cache, _ = pools(model, 8)
    lean = LeanDecoder(model, cache)
    before = [p.clone() for p in cache.pools]
    with pytest.raises(ValueError, match="kv_len"):
        lean.decode(torch.tensor([1]), [[0, 1]], [9])
    assert all(torch.equal(a, b) for a, b in zip(before, cache.pools, strict=True))


def test_lean_decode_refuses_several_tokens_for_several_requests():
    model, _ = load_language_model("tiny", max_positions=64)
    cache, _ = pools(model, 8)
    with pytest.raises(ValueError, match="one each, or all of one"):
        LeanDecoder(model, cache).decode(torch.tensor([1, 2, 3]), [[0], [1]], [2, 1])
