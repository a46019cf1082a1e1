"""Functions run inside the processes that tests/test_parallel_layers.py spawns (importable by
name, as `torch.multiprocessing.spawn` needs)."""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

from minimodel import layers


def _load(layer, **full):
    for name, tensor in full.items():
        layer.weight_loader(getattr(layer, name), tensor)
    return layer


def layer_equality(rank: int, size: int, init_method: str) -> None:
    """Each parallel layer's sharded output equals the one-rank layer's, on every rank."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=60))
    try:
        with torch.no_grad():
            _layer_equality(rank, size)
    finally:
        dist.destroy_process_group()


def _layer_equality(rank: int, size: int) -> None:
    g = torch.Generator().manual_seed(0)  # the same inputs and weights on every rank
    atol = 1e-5
    for N, C, O in [(1, 8, 6), (5, 12, 10), (7, 16, 32)]:
        x = torch.randn(N, C, generator=g)
        w, b = torch.randn(O, C, generator=g), torch.randn(O, generator=g)
        full = _load(layers.ColumnParallelLinear(C, O, bias=True), weight=w, bias=b)(x)
        with layers.tensor_parallel(rank, size):
            col = _load(layers.ColumnParallelLinear(C, O, bias=True), weight=w, bias=b)
        torch.testing.assert_close(col(x), full.chunk(size, dim=1)[rank], atol=atol, rtol=0)

        # row parallel: this rank's slice of the input features, summed over ranks
        w2, b2 = torch.randn(O, 2 * C, generator=g), torch.randn(O, generator=g)
        x2 = torch.randn(N, 2 * C, generator=g)
        full = _load(layers.RowParallelLinear(2 * C, O, bias=True), weight=w2, bias=b2)(x2)
        with layers.tensor_parallel(rank, size):
            row = _load(layers.RowParallelLinear(2 * C, O, bias=True), weight=w2, bias=b2)
        torch.testing.assert_close(row(x2.chunk(size, dim=1)[rank]), full, atol=atol, rtol=1e-5)

        # merged gate/up: each block split on its own
        I = 2 * O  # noqa: E741
        wgu = torch.randn(2 * I, C, generator=g)
        full = _load(layers.MergedColumnParallelLinear(C, [I, I]), weight=wgu)(x)
        with layers.tensor_parallel(rank, size):
            gu = _load(layers.MergedColumnParallelLinear(C, [I, I]), weight=wgu)
        gate, up = full.split([I, I], dim=1)
        want = torch.cat([gate.chunk(size, 1)[rank], up.chunk(size, 1)[rank]], dim=1)
        torch.testing.assert_close(gu(x), want, atol=atol, rtol=0)

    # q/k/v: query heads split, KV heads split or (fewer KV heads than ranks) replicated
    for hq, hkv, D in [(4, 1, 8), (4, 2, 4), (8, 4, 4), (6, 2, 2), (2, 2, 16)]:
        C = 12
        x = torch.randn(3, C, generator=g)
        w = torch.randn((hq + 2 * hkv) * D, C, generator=g)
        b = torch.randn((hq + 2 * hkv) * D, generator=g)
        full = _load(layers.QKVParallelLinear(C, D, hq, hkv, bias=True), weight=w, bias=b)(x)
        with layers.tensor_parallel(rank, size):
            qkv = _load(layers.QKVParallelLinear(C, D, hq, hkv, bias=True), weight=w, bias=b)
        q, k, v = full.split([hq * D, hkv * D, hkv * D], dim=1)
        q = q.view(3, hq, D).chunk(size, dim=1)[rank].reshape(3, -1)
        if hkv >= size:
            k = k.view(3, hkv, D).chunk(size, dim=1)[rank].reshape(3, -1)
            v = v.view(3, hkv, D).chunk(size, dim=1)[rank].reshape(3, -1)
        else:  # the KV head that this rank's query heads read: head h reads h // (hq / hkv)
            kv_head = (rank * hq // size) // (hq // hkv)
            k, v = k[:, kv_head * D:(kv_head + 1) * D], v[:, kv_head * D:(kv_head + 1) * D]
        torch.testing.assert_close(qkv(x), torch.cat([q, k, v], dim=1), atol=atol, rtol=0)
        assert qkv.num_heads == hq // size and qkv.num_kv_heads == max(1, hkv // size)

    # embedding and LM head, also with a vocabulary the ranks do not divide
    for V, C in [(10, 4), (101, 8), (64, 6)]:
        table = torch.randn(V, C, generator=g)
        ids = torch.randint(0, V, (17,), generator=g)
        ids[:2] = torch.tensor([0, V - 1])
        with layers.tensor_parallel(rank, size):
            emb = _load(layers.VocabParallelEmbedding(V, C), weight=table)
            head = _load(layers.ParallelLMHead(V, C), weight=table)
        torch.testing.assert_close(emb(ids), table[ids], atol=0, rtol=0)
        h = torch.randn(4, C, generator=g)
        logits = head(h)
        if rank == 0:
            torch.testing.assert_close(logits, h @ table.T, atol=atol, rtol=1e-5)
        else:
            assert logits is None
