"""Checks of ch10.vocab_parallel_embedding: each rank holds ceil(V / W) rows of the table, looks
up the ids in its range and returns zeros for the others, so that the ranks' results add up (the
all-reduce) to table[ids]. The ranks are simulated in one process."""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.ch10.common import _gen
from minimodel.grading.core import CheckFailed, exercise, expect, expect_close, expect_shape
from minimodel.grading.i18n import tr

_DTYPES = (torch.float32, torch.float64)
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
                    why = (tr("it belongs to this rank") if mine[wrong][0] else
                           tr("it belongs to another rank, so this rank's row must be zeros"))
                    raise CheckFailed(tr(
                        "rank {rank} of {world} (V={V}, its shard holds ids {first}..{last}) is "
                        "wrong for id {bad}: {why}", rank=rank, world=W, V=V, first=rank * Vp,
                        last=rank * Vp + shard.shape[0] - 1, bad=bad, why=why))


@exercise("ch10.vocab_parallel_embedding", "summed over the ranks (the all-reduce) it is the "
                                           "lookup table[ids], also when W does not divide V")
def _emb_sum(fn: Callable) -> None:
    for i in range(len(_EMB_CASES)):
        table, ids, W = _emb_case(i, torch.float32)
        total = sum(fn(ids, _shard(table, r, W), r, W, table.shape[0]) for r in range(W))
        expect_close(total, table[ids], tr("sum over {world} ranks (V={V})", world=W,
                                           V=table.shape[0]), atol=0, rtol=0)


@exercise("ch10.vocab_parallel_embedding", "leaves ids and the shard unchanged")
def _emb_pure(fn: Callable) -> None:
    table, ids, W = _emb_case(1, torch.float32)
    shard = _shard(table, 1, W)
    copies = (ids.clone(), shard.clone())
    fn(ids, shard, 1, W, table.shape[0])
    expect(torch.equal(ids, copies[0]) and torch.equal(shard, copies[1]),
           tr("vocab_parallel_embedding changed ids or the shard in place"))
