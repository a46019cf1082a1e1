"""GPU checks: the real FlashInfer kernels against the torch backend, CUDA graphs against eager.
Skipped, with the reason, on machines without CUDA or FlashInfer (scripts/gpu_check.sh runs
them on a GPU machine).

Engine outputs are compared token by token with the torch engine *fed the FlashInfer engine's
own tokens* (teacher forcing): for every decode position k of a request, the torch engine
prefills prompt + tokens[:k] and gives its greedy token and log-probability there. In bfloat16
two correct kernels can round a near-tie the other way; forcing keeps one such tie from
changing everything after it, so every position is compared. Where the tokens differ, the two
log-probabilities must still agree (it was a near-tie), and few may differ.
"""

from __future__ import annotations

import pytest
import torch
from engine_runs import record_replays
from test_engine_attention import STEPS, check_backend

import minimodel as mm
from minimodel.engine import LLM, FlashInferBackend, KVCache, TorchBackend, build_metadata
from minimodel.engine.flashinfer_env import flashinfer_status

FLASHINFER_OK, WHY = flashinfer_status("cuda")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(not FLASHINFER_OK, reason=f"FlashInfer unusable: {WHY}"),
]

# Engine-level models: head_dim 128 as in Qwen3. Ratio 2 is Qwen3-0.6B/1.7B's (16/8 heads):
# FlashInfer's CUDA-core decode. Ratio 4 and 8 take the tensor-core decode.
SHAPES = {2: dict(num_attention_heads=16, num_key_value_heads=8),
          4: dict(num_attention_heads=8, num_key_value_heads=2),
          8: dict(num_attention_heads=16, num_key_value_heads=2)}
BASE = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, head_dim=128,
            tie_word_embeddings=True, max_position_embeddings=8192)
# |logprob(FlashInfer) - logprob(torch)| at every position, and the share of positions whose
# greedy tokens may differ (near-ties only).
LOGPROB_ATOL = {torch.bfloat16: 0.1, torch.float16: 0.03}
MAX_DIFFERENT_TOKENS = 0.1


def gpu_checkpoint(small_checkpoint, ratio: int):
    return small_checkpoint(**SHAPES[ratio], **BASE)


def greedy(n: int) -> mm.SamplingParams:
    return mm.SamplingParams(temperature=0.0, max_new_tokens=n, logprobs=True)


def prompts_and_params(n: int = 16, seed: int = 0):
    """Mixed prompt lengths; request i asks for 2 + i tokens, so that decode batches shrink
    one request per step: every captured graph size replays, exact and padded."""
    g = torch.Generator().manual_seed(seed)
    lengths = [1, 37, 5, 1, 90, 16, 3, 60, 9, 2, 25, 7, 44, 1, 12, 30][:n]
    prompts = [torch.randint(0, 512, (m,), generator=g).tolist() for m in lengths]
    return prompts, [greedy(2 + i) for i in range(n)]


def torch_forced(folder, prompts, outs, dtype) -> list[list[tuple[int, float]]]:
    """(greedy token, logprob) of the torch engine at every position of every output, given
    the output's own tokens before that position."""
    llm = LLM(folder, device="cuda", dtype=dtype, attention_backend="torch", enforce_eager=True,
              num_pages=8192, max_num_seqs=256, skip_tokenizer_init=True,
              enable_prefix_caching=False)  # every forced prompt computed from its first token
    forced = [(i, p + o.token_ids[:k]) for i, (p, o) in enumerate(zip(prompts, outs))
              for k in range(len(o.token_ids))]
    res = llm.generate([f for _, f in forced], greedy(1))
    per_request: list[list[tuple[int, float]]] = [[] for _ in prompts]
    for (i, _), r in zip(forced, res, strict=True):
        per_request[i].append((r.token_ids[0], r.logprobs[0]))
    return per_request


def assert_close_to_torch(folder, prompts, outs, dtype) -> None:
    want = torch_forced(folder, prompts, outs, dtype)
    differ = total = 0
    worst = 0.0
    for i, (o, w) in enumerate(zip(outs, want, strict=True)):
        assert len(o.token_ids) == len(w)
        for k, (tok, lp) in enumerate(zip(o.token_ids, o.logprobs, strict=True)):
            diff = abs(lp - w[k][1])
            worst = max(worst, diff)
            assert diff <= LOGPROB_ATOL[dtype], (
                f"request {i}, token {k}: logprob {lp:.4f} vs torch {w[k][1]:.4f}")
            differ += tok != w[k][0]
            total += 1
    assert differ <= MAX_DIFFERENT_TOKENS * total, f"{differ}/{total} greedy tokens differ"
    print(f"{total} tokens, {differ} differ (near-ties), max |dlogprob| {worst:.2e}")


# --- the backend alone ------------------------------------------------------------------------

@pytest.mark.parametrize("page_size", [1, 3, 16])
@pytest.mark.parametrize("steps", sorted(STEPS))
@pytest.mark.parametrize("heads", [(4, 4), (8, 2), (4, 1), (16, 8)])
def test_flashinfer_matches_dense_attention(page_size, steps, heads):
    check_backend(FlashInferBackend, page_size, STEPS[steps], Hq=heads[0], Hkv=heads[1], D=128,
                  dtype=torch.bfloat16, device="cuda", atol=3e-2)


@pytest.mark.parametrize("graph_wrapper", [False, True], ids=["eager", "graph-wrapper"])
@pytest.mark.parametrize("heads", [(16, 8), (16, 2)], ids=["cuda-core", "tensor-core"])
@pytest.mark.parametrize("page_size", [1, 16])
def test_flashinfer_equals_torch_backend_on_the_same_metadata(page_size, heads, graph_wrapper):
    """Prefill, chunk and decode in one batch; then a pure decode batch with contexts of up to
    6000 tokens next to short ones, long enough for FlashInfer to split the KV (split-KV)."""
    Hq, Hkv = heads
    cfg = mm.Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=Hq, num_key_value_heads=Hkv, head_dim=128)
    g = torch.Generator(device="cuda").manual_seed(0)
    batches = [([1, 30, 77, 200], [1, 30, 5, 1]), ([6000, 2500, 1, 300], [1, 1, 1, 1])]
    for kv_lens, q_lens in batches:
        tables, start = [], 0
        for n in kv_lens:
            tables.append(list(range(start, start + -(-n // page_size))))
            start += len(tables[-1])
        outs = []
        for cls in (TorchBackend, FlashInferBackend):
            cache = KVCache(cfg, start + 1, page_size, torch.bfloat16, "cuda")
            for pool in cache.pools:  # the same history in both pools
                pool.copy_(torch.randn(pool.shape, generator=g.manual_seed(1), device="cuda"))
            meta = build_metadata(tables, kv_lens, q_lens, page_size, "cuda")
            q = torch.randn(meta.num_tokens, Hq, 128, generator=g.manual_seed(2), device="cuda")
            k = torch.randn(meta.num_tokens, Hkv, 128, generator=g.manual_seed(3), device="cuda")
            backend = cls(cache, Hq, torch.bfloat16)
            if cls is FlashInferBackend and graph_wrapper and meta.is_decode:
                B = meta.num_requests
                wrapper = backend.make_decode_wrapper({
                    "kv_indptr": torch.zeros(B + 1, dtype=torch.int32, device="cuda"),
                    "kv_indices": torch.zeros(start + B, dtype=torch.int32, device="cuda"),
                    "kv_last_page_len": torch.zeros(B, dtype=torch.int32, device="cuda"),
                })
                backend.plan(meta, decode_wrapper=wrapper)
            else:
                backend.plan(meta)
            outs.append(backend.forward(q.bfloat16(), k.bfloat16(), k.bfloat16(), 0).float())
        diff = (outs[0] - outs[1]).abs().max().item()
        assert diff < 3e-2, f"kv_lens {kv_lens}: max diff {diff:.2e}"


# --- the engine -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("page_size", [1, 3, 16])
@pytest.mark.parametrize("ratio", [2, 8])
def test_flashinfer_graphs_engine_close_to_torch_engine(small_checkpoint, ratio, page_size,
                                                        dtype):
    """Every decode token and logprob, under CUDA graphs, with chunked prefill (a budget of 64
    tokens a step) and every captured batch size replayed, exact and padded."""
    folder = gpu_checkpoint(small_checkpoint, ratio)
    prompts, params = prompts_and_params()
    llm = LLM(folder, device="cuda", dtype=dtype, attention_backend="flashinfer",
              page_size=page_size, num_pages=2048 // page_size, max_num_seqs=16,
              max_num_batched_tokens=64, skip_tokenizer_init=True)
    assert llm.cuda_graphs_reason.startswith("on")
    replays = record_replays(llm)
    outs = llm.generate(prompts, params)
    sizes = llm.runner.graphs.batch_sizes
    assert {bs for B, bs in replays if B == bs} == set(sizes)
    assert {bs for B, bs in replays if B < bs} == {4, 8, 16}
    assert llm.allocator.num_free == llm.allocator.num_pages
    assert_close_to_torch(folder, prompts, outs, dtype)


@pytest.mark.parametrize("ratio", [2, 8])
def test_split_kv_decode_on_long_contexts(small_checkpoint, ratio):
    """Contexts of 6000 and 3000 tokens decoded in small batches: FlashInfer splits each
    request's KV over several blocks and merges them (the workspace); graphs on."""
    folder = gpu_checkpoint(small_checkpoint, ratio)
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, 512, (n,), generator=g).tolist() for n in (6000, 3000, 7)]
    llm = LLM(folder, device="cuda", dtype=torch.bfloat16, attention_backend="flashinfer",
              page_size=16, num_pages=1024, max_num_seqs=4, skip_tokenizer_init=True)
    outs = llm.generate(prompts, greedy(12))
    assert_close_to_torch(folder, prompts, outs, torch.bfloat16)


@pytest.mark.parametrize("ratio", [2, 8])
def test_cuda_graphs_equal_eager_on_logprobs(small_checkpoint, ratio):
    """Graphs replay the eager kernels: the same tokens, logprobs within rounding."""
    folder = gpu_checkpoint(small_checkpoint, ratio)
    prompts, params = prompts_and_params(12, seed=2)
    kw = dict(device="cuda", dtype=torch.bfloat16, attention_backend="flashinfer",
              num_pages=256, max_num_seqs=8, skip_tokenizer_init=True)
    graphs = LLM(folder, **kw)
    assert graphs.cuda_graphs_reason.startswith("on")
    g_outs = graphs.generate(prompts, params)
    e_outs = LLM(folder, enforce_eager=True, **kw).generate(prompts, params)
    same = sum(a.token_ids == b.token_ids for a, b in zip(g_outs, e_outs))
    assert same >= len(prompts) - 1, f"only {same}/{len(prompts)} requests agree"
    for a, b in zip(g_outs, e_outs):
        n = next((k for k, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y),
                 len(a.token_ids))
        diff = max((abs(x - y) for x, y in zip(a.logprobs[:n + 1], b.logprobs[:n + 1])),
                   default=0.0)
        assert diff <= 2e-2, f"logprobs differ by {diff:.2e} before the first different token"


def test_preemption_under_graphs(small_checkpoint):
    folder = gpu_checkpoint(small_checkpoint, 2)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 512, (n,), generator=g).tolist() for n in (20, 3, 25, 9, 17, 30)]
    llm = LLM(folder, device="cuda", dtype=torch.bfloat16, attention_backend="flashinfer",
              page_size=4, num_pages=24, max_num_seqs=8, skip_tokenizer_init=True)
    replays = record_replays(llm)
    outs = llm.generate(prompts, greedy(24))
    assert sum(o.metrics.num_preemptions for o in outs) > 0, "nothing was preempted"
    assert replays and llm.allocator.num_free == 24
    assert_close_to_torch(folder, prompts, outs, torch.bfloat16)


def test_what_flashinfer_cannot_run_falls_back_on_cuda(small_checkpoint):
    """tiny (head_dim 32) and float32 run on the torch backend, saying why; asked for
    explicitly, FlashInfer is a clear error, not a failure inside a kernel build."""
    tiny = LLM("tiny", device="cuda")
    assert tiny.backend_name == "torch" and "head_dim 32" in tiny.backend_reason
    out = tiny.generate(["Hello"], mm.SamplingParams(temperature=0.0, max_new_tokens=4))[0]
    assert len(out.token_ids) == 4
    folder = gpu_checkpoint(small_checkpoint, 2)
    f32 = LLM(folder, device="cuda", dtype="float32", num_pages=64, skip_tokenizer_init=True)
    assert f32.backend_name == "torch" and "float32 has no FlashInfer kernels" in \
        f32.backend_reason and f32.cuda_graphs_reason.startswith("off")
    with pytest.raises(ValueError, match="float32"):
        LLM(folder, device="cuda", dtype="float32", attention_backend="flashinfer",
            num_pages=64, skip_tokenizer_init=True)
    assert LLM(folder, device="cuda", num_pages=64,
               skip_tokenizer_init=True).backend_name == "flashinfer"


@pytest.mark.parametrize("drafter", ["ngram", "self"])
def test_speculative_decoding_through_flashinfer(small_checkpoint, drafter):
    """Verify steps (1 + k new tokens per request over the paged cache) through FlashInfer's
    prefill kernels, plain decode steps through the graphs: each output close to the torch
    engine's without speculation, every page back."""
    folder = gpu_checkpoint(small_checkpoint, 8)
    g = torch.Generator().manual_seed(11)
    loop = torch.randint(0, 512, (6,), generator=g).tolist()
    prompts = [loop * 4, torch.randint(0, 512, (19,), generator=g).tolist(), loop * 2 + [7]]
    llm = LLM(folder, device="cuda", dtype=torch.bfloat16, attention_backend="flashinfer",
              page_size=4, num_pages=512, max_num_seqs=8, skip_tokenizer_init=True,
              speculative_model="ngram" if drafter == "ngram" else str(folder),
              num_speculative_tokens=3)
    outs = llm.generate(prompts, greedy(16))
    assert llm.allocator.num_free == llm.allocator.num_pages
    assert llm.spec_decode_stats()["draft_tokens"] > 0
    assert_close_to_torch(folder, prompts, outs, torch.bfloat16)


@pytest.mark.parametrize("page_size", [1, 16])
def test_prefix_caching_under_graphs(small_checkpoint, page_size):
    """Requests that share a system prompt, in two waves, through FlashInfer and the decode
    graphs: shared page ids in paged_kv_indices, each output close to the torch engine's
    without a cache."""
    folder = gpu_checkpoint(small_checkpoint, 8)
    g = torch.Generator().manual_seed(7)
    system = torch.randint(0, 512, (70,), generator=g).tolist()
    prompts = [system + torch.randint(0, 512, (n,), generator=g).tolist()
               for n in (3, 17, 1, 40, 9, 25)]
    llm = LLM(folder, device="cuda", dtype=torch.bfloat16, attention_backend="flashinfer",
              page_size=page_size, num_pages=4096 // page_size, max_num_seqs=8,
              skip_tokenizer_init=True)
    replays = record_replays(llm)
    outs = llm.generate(prompts[:3], greedy(12)) + llm.generate(prompts[3:], greedy(12))
    assert replays and llm.allocator.num_free == llm.allocator.num_pages
    assert sum(o.metrics.cached_tokens for o in outs) >= 3 * (70 // page_size) * page_size
    assert_close_to_torch(folder, prompts, outs, torch.bfloat16)
