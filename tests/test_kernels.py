"""minimodel.kernels: each kernel equals scaled_dot_product_attention (or the engine's torch
backend) within float32 rounding; the split plan fits the GPU it is given; the roofline costs
agree with chapter 07's counts; the FlashInfer API the chapter describes is the installed one."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F

from minimodel.config import Qwen3Config
from minimodel.engine.attention import TorchBackend, build_metadata
from minimodel.engine.kv_cache import KVCache
from minimodel.hub import SHAPES
from minimodel.kernels import (
    flash_attention,
    merge_states,
    naive_attention,
    online_softmax,
    paged_attention,
    paged_split_kv_decode,
    plan_split_kv,
    roofline,
    split_kv_decode,
)

TOL = 1e-5


def sdpa(q, k, v, causal):
    """(o, lse) in float64: SDPA with a bottom-right mask, logsumexp of the scaled scores."""
    T, Hq, D = q.shape
    S, Hkv = k.shape[:2]
    mask = torch.ones(T, S, dtype=torch.bool).tril(S - T) if causal else None
    qh, kh, vh = (t.double().transpose(0, 1) for t in (q, k, v))
    o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, enable_gqa=True)
    scores = qh @ kh.repeat_interleave(Hq // Hkv, 0).transpose(1, 2) / math.sqrt(D)
    if causal:
        scores = scores.masked_fill(~mask, float("-inf"))
    return o.transpose(0, 1), scores.logsumexp(-1).T


def close(a, b, tol=TOL):
    return torch.allclose(a.double(), b.double(), atol=tol, rtol=tol)


@pytest.mark.parametrize("shape", [(7,), (3, 16), (2, 4, 33)])
@pytest.mark.parametrize("block", [1, 4, 5, 100])
def test_online_softmax_equals_softmax(shape, block):
    x = torch.randn(shape) * 5
    assert close(online_softmax(x, block), torch.softmax(x.double(), -1), 1e-6)


def test_online_softmax_is_stable_where_the_naive_form_overflows():
    x = torch.tensor([[1000.0, 999.0, 998.0, -5.0], [-1000.0, -1001.0, -1002.0, -1003.0]])
    naive = x.exp() / x.exp().sum(-1, keepdim=True)
    assert not naive.isfinite().all(axis=-1).any()  # every row has an inf or a nan
    assert close(online_softmax(x, 2), torch.softmax(x.double(), -1), 1e-6)


CASES = [  # T, S, Hq, Hkv, D
    (16, 16, 4, 2, 8),  # prefill
    (5, 23, 6, 3, 16),  # chunked prefill
    (1, 40, 8, 2, 32),  # decode
    (13, 29, 4, 1, 8),  # MQA
    (9, 9, 2, 2, 64),  # MHA
]


@pytest.mark.parametrize("T, S, Hq, Hkv, D", CASES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("block_q, block_k", [(1, 1), (4, 5), (64, 64), (3, 16)])
def test_flash_attention_equals_sdpa(T, S, Hq, Hkv, D, causal, block_q, block_k):
    q, k, v = torch.randn(T, Hq, D), torch.randn(S, Hkv, D), torch.randn(S, Hkv, D)
    o, lse = flash_attention(q, k, v, causal, block_q, block_k)
    want_o, want_lse = sdpa(q, k, v, causal)
    assert o.shape == (T, Hq, D) and lse.shape == (T, Hq) and lse.dtype == torch.float32
    assert close(o, want_o) and close(lse, want_lse)


@pytest.mark.parametrize("T, S, Hq, Hkv, D", CASES)
def test_naive_attention_equals_sdpa(T, S, Hq, Hkv, D):
    q, k, v = torch.randn(T, Hq, D), torch.randn(S, Hkv, D), torch.randn(S, Hkv, D)
    o, lse = naive_attention(q, k, v, causal=True)
    want_o, want_lse = sdpa(q, k, v, True)
    assert close(o, want_o) and close(lse, want_lse)


def test_flash_attention_skips_the_tiles_in_every_querys_future():
    """A key tile after every query of a query tile is never read: poison it, nothing changes."""
    T = S = 16
    q, k, v = torch.randn(T, 2, 8), torch.randn(S, 1, 8), torch.randn(S, 1, 8)
    want, _ = flash_attention(q[:4], k[:4], v[:4], True, 4, 4)  # the first query tile alone
    k[4:], v[4:] = float("nan"), float("nan")
    got, _ = flash_attention(q, k, v, True, 4, 4)
    assert torch.equal(got[:4], want)


def test_flash_attention_rejects_more_queries_than_keys_when_causal():
    with pytest.raises(ValueError, match="T <= S"):
        flash_attention(torch.randn(5, 2, 8), torch.randn(3, 1, 8), torch.randn(3, 1, 8),
                        True, 2, 2)


def test_merge_states_gives_the_state_over_both_key_sets():
    q, k, v = torch.randn(3, 4, 16), torch.randn(30, 2, 16), torch.randn(30, 2, 16)
    a, b = sdpa(q, k[:11], v[:11], False), sdpa(q, k[11:], v[11:], False)
    o, lse = merge_states(a[0].float(), a[1].float(), b[0].float(), b[1].float())
    want_o, want_lse = sdpa(q, k, v, False)
    assert close(o, want_o) and close(lse, want_lse)


def test_merge_states_is_stable_and_handles_empty_states():
    o_a, o_b = torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    lse_a, lse_b = 3000 + torch.randn(2, 3), 3000 + torch.randn(2, 3)
    o, lse = merge_states(o_a, lse_a, o_b, lse_b)
    assert o.isfinite().all() and lse.isfinite().all()
    assert close(lse, torch.logaddexp(lse_a.double(), lse_b.double()), 1e-6)
    empty = torch.full_like(lse_b, float("-inf"))
    o, lse = merge_states(o_a, lse_a, torch.zeros_like(o_b), empty)
    assert torch.allclose(o, o_a) and torch.equal(lse, lse_a)
    o, lse = merge_states(o_a, empty, o_b, empty)  # both empty: still empty, no nan
    assert torch.equal(o, torch.zeros_like(o)) and (lse == float("-inf")).all()


@pytest.mark.parametrize("chunk", [1, 7, 40, 100])
def test_split_kv_decode_equals_sdpa(chunk):
    q, k, v = torch.randn(1, 8, 32), torch.randn(100, 2, 32), torch.randn(100, 2, 32)
    o, lse = split_kv_decode(q, k, v, chunk)
    want_o, want_lse = sdpa(q, k, v, False)
    assert close(o, want_o) and close(lse, want_lse)


def test_plan_split_kv_fills_the_gpu_with_the_fewest_chunks():
    one = plan_split_kv(torch.tensor([0, 256]), num_kv_heads=8, max_blocks=132,
                        min_pages_per_chunk=8)
    assert one.split and one.pages_per_chunk == 16 and one.num_work_items == 16
    assert one.merge_indptr.tolist() == [0, 16] and one.chunk_indices.tolist() == list(range(16))
    many = plan_split_kv(torch.arange(0, 65 * 256, 256), 8, 132, 8)  # 64 requests of 256 pages
    assert not many.split and many.num_work_items == 64
    lens = torch.tensor([0, 3, 100, 101, 400])
    plan = plan_split_kv(lens, 2, 64, 1)
    pages = (lens[1:] - lens[:-1]).tolist()
    blocks = lambda c: 2 * sum(-(-n // c) for n in pages)  # noqa: E731
    assert blocks(plan.pages_per_chunk) <= 64 < blocks(plan.pages_per_chunk - 1)
    assert plan.num_work_items * 2 == blocks(plan.pages_per_chunk)
    short = plan_split_kv(torch.tensor([0, 4]), 8, 132, 8)  # shorter than one chunk
    assert short.pages_per_chunk == 4 and not short.split


def _paged_step(page_size, kv_lens, q_lens, Hq=8, Hkv=2, D=16):
    """Fill a pool through the engine's torch backend, then run one step: (q, pool, metadata,
    the backend's output for the step)."""
    cfg = Qwen3Config(hidden_size=64, intermediate_size=8, num_hidden_layers=1,
                      num_attention_heads=Hq, num_key_value_heads=Hkv, head_dim=D, vocab_size=8)
    need = [-(-n // page_size) for n in kv_lens]
    order = torch.randperm(sum(need) + 3).tolist()
    tables = [order[sum(need[:i]) : sum(need[: i + 1])] for i in range(len(need))]
    cache = KVCache(cfg, len(order), page_size, torch.float32, "cpu")
    backend = TorchBackend(cache, Hq, torch.float32)
    first = build_metadata(tables, kv_lens, kv_lens, page_size)  # write every token's K/V
    N = sum(kv_lens)
    backend.plan(first)
    backend.forward(torch.randn(N, Hq, D), torch.randn(N, Hkv, D), torch.randn(N, Hkv, D), 0)
    md = build_metadata(tables, kv_lens, q_lens, page_size)
    backend.plan(md)
    N = sum(q_lens)
    q = torch.randn(N, Hq, D)
    new_k = cache.rows(0)[backend.new_k_rows].clone()  # rewrite the same values
    new_v = cache.rows(0)[backend.new_k_rows + page_size].clone()
    return q, cache.pools[0], md, backend.forward(q, new_k, new_v, 0)


@pytest.mark.parametrize("page_size", [1, 3, 16])
@pytest.mark.parametrize("block_q, pages_per_tile", [(1, 1), (4, 2), (16, 5)])
def test_paged_attention_equals_the_torch_backend(page_size, block_q, pages_per_tile):
    q, pool, md, want = _paged_step(page_size, [5, 1, 9, 20, 33], [1, 1, 9, 6, 2])
    o, lse = paged_attention(q, pool, md.qo_indptr, md.kv_indptr, md.kv_indices,
                             md.kv_last_page_len, block_q, pages_per_tile)
    assert close(o, want) and lse.shape == q.shape[:2]


@pytest.mark.parametrize("page_size", [1, 3, 16])
@pytest.mark.parametrize("pages_per_chunk", [1, 2, 50])
def test_paged_split_kv_decode_equals_the_torch_backend(page_size, pages_per_chunk):
    kv_lens = [5, 1, 17, 48]
    q, pool, md, want = _paged_step(page_size, kv_lens, [1] * 4)
    o, lse = paged_split_kv_decode(q, pool, md.kv_indptr, md.kv_indices, md.kv_last_page_len,
                                   pages_per_chunk)
    assert close(o, want)
    _, lse_tiled = paged_attention(q, pool, md.qo_indptr, md.kv_indptr, md.kv_indices,
                                   md.kv_last_page_len)
    assert close(lse, lse_tiled)


def test_step_cost_agrees_with_chapter_07():
    """Chapter 07's table: Qwen3-0.6B in bfloat16, prefill of 512 tokens and decode at 512."""
    cfg = SHAPES["qwen3-0.6b"]
    flops, nbytes = roofline.step_cost(cfg, 512, 512)
    assert f"{flops / 1e9:.2f}" == "481.41" and f"{nbytes / 1e6:.1f}" == "1250.7"
    flops, nbytes = roofline.step_cost(cfg, 1, 512, batch=64)
    assert f"{flops / 1e9:.2f}" == "83.80" and f"{nbytes / 1e6:.1f}" == "4950.1"
    layer_flops, layer_bytes = roofline.layer_cost(cfg, 1, 1, dtype=torch.float32)
    assert layer_bytes == 4 * (15_728_640 + 2 * 8 * 128)  # weights + one token's K/V


def test_the_measurements_run():
    assert roofline.measure_matmul_flops(64, repeats=1) > 0
    assert roofline.measure_bandwidth(2**20, repeats=1) > 0


def test_the_flashinfer_api_the_chapter_describes():
    flashinfer = pytest.importorskip("flashinfer")
    params = lambda f: list(inspect.signature(f).parameters)  # noqa: E731
    assert params(flashinfer.merge_state) == ["v_a", "s_a", "v_b", "s_b"]
    assert params(flashinfer.merge_state_in_place)[:4] == ["v", "s", "v_other", "s_other"]
    assert params(flashinfer.merge_states) == ["v", "s"]
    cascade = params(flashinfer.MultiLevelCascadeAttentionWrapper.plan)
    assert cascade[1:5] == ["qo_indptr_arr", "paged_kv_indptr_arr", "paged_kv_indices_arr",
                            "paged_kv_last_page_len"]
    decode = params(flashinfer.BatchDecodeWithPagedKVCacheWrapper.plan)
    assert decode[1:4] == ["indptr", "indices", "last_page_len"]
    assert {"fixed_split_size", "disable_split_kv"} <= set(decode)
    assert "return_lse" in params(flashinfer.BatchDecodeWithPagedKVCacheWrapper.run)
