"""The GPU path on a CPU: the flashinfer backend and the CUDA-graph runner, through the test
stand-ins of tests/flashinfer_standin.py (FlashInfer's real signatures and rules, the torch
backend's math, graph capture that replays only what it recorded).

With them, `LLM(attention_backend="flashinfer")` with decode graphs must give the torch
backend's tokens and logprobs (float32, <= 1e-5) on mixed batches, chunked prefill, preemption,
page sizes 1/3/16 and GQA ratios 1/2/4, with every captured batch size replayed, exact and
padded. Then the checks of what the engine may ask of FlashInfer: dtype, head_dim, group size,
the padding page, the workspace, the compiler, the current device.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from engine_runs import record_replays, run_traced
from flashinfer_standin import (
    FlashInferRuleError,
    StandInDecode,
    StandInPrefill,
    install_flashinfer_standin,
    install_graph_standin,
)

import minimodel as mm
from minimodel.engine import LLM, FlashInferBackend, KVCache, build_metadata, flashinfer_env
from minimodel.engine.attention import decode_uses_tensor_cores
from minimodel.engine.cuda_graph import CUDAGraphRunner
from minimodel.engine.flashinfer_env import select_backend

# head_dim 64: a head dim FlashInfer has kernels for, so the stand-in's kernel limits hold.
MODEL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, head_dim=64,
             tie_word_embeddings=True)
GQA = {1: (2, 2), 2: (4, 2), 4: (8, 2)}  # ratio -> (num_attention_heads, num_key_value_heads)
CPU32 = dict(device="cpu", dtype=torch.float32, skip_tokenizer_init=True)


@pytest.fixture
def standin(monkeypatch):
    """FlashInfer and CUDA graphs on this CPU, with float32 "kernels" for exact comparisons."""
    graphs = install_graph_standin(monkeypatch)
    return install_flashinfer_standin(monkeypatch, float32=True), graphs


def checkpoint(small_checkpoint, ratio: int) -> Path:
    heads, kv_heads = GQA[ratio]
    return small_checkpoint(num_attention_heads=heads, num_key_value_heads=kv_heads, **MODEL)


def workload(n: int = 16, seed: int = 0) -> list[tuple[list[int], mm.SamplingParams]]:
    """n requests of mixed prompt lengths; request i asks for 2 + i tokens, so that decode
    batches shrink one request per step, n, n-1, ..., 1: every captured size, exact and padded.
    Most are greedy; every fourth samples with a seed. All ask for logprobs."""
    g = torch.Generator().manual_seed(seed)
    lengths = [1, 37, 5, 1, 90, 16, 3, 60, 9, 2, 25, 7, 44, 1, 12, 30][:n]
    reqs = []
    for i, length in enumerate(lengths):
        prompt = torch.randint(0, 512, (length,), generator=g).tolist()
        sample = i % 4 == 3
        reqs.append((prompt, mm.SamplingParams(
            temperature=0.8 if sample else 0.0, top_k=40 if sample else 0, seed=i,
            max_new_tokens=2 + i, logprobs=True)))
    return reqs


def assert_same_outputs(got: list[mm.RequestOutput], want: list[mm.RequestOutput]) -> None:
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.token_ids == b.token_ids, f"request {i}: tokens differ"
        diff = (torch.tensor(a.logprobs) - torch.tensor(b.logprobs)).abs().max().item()
        assert diff <= 1e-5, f"request {i}: logprobs differ by {diff:.2e}"
        assert a.finish_reason == b.finish_reason


@pytest.mark.parametrize("page_size", [1, 3, 16])
@pytest.mark.parametrize("ratio", sorted(GQA))
def test_flashinfer_with_graphs_equals_torch_backend(small_checkpoint, standin, ratio,
                                                     page_size):
    registry, graphs = standin
    folder = checkpoint(small_checkpoint, ratio)
    kw = dict(CPU32, page_size=page_size, num_pages=1024 // page_size, max_num_seqs=16,
              max_num_batched_tokens=64)  # the 90-token prompt is prefilled in chunks
    reqs = workload()
    want, _ = run_traced(LLM(folder, attention_backend="torch", **kw), reqs)
    llm = LLM(folder, attention_backend="flashinfer", **kw)
    assert llm.backend_name == "flashinfer" and llm.cuda_graphs_reason.startswith("on")
    replays = record_replays(llm)
    got, trace = run_traced(llm, reqs)
    assert_same_outputs(got, want)

    long_prompt = got[4].request_id  # 90 tokens, a budget of 64 per step
    assert sum(1 for b in trace if b is not None and b.is_prefill
               and any(s.request_id == long_prompt for s in b.seqs)) >= 2, "nothing chunked"
    sizes = llm.runner.graphs.batch_sizes
    assert sizes == [1, 2, 4, 8, 16]
    assert {bs for B, bs in replays if B == bs} == set(sizes), "a size never replayed exactly"
    assert {bs for B, bs in replays if B < bs} == {4, 8, 16}, "a size never replayed padded"
    decode_steps = sum(1 for b in trace if b is not None and not b.is_prefill)
    assert len(replays) == decode_steps, "a decode step ran outside the graphs"
    eager_decode = registry.of(StandInDecode, graph=False)
    assert len(eager_decode) == 1 and eager_decode[0].num_runs == 0
    assert all(g.replays > 0 for g in llm.runner.graphs.graphs.values())
    assert registry.of(StandInPrefill)[0].num_runs > 0
    assert llm.allocator.num_free == llm.allocator.num_pages


@pytest.mark.parametrize("page_size", [1, 3, 16])
def test_flashinfer_eager_equals_torch_backend(small_checkpoint, standin, page_size):
    """enforce_eager: the plain decode wrapper (replanned every step) instead of graphs."""
    registry, _ = standin
    folder = checkpoint(small_checkpoint, 2)
    kw = dict(CPU32, page_size=page_size, num_pages=1024 // page_size, max_num_batched_tokens=40)
    reqs = workload(8, seed=1)
    want, _ = run_traced(LLM(folder, attention_backend="torch", **kw), reqs)
    llm = LLM(folder, attention_backend="flashinfer", enforce_eager=True, **kw)
    assert llm.cuda_graphs_reason == "off: enforce_eager=True" and llm.runner.graphs is None
    got, _ = run_traced(llm, reqs)
    assert_same_outputs(got, want)
    assert registry.of(StandInDecode, graph=False)[0].num_runs > 0


@pytest.mark.parametrize("ratio", sorted(GQA))
def test_preemption_under_graphs_equals_torch_backend(small_checkpoint, standin, ratio):
    """24 pages for 6 requests that need 6 * 12 at the end: the newest are preempted and
    recomputed, decode batches shrink and grow again, all through the graphs."""
    folder = checkpoint(small_checkpoint, ratio)
    g = torch.Generator().manual_seed(3)
    reqs = [(torch.randint(0, 512, (n,), generator=g).tolist(),
             mm.SamplingParams(temperature=0.0, max_new_tokens=24, logprobs=True))
            for n in (20, 3, 25, 9, 17, 30)]
    kw = dict(CPU32, page_size=4, num_pages=24, max_num_seqs=8)
    want, _ = run_traced(LLM(folder, attention_backend="torch", **kw), reqs)
    llm = LLM(folder, attention_backend="flashinfer", **kw)
    replays = record_replays(llm)
    got, trace = run_traced(llm, reqs)
    assert_same_outputs(got, want)
    assert any(b.preempted for b in trace if b is not None), "nothing was preempted"
    assert sum(o.metrics.num_preemptions for o in got) > 0
    assert any(B < bs for B, bs in replays) and replays
    assert llm.allocator.num_free == llm.allocator.num_pages == 24
    assert llm.kv_cache.num_pages == 25  # + the padding page


def test_bfloat16_runs_through_the_standin(small_checkpoint, monkeypatch):
    """The real dtype rules (no float32 "kernels"): bfloat16 flows into every plan and run."""
    install_graph_standin(monkeypatch)
    registry = install_flashinfer_standin(monkeypatch, float32=False)
    llm = LLM(checkpoint(small_checkpoint, 4), device="cpu", dtype=torch.bfloat16,
              num_pages=64, max_num_seqs=4, skip_tokenizer_init=True)
    assert llm.backend_name == "flashinfer" and llm.cuda_graphs_reason.startswith("on")
    outs = llm.generate([[1, 2, 3], list(range(40)), [7]],
                        mm.SamplingParams(temperature=0.0, max_new_tokens=6))
    assert [len(o.token_ids) for o in outs] == [6, 6, 6]
    for w in registry.wrappers:
        assert w.planned is None or w.planned["q_dtype"] == torch.bfloat16


# --- defect 1: float32 ------------------------------------------------------------------------

def test_float32_has_no_flashinfer_kernels(small_checkpoint, monkeypatch):
    install_graph_standin(monkeypatch)
    install_flashinfer_standin(monkeypatch, float32=False)
    folder = checkpoint(small_checkpoint, 2)
    llm = LLM(folder, **CPU32)  # auto: falls back to torch, and says why
    assert llm.backend_name == "torch"
    assert llm.backend_reason == ("FlashInfer not used: float32 has no FlashInfer kernels; "
                                  "use bfloat16 or float16")
    assert llm.cuda_graphs_reason.startswith("off")
    with pytest.raises(ValueError, match="float32 has no FlashInfer kernels"):
        LLM(folder, attention_backend="flashinfer", **CPU32)
    with pytest.raises(ValueError, match="float32"):
        select_backend("flashinfer", "cuda", torch.float32, 128)
    assert select_backend("auto", "cuda", torch.float16, 128)[0] == "flashinfer"
    assert select_backend("torch", "cuda", torch.float32, 128) == ("torch", "asked for")


# --- defect 2: head_dim and query-group size --------------------------------------------------

@pytest.mark.parametrize("head_dim", [16, 32, 96])
def test_head_dims_without_kernels_fall_back(monkeypatch, head_dim):
    install_flashinfer_standin(monkeypatch)
    name, why = select_backend("auto", "cuda", torch.bfloat16, head_dim)
    assert name == "torch" and f"head_dim {head_dim} has no FlashInfer kernel" in why
    with pytest.raises(ValueError, match=f"head_dim {head_dim}"):
        select_backend("flashinfer", "cuda", torch.bfloat16, head_dim)
    for ok in (64, 128, 256):
        assert select_backend("auto", "cuda", torch.bfloat16, ok)[0] == "flashinfer"


def test_tiny_falls_back_to_torch_on_cuda(monkeypatch):
    """tiny has head_dim 32: on a GPU with FlashInfer, auto picks torch and says why."""
    install_flashinfer_standin(monkeypatch)
    cfg = mm.Qwen3Config.from_pretrained(mm.resolve_model("tiny"))
    name, why = select_backend("auto", "cuda", torch.bfloat16, cfg.head_dim)
    assert name == "torch" and why.startswith(f"FlashInfer not used: head_dim {cfg.head_dim}")


@pytest.mark.parametrize("group", range(1, 17))
def test_every_group_size_gets_a_decode_kernel(monkeypatch, group):
    """CUDA-core decode exists for G in 1, 2, 3, 4, 8 only; any other G (Qwen3-14B: 5) must
    take the tensor-core kernel. The stand-in's decode plan enforces FlashInfer's dispatch."""
    install_flashinfer_standin(monkeypatch)
    cfg = mm.Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=group,
                         num_key_value_heads=1, head_dim=64)
    cache = KVCache(cfg, 4, 4, torch.bfloat16, "cpu")
    backend = FlashInferBackend(cache, group, torch.bfloat16)
    backend.plan(build_metadata([[0], [1, 2]], [3, 6], [1, 1], 4))
    k = torch.zeros(2, 1, 64, dtype=torch.bfloat16)
    out = backend.forward(torch.randn(2, group, 64).bfloat16(), k, k, 0)
    assert out.shape == (2, group, 64)
    assert decode_uses_tensor_cores(group, 1) or group in (1, 2, 3, 4, 8)


# --- defect 3: the padding page ---------------------------------------------------------------

def test_the_padding_page_is_not_lent(small_checkpoint, standin):
    """num_pages=8, page_size=4: a 31-token prompt (8 pages with its first new token) runs to
    its end under graphs; the padding page is a ninth page that no request ever gets."""
    folder = checkpoint(small_checkpoint, 2)
    kw = dict(CPU32, page_size=4, num_pages=8, max_num_seqs=4)
    llm = LLM(folder, attention_backend="flashinfer", **kw)
    assert llm.runner.graphs.padding_page == 8 and llm.kv_cache.num_pages == 9
    assert llm.allocator.num_pages == 8
    prompt = list(range(31))
    sp = mm.SamplingParams(temperature=0.0, max_new_tokens=3, logprobs=True)
    seen = []
    grow = llm.scheduler._grow

    def spy(seq, n):
        ok = grow(seq, n)
        seen.extend(seq.page_table)
        return ok

    llm.scheduler._grow = spy
    got = llm.generate([prompt, [5, 6]], sp)
    want = LLM(folder, attention_backend="torch", **kw).generate([prompt, [5, 6]], sp)
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert 8 not in seen and llm.allocator.num_free == 8
    with pytest.raises(ValueError, match="does not fit in the KV cache"):
        llm.add_request(list(range(32)), sp)


def test_budget_counts_the_padding_page(small_checkpoint, standin):
    folder = checkpoint(small_checkpoint, 2)
    cfg = mm.Qwen3Config.from_pretrained(folder)
    page = cfg.kv_bytes_per_token(torch.float32) * 4
    kw = dict(CPU32, page_size=4, kv_cache_bytes=10 * page, max_num_seqs=4)
    graphs = LLM(folder, attention_backend="flashinfer", **kw)
    assert (graphs.allocator.num_pages, graphs.kv_cache.num_pages) == (9, 10)
    assert graphs.kv_cache.nbytes <= 10 * page
    eager = LLM(folder, attention_backend="flashinfer", enforce_eager=True, **kw)
    assert (eager.allocator.num_pages, eager.kv_cache.num_pages) == (10, 10)
    with pytest.raises(ValueError, match="holds no page for requests"):
        LLM(folder, attention_backend="flashinfer", **{**kw, "kv_cache_bytes": page})


# --- defect 4: the CPU tests are pinned to the CPU --------------------------------------------

def test_cpu_tests_do_not_see_a_gpu(small_checkpoint):
    """conftest.py hides CUDA from every test not marked gpu, here and in child processes."""
    assert not torch.cuda.is_available() and os.environ["CUDA_VISIBLE_DEVICES"] == ""
    llm = LLM(checkpoint(small_checkpoint, 2), num_pages=16, skip_tokenizer_init=True)
    assert (llm.device.type, llm.dtype) == ("cpu", torch.float32)


# --- defect 5: workspace, compiler, current device --------------------------------------------

def test_workspace_is_zeroed(monkeypatch):
    """FlashInfer asks for a zeroed workspace; a torch.empty one holds whatever was there."""
    install_flashinfer_standin(monkeypatch)
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: real_empty(*a, **k).fill_(0xA5)
                        if k.get("dtype") == torch.uint8 else real_empty(*a, **k))
    cfg = mm.Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         head_dim=64)
    backend = FlashInferBackend(KVCache(cfg, 2, 4, torch.bfloat16, "cpu"), 2, torch.bfloat16)
    assert not backend.workspace.any()


def test_no_compiler_means_no_flashinfer(monkeypatch, tmp_path):
    """Without nvcc or ninja (and no prebuilt kernels) FlashInfer would fail inside
    LLM.__init__ at its first JIT build: auto falls back to torch, saying why."""
    from flashinfer.jit import env as jit_env

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(jit_env, "has_flashinfer_jit_cache", lambda: False)
    monkeypatch.setattr(jit_env, "FLASHINFER_AOT_DIR", tmp_path / "no-aot")
    monkeypatch.delenv("FLASHINFER_NVCC", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))  # a CUDA_HOME without bin/nvcc
    monkeypatch.setattr(flashinfer_env.shutil, "which", lambda name: None)
    ok, why = flashinfer_env.flashinfer_status("cuda")
    assert not ok and "finds no nvcc or ninja" in why
    name, reason = select_backend("auto", "cuda", torch.bfloat16, 128)
    assert name == "torch" and "nvcc" in reason
    with pytest.raises(ValueError, match="nvcc"):
        select_backend("flashinfer", "cuda", torch.bfloat16, 128)

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("")
    monkeypatch.setattr(flashinfer_env.shutil, "which",
                        lambda name: f"/usr/bin/{name}" if name == "ninja" else None)
    assert flashinfer_env.flashinfer_status("cuda")[0]
    monkeypatch.setattr(jit_env, "has_flashinfer_jit_cache", lambda: True)
    monkeypatch.setattr(flashinfer_env.shutil, "which", lambda name: None)
    assert flashinfer_env.flashinfer_status("cuda")[0]  # prebuilt kernels need no compiler


def test_cuda_index_becomes_the_current_device(small_checkpoint, monkeypatch):
    """LLM(device="cuda:1") makes cuda:1 current before it builds anything, so that graph
    capture, FlashInfer's plan and every kernel run there, not on cuda:0."""
    calls = []

    class Stop(Exception):
        pass

    def set_device(device):
        calls.append(torch.device(device))
        raise Stop

    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a two-GPU machine
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(Stop):
        LLM(checkpoint(small_checkpoint, 2), device="cuda:1", skip_tokenizer_init=True)
    assert calls == [torch.device("cuda:1")]


# --- the stand-ins themselves -----------------------------------------------------------------

def test_standin_rejects_what_flashinfer_rejects(monkeypatch):
    """A few calls the real wrappers refuse (or would run wrongly on a GPU)."""
    install_flashinfer_standin(monkeypatch)
    ws = torch.zeros(1024, dtype=torch.uint8)
    with pytest.raises(TypeError):  # a keyword FlashInfer 0.6.1 does not have
        StandInDecode(ws, "NHD", use_cuda_graphs=True)
    with pytest.raises(ValueError, match="cudagraph"):
        StandInDecode(ws, "NHD", use_cuda_graph=True)
    bufs = dict(paged_kv_indptr_buffer=torch.zeros(3, dtype=torch.int32),
                paged_kv_indices_buffer=torch.zeros(4, dtype=torch.int32),
                paged_kv_last_page_len_buffer=torch.zeros(2, dtype=torch.int32))
    dec = StandInDecode(ws, "NHD", use_cuda_graph=True, **bufs)
    plan = dict(num_qo_heads=2, num_kv_heads=1, head_dim=64, page_size=4,
                q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    i32 = dict(dtype=torch.int32)
    with pytest.raises(ValueError, match="batch size should be fixed"):
        dec.plan(torch.tensor([0, 1], **i32), torch.tensor([0], **i32),
                 torch.tensor([1], **i32), **plan)
    with pytest.raises(ValueError, match="less than or equal to the allocated buffer"):
        dec.plan(torch.tensor([0, 3, 5], **i32), torch.arange(5, **i32),
                 torch.tensor([1, 1], **i32), **plan)
    with pytest.raises(FlashInferRuleError, match="int32"):
        dec.plan(torch.tensor([0, 1, 2]), torch.tensor([0, 1]), torch.tensor([1, 1]), **plan)
    with pytest.raises(FlashInferRuleError, match="zeros"):
        StandInPrefill(torch.ones(8, dtype=torch.uint8), "NHD")
    with pytest.raises(FlashInferRuleError, match="NHD"):
        StandInPrefill(ws, "HND")
    pre = StandInPrefill(ws, "NHD")
    with pytest.raises(FlashInferRuleError, match="RoPE"):
        pre.plan(torch.tensor([0, 2], **i32), torch.tensor([0, 1], **i32),
                 torch.tensor([0], **i32), torch.tensor([2], **i32), 2, 1, 64, 4,
                 causal=True, pos_encoding_mode="ROPE_LLAMA", q_data_type=torch.bfloat16)


def test_graph_standin_replays_only_what_it_captured(monkeypatch):
    """Replay reads the static input buffer as it is now; a fresh tensor is not read."""
    install_graph_standin(monkeypatch)
    static = torch.zeros(3)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = (static * 2 + 1).sum()
    static.copy_(torch.tensor([1.0, 2.0, 3.0]))
    graph.replay()
    assert out.item() == 15.0
    with pytest.raises(FlashInferRuleError, match="host"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            static.sum().item()


def test_runner_buffers_are_sized_for_a_full_pool(small_checkpoint, standin):
    """Every graph's indices buffer holds every page plus one padding page per row."""
    llm = LLM(checkpoint(small_checkpoint, 2), attention_backend="flashinfer",
              **dict(CPU32, page_size=4, num_pages=16, max_num_seqs=8))
    runner: CUDAGraphRunner = llm.runner.graphs
    for bs, wrapper in runner.wrappers.items():
        assert wrapper.fixed_batch_size == bs
        assert wrapper.indices_buf.numel() >= llm.allocator.num_pages + bs
