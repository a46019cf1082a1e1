"""The draft model's lean decode step (engine/lean_decode.py) computes what the engine's model
computes: the same hidden states within float rounding and the same K/V in the same pool
slots, for one request (one token, or several as a draft catching up) and for several of
different lengths, across page boundaries; for bard-draft, tiny, and shapes they lack (q/k/v
biases, one query head per KV head, eight per KV head, untied embeddings), in float32 and
bfloat16."""

from __future__ import annotations

import pytest
import torch
from checkpoints import DECODE_SHAPES, decode_shape_folders, prefilled_twins

from minimodel.engine.attention import TorchBackend, build_metadata
from minimodel.engine.kv_cache import KVCache
from minimodel.engine.lean_decode import LeanDecoder
from minimodel.engine.speculative import load_language_model

PAGE = 4
SHAPES = DECODE_SHAPES


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return {"tiny": "tiny", "bard-draft": "bard-draft", **decode_shape_folders(tmp_path_factory)}


def pools(model, num_pages, dtype=torch.float32):
    heads, kv_heads = model.num_local_heads
    cache = KVCache(model.cfg, num_pages, PAGE, dtype, "cpu", num_kv_heads=kv_heads)
    return cache, TorchBackend(cache, heads, dtype)


CASES = [("tiny", torch.float32, lens) for lens in ([9], [1], [8], [5, 12, 1], [3, 4, 16, 7])]
CASES += [("bard-draft", torch.float32, [9]), ("bard-draft", torch.float32, [5, 12, 1])]
CASES += [(name, torch.float32, lens) for name in SHAPES for lens in ([6], [5, 12, 1])]
CASES += [(name, torch.bfloat16, lens) for name in ("tiny", "bias") for lens in ([6], [5, 12])]


@pytest.mark.parametrize("name, dtype, prompt_lens", CASES)
@torch.inference_mode()
def test_lean_decode_is_the_models_decode_step(folders, name, dtype, prompt_lens):
    model, _ = load_language_model(folders[name], dtype=dtype, max_positions=128)
    gen = torch.Generator().manual_seed(sum(prompt_lens))
    vocab = model.cfg.vocab_size
    # bfloat16: the lean step rounds in other places (the weights carry sqrt(C) and the
    # softmax scale), so its values agree to bfloat16's precision, not float32's
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=0.05, atol=0.05)
    # two caches with the same pages: one decoded by the model, one by the lean step
    caches, tables = prefilled_twins(model, prompt_lens, dtype, gen, PAGE)
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
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, **tol)
        for a, b in zip(caches[0][0].pools, caches[1][0].pools, strict=True):
            torch.testing.assert_close(a, b, **tol)
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
