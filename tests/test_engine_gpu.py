"""GPU checks: FlashInfer against the torch backend on the same metadata, CUDA graphs against
eager. Skipped, with the reason, on machines without CUDA or FlashInfer."""

from __future__ import annotations

import pytest
import torch
from test_engine_attention import STEPS, check_backend

import minimodel as mm
from minimodel.engine import LLM, FlashInferBackend, KVCache, TorchBackend, build_metadata
from minimodel.engine.attention import flashinfer_status

FLASHINFER_OK, WHY = flashinfer_status("cuda")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(not FLASHINFER_OK, reason=f"FlashInfer unusable: {WHY}"),
]

# FlashInfer's kernels take head_dim 64/128/256 and fp16/bf16; the engine-level checks use a
# small model with head_dim 128.
GPU_MODEL = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=128,
                 intermediate_size=256, tie_word_embeddings=True)


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("steps", sorted(STEPS))
@pytest.mark.parametrize("heads", [(4, 4), (8, 2), (4, 1)])
def test_flashinfer_matches_dense_attention(page_size, steps, heads):
    check_backend(FlashInferBackend, page_size, STEPS[steps], Hq=heads[0], Hkv=heads[1], D=128,
                  dtype=torch.bfloat16, device="cuda", atol=3e-2)


@pytest.mark.parametrize("page_size", [1, 16])
def test_flashinfer_equals_torch_backend_on_the_same_metadata(page_size):
    cfg = mm.Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=8, num_key_value_heads=2, head_dim=128)
    g = torch.Generator(device="cuda").manual_seed(0)
    kv_lens, q_lens = [1, 30, 77, 200], [1, 30, 5, 1]  # prefill, chunk and decode in one batch
    tables = [list(range(s, s + -(-n // page_size)))
              for s, n in zip([0, 300, 600, 900], kv_lens, strict=True)]
    outs = []
    for cls in (TorchBackend, FlashInferBackend):
        cache = KVCache(cfg, 1200, page_size, torch.bfloat16, "cuda")
        for pool in cache.pools:  # the same history in both pools
            pool.copy_(torch.randn(pool.shape, generator=g.manual_seed(1), device="cuda"))
        meta = build_metadata(tables, kv_lens, q_lens, page_size, "cuda")
        q = torch.randn(meta.num_tokens, 8, 128, generator=g.manual_seed(2), device="cuda")
        k = torch.randn(meta.num_tokens, 2, 128, generator=g.manual_seed(3), device="cuda")
        backend = cls(cache, 8, torch.bfloat16)
        backend.plan(meta)
        outs.append(backend.forward(q.bfloat16(), k.bfloat16(), k.bfloat16(), 0).float())
    assert (outs[0] - outs[1]).abs().max().item() < 3e-2


def test_cuda_graphs_equal_eager(small_checkpoint):
    folder = small_checkpoint(**GPU_MODEL)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 512, (n,), generator=g).tolist() for n in (1, 9, 40, 3, 17)]
    sp = mm.SamplingParams(temperature=0.0, max_new_tokens=16)
    kw = dict(device="cuda", dtype=torch.bfloat16, attention_backend="flashinfer",
              num_pages=256, max_num_seqs=8, skip_tokenizer_init=True)
    graphs = LLM(folder, **kw)
    assert graphs.cuda_graphs_reason.startswith("on")
    eager = LLM(folder, enforce_eager=True, **kw)
    assert [o.token_ids for o in graphs.generate(prompts, sp)] == \
        [o.token_ids for o in eager.generate(prompts, sp)]


def test_flashinfer_engine_close_to_torch_engine(small_checkpoint):
    folder = small_checkpoint(**GPU_MODEL)
    prompt = list(range(1, 60))
    sp = mm.SamplingParams(temperature=0.0, max_new_tokens=4, logprobs=True)
    kw = dict(device="cuda", dtype=torch.bfloat16, num_pages=64, skip_tokenizer_init=True,
              enforce_eager=True)
    fi = LLM(folder, attention_backend="flashinfer", **kw).generate([prompt], sp)[0]
    th = LLM(folder, attention_backend="torch", **kw).generate([prompt], sp)[0]
    assert fi.token_ids[0] == th.token_ids[0]
    assert abs(fi.logprobs[0] - th.logprobs[0]) < 5e-2
