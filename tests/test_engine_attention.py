"""Attention metadata, the paged KV cache and the torch backend, checked against plain math.

`check_backend` is shared with the GPU tests: any backend, on the same metadata, must match a
dense attention written out token by token.
"""

from __future__ import annotations

import math

import pytest
import torch
from checkpoints import CONFIGS

import minimodel as mm
from minimodel.engine import KVCache, PageAllocator, TorchBackend, build_metadata
from minimodel.engine.attention import decode_metadata
from minimodel.engine.model import PackedQwen3ForCausalLM


def test_build_metadata_by_hand():
    # request 0: 20 tokens in pages [5, 2], the last 4 new; request 1: a 1-token prompt in
    # page 7; request 2: 35 tokens, all new, in pages [1, 3, 4].
    m = build_metadata([[5, 2], [7], [1, 3, 4]], kv_lens=[20, 1, 35], q_lens=[4, 1, 35],
                       page_size=16)
    assert m.qo_indptr.tolist() == [0, 4, 5, 40]
    assert m.kv_indptr.tolist() == [0, 2, 3, 6]
    assert m.kv_indices.tolist() == [5, 2, 7, 1, 3, 4]
    assert m.kv_last_page_len.tolist() == [4, 1, 3]
    assert m.positions.tolist() == [16, 17, 18, 19, 0] + list(range(35))
    assert m.slot_mapping[:5].tolist() == [32, 33, 34, 35, 112]
    assert m.slot_mapping[5:].tolist() == (
        [16 + i for i in range(16)] + [48 + i for i in range(16)] + [64, 65, 66]
    )
    for t in (m.qo_indptr, m.kv_indptr, m.kv_indices, m.kv_last_page_len):
        assert t.dtype == torch.int32
    assert not m.is_decode and m.num_tokens == 40


def test_build_metadata_rejects_inconsistent_batches():
    with pytest.raises(ValueError, match="q_len"):
        build_metadata([[0]], kv_lens=[3], q_lens=[4], page_size=4)
    with pytest.raises(ValueError, match="pages"):
        build_metadata([[0]], kv_lens=[5], q_lens=[1], page_size=4)


@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_decode_metadata_is_build_metadata_for_one_token_per_request(page_size):
    g = torch.Generator().manual_seed(page_size)
    for _ in range(50):
        B = int(torch.randint(1, 9, (), generator=g))
        kv_lens = torch.randint(1, 60, (B,), generator=g).tolist()
        # page tables in any order, some longer than needed (pages reserved for drafts)
        tables = [torch.randperm(200, generator=g)[: -(-k // page_size) + int(extra)].tolist()
                  for k, extra in zip(kv_lens, torch.randint(0, 3, (B,), generator=g))]
        want = build_metadata(tables, kv_lens, [1] * B, page_size)
        got = decode_metadata(tables, kv_lens, page_size)
        for field in ("qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len", "positions",
                      "slot_mapping"):
            a, b = getattr(got, field), getattr(want, field)
            assert a.dtype == b.dtype and torch.equal(a, b), field
        assert (got.q_lens, got.kv_lens, got.page_size) == (want.q_lens, want.kv_lens, page_size)
        assert got.is_decode
    with pytest.raises(ValueError, match="kv_len"):
        decode_metadata([[0]], kv_lens=[5], page_size=4)
    with pytest.raises(ValueError, match="kv_len"):
        decode_metadata([[0]], kv_lens=[0], page_size=4)


def test_kv_pool_bytes_and_budget():
    cfg = mm.Qwen3Config(**{**dict(vocab_size=64, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=3, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=8)})
    cache = KVCache(cfg, num_pages=7, page_size=5, dtype=torch.bfloat16, device="cpu")
    L, Hkv, D = 3, 2, 8
    assert cache.nbytes == 2 * L * Hkv * D * 2 * 5 * 7
    assert cache.pools[0].shape == (7, 2, 5, Hkv, D)
    per_page = 2 * L * Hkv * D * 2 * 5
    assert KVCache.num_pages_for_budget(cfg, 5, torch.bfloat16, 10 * per_page + 1) == 10


def test_page_allocator_lends_and_takes_back():
    alloc = PageAllocator(5)
    a, b = alloc.allocate(2), alloc.allocate(3)
    assert sorted(a + b) == [0, 1, 2, 3, 4] and alloc.num_free == 0
    alloc.free(a)
    assert alloc.num_free == 2 and sorted(alloc.allocate(2)) == sorted(a)


def dense_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Oracle for one request: q [Q, Hq, D] against its whole history keys/values [K, Hkv, D],
    new token j seeing positions 0 .. K-Q+j, written as a loop over tokens and heads."""
    Q, Hq, D = q.shape
    K, Hkv, _ = keys.shape
    out = torch.zeros(Q, Hq, D, dtype=torch.float64)
    for j in range(Q):
        visible = K - Q + j + 1
        for h in range(Hq):
            kv_h = h // (Hq // Hkv)
            s = keys[:visible, kv_h].double() @ q[j, h].double() / math.sqrt(D)
            out[j, h] = torch.softmax(s, 0) @ values[:visible, kv_h].double()
    return out


def check_backend(backend_cls, page_size, q_lens_per_step, Hq=4, Hkv=2, D=16,
                  dtype=torch.float32, device="cpu", atol=1e-5):
    """Run steps through a backend: histories build up in the pool, in shuffled pages; after
    each step, every request's output must equal dense attention over its whole history."""
    cfg = mm.Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=Hq, num_key_value_heads=Hkv,
                         head_dim=D)
    g = torch.Generator().manual_seed(page_size)
    B = len(q_lens_per_step[0])
    total = [sum(step[i] for step in q_lens_per_step) for i in range(B)]
    need = sum(-(-t // page_size) for t in total)
    cache = KVCache(cfg, need + 3, page_size, dtype, device)
    pages = torch.randperm(need + 3, generator=g).tolist()  # any page can hold any token
    tables, start = [], 0
    for t in total:
        n = -(-t // page_size)
        tables.append(pages[start : start + n])
        start += n
    backend = backend_cls(cache, Hq, dtype)
    history_k = [torch.zeros(0, Hkv, D) for _ in range(B)]
    history_v = [torch.zeros(0, Hkv, D) for _ in range(B)]
    kv_lens = [0] * B
    for q_lens in q_lens_per_step:
        rows = [i for i in range(B) if q_lens[i] > 0]
        kv_lens = [kv_lens[i] + q_lens[i] for i in range(B)]
        meta = build_metadata([tables[i] for i in rows], [kv_lens[i] for i in rows],
                              [q_lens[i] for i in rows], page_size, device)
        N = meta.num_tokens
        q, k, v = (torch.randn(N, h, D, generator=g) for h in (Hq, Hkv, Hkv))
        backend.plan(meta)
        for layer in range(2):  # every layer reads the same plan
            out = backend.forward(*(t.to(device, dtype) for t in (q, k, v)), layer).cpu()
        offsets = meta.qo_indptr.tolist()
        for n, i in enumerate(rows):
            s, e = offsets[n], offsets[n + 1]
            history_k[i] = torch.cat([history_k[i], k[s:e].to(dtype).float()])
            history_v[i] = torch.cat([history_v[i], v[s:e].to(dtype).float()])
            want = dense_attention(q[s:e].to(dtype), history_k[i], history_v[i])
            diff = (out[s:e].double() - want).abs().max().item()
            assert diff <= atol, f"step {q_lens}, request {i}: max diff {diff:.2e}"


STEPS = {
    # prefill of mixed lengths, then two pure decode steps (the batched decode path)
    "prefill-then-decode": [[1, 17, 40], [1, 1, 1], [1, 1, 1]],
    # chunked prefill next to decodes, then a request that skips a step
    "mixed": [[5, 33, 2], [1, 7, 1], [0, 1, 9], [1, 1, 1]],
}


@pytest.mark.parametrize("page_size", [1, 3, 16])
@pytest.mark.parametrize("steps", sorted(STEPS))
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (8, 2), (4, 1)])
def test_torch_backend_matches_dense_attention(page_size, steps, heads):
    check_backend(TorchBackend, page_size, STEPS[steps], Hq=heads[0], Hkv=heads[1])


def test_dense_oracle_is_sensitive_to_the_mask():
    """The oracle itself: a top-left causal mask would give a different answer for Q < K."""
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 2, 8, generator=g), torch.randn(5, 1, 8, generator=g), \
        torch.randn(5, 1, 8, generator=g)
    bottom_right = dense_attention(q, k, v)
    top_left = dense_attention(q, k[:2], v[:2])
    assert (bottom_right - top_left).abs().max() > 1e-3


@pytest.mark.parametrize("name", ["gqa2-tied-hd!=C", "mqa-tied-theta1e4"])
def test_chunk_invariance_and_reference_logits(small_checkpoint, name):
    """Logits of every prompt position: one prefill step == the same prompt split over steps
    of 5, 1, 13, ... tokens == the reference model."""
    folder = small_checkpoint(**CONFIGS[name])
    model = PackedQwen3ForCausalLM.from_pretrained(folder, torch.float32, "cpu")
    ref = mm.reference.Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32)
    ids = torch.randint(0, 512, (41,), generator=torch.Generator().manual_seed(2))

    def logits_in_chunks(chunks: list[int], page_size: int) -> torch.Tensor:
        cache = KVCache(model.cfg, 64, page_size, torch.float32, "cpu")
        backend = TorchBackend(cache, model.cfg.num_attention_heads, torch.float32)
        table = list(range(63, 63 - -(-41 // page_size), -1))  # pages in reverse order
        out, done = [], 0
        with torch.inference_mode():
            for n in chunks:
                meta = build_metadata([table], [done + n], [n], page_size)
                backend.plan(meta)
                hidden = model(ids[done : done + n], meta.positions, backend)
                out.append(model.compute_logits(hidden))
                done += n
        return torch.cat(out)

    whole = logits_in_chunks([41], page_size=4)
    chunked = logits_in_chunks([5, 1, 13, 1, 1, 20], page_size=3)
    assert (whole - chunked).abs().max().item() <= 1e-4  # float32 rounding only
    with torch.no_grad():
        want = ref(ids[None])[0]
    assert (whole - want).abs().max().item() <= 1e-4


@pytest.mark.parametrize("q_len, kv_len", [(1, 1), (1, 9), (4, 4), (3, 11), (11, 11)])
def test_the_one_causal_mask_is_the_last_rows_of_the_square_one(q_len, kv_len):
    """ops.causal_mask (engine, kernels, roofline, viz): a chunk's queries are the last rows of
    the full square mask of its sequence."""
    from minimodel.ops import causal_mask

    square = torch.ones(kv_len, kv_len, dtype=torch.bool).tril()
    assert torch.equal(causal_mask(q_len, kv_len), square[kv_len - q_len:])
