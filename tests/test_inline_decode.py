"""The engine's inlined CPU decode step (engine/lean_decode.py: InlineDecoder) is the model's
decode forward, bit for bit: the same hidden states and the same K/V in the same pool slots,
for one request and for several of different lengths across page boundaries, on tiny, bard
and shapes they lack (q/k/v biases, one query head per KV head, eight per KV head, untied
embeddings), in float32 and bfloat16, with every product on F.linear or on a bound kernel.
Through the engine, generation with it equals generation without it, token for token and
log-probability for log-probability."""

from __future__ import annotations

import pytest
import torch
from checkpoints import DECODE_SHAPES, decode_shape_folders, prefilled_twins

from minimodel.engine import LLM
from minimodel.engine.attention import TorchBackend, build_metadata, decode_metadata
from minimodel.engine.kv_cache import KVCache
from minimodel.engine.lean_decode import InlineDecoder
from minimodel.engine.quantization import linear_layers
from minimodel.engine.speculative import load_language_model
from minimodel.kernels.matmul import ROW_BUCKETS, LinearKernels, candidates
from minimodel.ops import rope_cos_sin
from minimodel.sampling import SamplingParams

PAGE = 4
SHAPES = DECODE_SHAPES


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return {"tiny": "tiny", "bard": "bard", **decode_shape_folders(tmp_path_factory)}


def bind(model, name: str) -> None:
    """Every layer's product on formulation `name` at every row bucket (where it can run)."""
    for _, module in linear_layers(model):
        if name in candidates(module.weight):
            module.kernels = LinearKernels(module.weight, dict.fromkeys(ROW_BUCKETS, name))


def pools(model, num_pages, dtype):
    heads, kv_heads = model.num_local_heads
    cache = KVCache(model.cfg, num_pages, PAGE, dtype, "cpu", num_kv_heads=kv_heads)
    return cache, TorchBackend(cache, heads, dtype)


CASES = [("tiny", torch.float32, "linear", lens) for lens in ([9], [1], [8], [5, 12, 1],
                                                               [3, 4, 16, 7])]
CASES += [("bard", dtype, kernel, lens) for dtype in (torch.float32, torch.bfloat16)
          for kernel in ("linear", "mkldnn", "matmul_t") for lens in ([9], [5, 12, 1])]
CASES += [(name, torch.float32, "linear", lens) for name in SHAPES for lens in ([6], [5, 12, 1])]
CASES += [(name, torch.bfloat16, "mkldnn", lens) for name in ("tiny", "bias", "eight-per-kv-head")
          for lens in ([6], [5, 12])]


@pytest.mark.parametrize("name, dtype, kernel, prompt_lens", CASES)
@torch.inference_mode()
def test_inline_decode_is_the_models_decode_step_bit_for_bit(folders, name, dtype, kernel,
                                                            prompt_lens):
    model, _ = load_language_model(folders[name], dtype=dtype, max_positions=128)
    bind(model, kernel)
    gen = torch.Generator().manual_seed(sum(prompt_lens))
    vocab = model.cfg.vocab_size
    # two caches with the same pages: one decoded by the model, one by the inlined step
    caches, tables = prefilled_twins(model, prompt_lens, dtype, gen, PAGE)
    inline = InlineDecoder(model, caches[1][1])
    lens = list(prompt_lens)
    for _ in range(4):  # four decode steps, a token per request
        ids = torch.randint(0, vocab, (len(lens),), generator=gen)
        lens = [n + 1 for n in lens]
        md = decode_metadata(tables, lens, PAGE)
        caches[0][1].plan(md)
        want = model(ids, md.positions, caches[0][1])
        got = inline(ids, md)
        assert got.dtype == want.dtype
        assert torch.equal(got, want), (got - want).abs().max()
        for a, b in zip(caches[0][0].pools, caches[1][0].pools, strict=True):
            assert torch.equal(a, b)
    assert caches[1][0].pools[0].abs().sum() > 0


def test_inline_decode_refuses_a_prefill_and_leaves_the_pool_intact():
    model, _ = load_language_model("tiny", max_positions=64)
    cache, backend = pools(model, 8, torch.float32)
    before = [p.clone() for p in cache.pools]
    md = build_metadata([[0, 1]], [5], [5], PAGE)
    with pytest.raises(ValueError, match="decode steps only"):
        InlineDecoder(model, backend)(torch.arange(5), md)
    assert all(torch.equal(a, b) for a, b in zip(before, cache.pools, strict=True))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_engine_generates_the_same_with_and_without_the_inlined_step(dtype):
    """Greedy, seeded sampling and logprobs: the same tokens and the same log-probabilities
    whether decode steps run the inlined step or the model (prefills run the model in both)."""
    def engine():  # a fresh engine each time: no prefix cached by the other run
        return LLM("tiny", dtype=dtype, max_model_len=256, num_pages=64, page_size=16,
                   tune_kernels=False)

    prompts = [[5, 9, 2, 7] * k for k in (1, 5, 9)]
    params = [SamplingParams(temperature=0.0, max_tokens=20, logprobs=2),
              SamplingParams(temperature=0.8, top_p=0.9, seed=3, max_tokens=20, logprobs=2),
              SamplingParams(temperature=1.0, top_k=20, seed=11, max_tokens=20, logprobs=2)]
    llm, calls = engine(), []
    inline = llm.runner.inline
    assert inline is not None

    def counted(ids, metadata):
        calls.append(len(metadata.kv_lens))
        return inline(ids, metadata)

    llm.runner.inline = counted
    with_inline = llm.generate(prompts, params, use_tqdm=False)
    assert calls and max(calls) == 3  # decode steps of all three requests ran inlined
    plain = engine()
    plain.runner.inline = None
    without = plain.generate(prompts, params, use_tqdm=False)
    for a, b in zip(with_inline, without, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == b.logprobs
        assert a.top_logprobs == b.top_logprobs


@torch.inference_mode()
def test_inline_decode_reads_the_models_weights_as_they_are_at_each_step():
    """Weights changed in place after the decoder was built (through .data, which autograd's
    version counter does not see) and RoPE tables rebuilt: the next step uses them, as the
    model does."""
    model, _ = load_language_model("tiny", max_positions=128)
    gen = torch.Generator().manual_seed(0)
    caches, tables = prefilled_twins(model, [5, 9], torch.float32, gen, PAGE)
    inline = InlineDecoder(model, caches[1][1])
    layers = model.model.layers
    for p in (layers[0].self_attn.q_norm.weight, layers[-1].self_attn.k_norm.weight,
              layers[0].input_layernorm.weight, layers[-1].post_attention_layernorm.weight,
              model.model.norm.weight, model.model.embed_tokens.weight):
        p.data.mul_(torch.rand(p.shape, generator=gen) + 0.5)
    model.rope_cos, model.rope_sin = rope_cos_sin(torch.arange(128), model.cfg.head_dim,
                                                  model.cfg.rope_theta / 7)
    ids, lens = torch.tensor([3, 11]), [6, 10]
    md = decode_metadata(tables, lens, PAGE)
    caches[0][1].plan(md)
    assert torch.equal(inline(ids, md), model(ids, md.positions, caches[0][1]))
