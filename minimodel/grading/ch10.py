"""Checks of chapter 10 (tensor parallelism): column_parallel_linear, row_parallel_linear,
vocab_parallel_embedding and shard_qkv.

The ranks are simulated in one process: a function gets `rank` and `world_size` and returns
what that rank computes or holds; "all_reduce" is the sum of the ranks' results. Shapes: N
tokens, C in-features (hidden), O out-features, W ranks (world_size), V vocabulary, Hq / Hkv
query / KV heads, D head dim.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from minimodel.grading.core import CheckFailed, exercise, expect, expect_close, expect_shape

_DTYPES = (torch.float32, torch.float64)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _tol(dtype: torch.dtype) -> float:
    return 1e-5 if dtype == torch.float32 else 1e-10


# --- column_parallel_linear ----------------------------------------------------------------------

_COL_CASES = [(3, 8, 12, 2), (1, 16, 16, 4), (5, 6, 24, 3), (4, 10, 8, 1), (2, 12, 40, 8)]


def _col_case(i: int, dtype: torch.dtype, bias: bool):
    N, C, O, W = _COL_CASES[i]
    g = _gen(100 + i)
    x = torch.randn(N, C, generator=g, dtype=dtype)
    w = torch.randn(O, C, generator=g, dtype=dtype)
    b = torch.randn(O, generator=g, dtype=dtype) if bias else None
    return x, w, b, W


@exercise("ch10.column_parallel_linear", "rank r returns its [N, O/W] slice of x @ W.T + b, "
                                         "ranks in order")
def _col_values(fn: Callable) -> None:
    for i in range(len(_COL_CASES)):
        for dtype, bias in ((torch.float32, True), (torch.float64, False)):
            x, w, b, W = _col_case(i, dtype, bias)
            full = F.linear(x, w, b)
            O = w.shape[0]
            for rank in range(W):
                got = fn(x, w, b, rank, W)
                want = full[:, rank * O // W:(rank + 1) * O // W]
                expect_shape(got, tuple(want.shape),
                             f"column_parallel_linear(x {tuple(x.shape)}, weight {tuple(w.shape)}"
                             f", rank={rank}, world_size={W})")
                expect_close(got, want, f"rank {rank} of {W} (weight {tuple(w.shape)}, "
                             f"bias {'yes' if bias else 'None'})", atol=_tol(dtype),
                             rtol=_tol(dtype))


@exercise("ch10.column_parallel_linear", "the W slices, side by side, are the full product")
def _col_cat(fn: Callable) -> None:
    x, w, b, W = _col_case(4, torch.float32, True)
    parts = [fn(x, w, b, r, W) for r in range(W)]
    expect_close(torch.cat(parts, dim=-1), F.linear(x, w, b), "cat(ranks' outputs, dim=-1)")


@exercise("ch10.column_parallel_linear", "leaves x, weight and bias unchanged")
def _col_pure(fn: Callable) -> None:
    x, w, b, W = _col_case(0, torch.float32, True)
    copies = (x.clone(), w.clone(), b.clone())
    fn(x, w, b, 1, W)
    expect(all(torch.equal(a, c) for a, c in zip((x, w, b), copies, strict=True)),
           "column_parallel_linear changed one of its inputs in place")


# --- row_parallel_linear -------------------------------------------------------------------------

_ROW_CASES = [(3, 8, 6, 2), (1, 16, 16, 4), (5, 24, 7, 3), (2, 40, 12, 8), (4, 10, 8, 1)]


def _row_case(i: int, dtype: torch.dtype, bias: bool):
    N, C, O, W = _ROW_CASES[i]
    g = _gen(200 + i)
    x = torch.randn(N, C, generator=g, dtype=dtype)
    w = torch.randn(O, C, generator=g, dtype=dtype)
    b = torch.randn(O, generator=g, dtype=dtype) * 3 if bias else None
    return x, w, b, W


def _row_partials(fn: Callable, x, w, b, W) -> list[torch.Tensor]:
    parts = []
    for rank in range(W):
        x_r = x.chunk(W, dim=-1)[rank].clone()
        got = fn(x_r, w, b, rank, W)
        expect_shape(got, (x.shape[0], w.shape[0]),
                     f"row_parallel_linear(x_shard {tuple(x_r.shape)}, weight {tuple(w.shape)}, "
                     f"rank={rank}, world_size={W})")
        parts.append(got)
    return parts


@exercise("ch10.row_parallel_linear", "the ranks' partial sums add up to x @ W.T + b "
                                      "(the all-reduce)")
def _row_sum(fn: Callable) -> None:
    for i in range(len(_ROW_CASES)):
        for dtype, bias in ((torch.float32, True), (torch.float64, False)):
            x, w, b, W = _row_case(i, dtype, bias)
            parts = _row_partials(fn, x, w, b, W)
            expect_close(torch.stack(parts).sum(0), F.linear(x, w, b),
                         f"sum over {W} ranks (weight {tuple(w.shape)}, bias "
                         f"{'yes' if bias else 'None'})", atol=10 * _tol(dtype),
                         rtol=10 * _tol(dtype))


@exercise("ch10.row_parallel_linear", "rank r multiplies its input slice by its weight columns;"
                                      " the bias is added once, by rank 0")
def _row_each(fn: Callable) -> None:
    for i in range(len(_ROW_CASES)):
        x, w, b, W = _row_case(i, torch.float32, True)
        parts = _row_partials(fn, x, w, b, W)
        cols = w.shape[1] // W
        for rank, got in enumerate(parts):
            x_r = x[:, rank * cols:(rank + 1) * cols]
            want = x_r @ w[:, rank * cols:(rank + 1) * cols].T + (b if rank == 0 else 0)
            if not torch.allclose(got, want, atol=1e-5, rtol=1e-5):
                if torch.allclose(got, x_r @ w[:, rank * cols:(rank + 1) * cols].T + b,
                                  atol=1e-5, rtol=1e-5):
                    raise CheckFailed(f"rank {rank} of {W} added the bias too: summed over the "
                                      f"ranks it would count {W} times.")
                expect_close(got, want, f"rank {rank} of {W}'s partial sum")


# --- vocab_parallel_embedding --------------------------------------------------------------------

_EMB_CASES = [(10, 4, 2), (101, 8, 2), (64, 6, 4), (7, 3, 3), (30, 5, 8), (12, 4, 1)]


def _emb_case(i: int, dtype: torch.dtype):
    V, C, W = _EMB_CASES[i]
    g = _gen(300 + i)
    table = torch.randn(V, C, generator=g, dtype=dtype)
    ids = torch.randint(0, V, (3, 9), generator=g)
    ids[0, :2] = torch.tensor([0, V - 1])
    Vp = -(-V // W)
    for r in range(W):  # each shard's first and last id, and the first id past it
        for t in (r * Vp, r * Vp + Vp - 1, (r + 1) * Vp):
            if t < V:
                ids[1, (r * 3 + (t - r * Vp) % 3) % 9] = t
    return table, ids, W


def _shard(table: torch.Tensor, rank: int, W: int) -> torch.Tensor:
    Vp = -(-table.shape[0] // W)
    return table[rank * Vp:(rank + 1) * Vp].clone()


@exercise("ch10.vocab_parallel_embedding", "each rank returns its rows for the ids it holds "
                                           "and zeros for the others")
def _emb_each(fn: Callable) -> None:
    for i in range(len(_EMB_CASES)):
        for dtype in _DTYPES:
            table, ids, W = _emb_case(i, dtype)
            V = table.shape[0]
            Vp = -(-V // W)
            for rank in range(W):
                shard = _shard(table, rank, W)
                got = fn(ids, shard, rank, W, V)
                mine = (ids >= rank * Vp) & (ids < rank * Vp + shard.shape[0])
                want = torch.where(mine.unsqueeze(-1), table[ids], 0)
                expect_shape(got, (*ids.shape, table.shape[1]),
                             f"vocab_parallel_embedding(ids {tuple(ids.shape)}, shard "
                             f"{tuple(shard.shape)}, rank={rank}, world_size={W}, V={V})")
                if not torch.equal(got, want):
                    wrong = (got != want).any(-1)
                    bad = int(ids[wrong][0])
                    raise CheckFailed(
                        f"rank {rank} of {W} (V={V}, its shard holds ids {rank * Vp}.."
                        f"{rank * Vp + shard.shape[0] - 1}) is wrong for id {bad}: "
                        + ("it belongs to this rank" if mine[wrong][0] else
                           "it belongs to another rank, so this rank's row must be zeros"))


@exercise("ch10.vocab_parallel_embedding", "summed over the ranks (the all-reduce) it is the "
                                           "lookup table[ids], also when W does not divide V")
def _emb_sum(fn: Callable) -> None:
    for i in range(len(_EMB_CASES)):
        table, ids, W = _emb_case(i, torch.float32)
        total = sum(fn(ids, _shard(table, r, W), r, W, table.shape[0]) for r in range(W))
        expect_close(total, table[ids], f"sum over {W} ranks (V={table.shape[0]})", atol=0,
                     rtol=0)


@exercise("ch10.vocab_parallel_embedding", "leaves ids and the shard unchanged")
def _emb_pure(fn: Callable) -> None:
    table, ids, W = _emb_case(1, torch.float32)
    shard = _shard(table, 1, W)
    copies = (ids.clone(), shard.clone())
    fn(ids, shard, 1, W, table.shape[0])
    expect(torch.equal(ids, copies[0]) and torch.equal(shard, copies[1]),
           "vocab_parallel_embedding changed ids or the shard in place")


# --- shard_qkv -----------------------------------------------------------------------------------

_QKV_CASES = [  # (Hq, Hkv, D, C, W): KV heads split, or fewer KV heads than ranks (replicated)
    (4, 2, 3, 5, 2), (8, 4, 2, 6, 4), (4, 1, 4, 3, 2), (8, 2, 2, 4, 4), (16, 2, 1, 3, 8),
    (6, 6, 2, 4, 3), (2, 2, 5, 3, 1), (12, 3, 2, 4, 6),
]


def _qkv_reference(w, Hq, Hkv, D, rank, W):
    q, k, v = w.split([Hq * D, Hkv * D, Hkv * D])
    hq = Hq // W
    q_r = q[rank * hq * D:(rank + 1) * hq * D]
    if Hkv >= W:
        hkv = Hkv // W
        first = rank * hkv
    else:
        hkv, first = 1, rank // (W // Hkv)
    return torch.cat([q_r, k[first * D:(first + hkv) * D], v[first * D:(first + hkv) * D]])


def _qkv_weight(Hq, Hkv, D, C, dtype, seed):
    # rows numbered, so a wrong row is easy to name: row i of the merged matrix starts with i
    w = torch.randn((Hq + 2 * Hkv) * D, C, generator=_gen(seed), dtype=dtype)
    w[:, 0] = torch.arange(w.shape[0], dtype=dtype)
    return w


def _row_names(Hq, Hkv, D) -> list[str]:
    return ([f"q head {h}" for h in range(Hq) for _ in range(D)]
            + [f"k head {h}" for h in range(Hkv) for _ in range(D)]
            + [f"v head {h}" for h in range(Hkv) for _ in range(D)])


@exercise("ch10.shard_qkv", "rank r holds its query heads, then the KV heads they read, for k "
                            "and for v")
def _qkv_split(fn: Callable) -> None:
    for i, (Hq, Hkv, D, C, W) in enumerate(_QKV_CASES):
        if Hkv < W:
            continue
        _compare_qkv(fn, Hq, Hkv, D, C, W, torch.float32, 400 + i)


@exercise("ch10.shard_qkv", "with fewer KV heads than ranks, each rank holds the one KV head "
                            "its query heads read (replicated)")
def _qkv_replicated(fn: Callable) -> None:
    for i, (Hq, Hkv, D, C, W) in enumerate(_QKV_CASES):
        if Hkv >= W:
            continue
        _compare_qkv(fn, Hq, Hkv, D, C, W, torch.float64, 500 + i)


def _compare_qkv(fn, Hq, Hkv, D, C, W, dtype, seed) -> None:
    w = _qkv_weight(Hq, Hkv, D, C, dtype, seed)
    names = _row_names(Hq, Hkv, D)
    for rank in range(W):
        want = _qkv_reference(w, Hq, Hkv, D, rank, W)
        got = fn(w.clone(), Hq, Hkv, D, rank, W)
        expect_shape(got, tuple(want.shape),
                     f"shard_qkv(weight {tuple(w.shape)}, Hq={Hq}, Hkv={Hkv}, D={D}, "
                     f"rank={rank}, world_size={W})")
        if not torch.equal(got, want):
            j = int((got != want).any(-1).nonzero()[0])
            src = got[j, 0]
            held = names[int(src)] if float(src).is_integer() and 0 <= src < len(names) \
                else "a row that is not in the weight"
            raise CheckFailed(f"rank {rank} of {W} (Hq={Hq}, Hkv={Hkv}, D={D}): its row {j} "
                              f"should be {names[int(want[j, 0])]}, got {held}")


@exercise("ch10.shard_qkv", "its q/k/v blocks, as the layer splits them, give the rank's heads "
                            "of the full projection")
def _qkv_product(fn: Callable) -> None:
    Hq, Hkv, D, C, W = 8, 2, 4, 16, 2
    w = torch.randn((Hq + 2 * Hkv) * D, C, generator=_gen(7))
    x = torch.randn(3, C, generator=_gen(8))
    full_q, full_k, _ = F.linear(x, w).split([Hq * D, Hkv * D, Hkv * D], dim=-1)
    for rank in range(W):
        q, k, _ = F.linear(x, fn(w, Hq, Hkv, D, rank, W)).split(
            [Hq // W * D, Hkv // W * D, Hkv // W * D], dim=-1)
        expect_close(q, full_q.view(3, Hq, D)[:, rank * Hq // W:(rank + 1) * Hq // W].reshape(
            3, -1), f"rank {rank}'s queries")
        expect_close(k, full_k.view(3, Hkv, D)[:, rank:rank + 1].reshape(3, -1),
                     f"rank {rank}'s keys")
