"""Checks of ch10.shard_qkv: the rows of the merged q/k/v weight rank r keeps, its query heads
and then the KV heads they read, replicated when there are fewer KV heads than ranks.

The weight's rows are numbered (row i starts with i), so that a wrong row is named by what it
holds."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from minimodel.grading.ch10.common import _gen
from minimodel.grading.core import CheckFailed, exercise, expect_close, expect_shape
from minimodel.grading.i18n import Text, tr

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


def _row_names(Hq, Hkv, D) -> list[Text]:
    q = [tr("q head {h}", h=h) for h in range(Hq)]
    k = [tr("k head {h}", h=h) for h in range(Hkv)]
    v = [tr("v head {h}", h=h) for h in range(Hkv)]
    return ([q[h] for h in range(Hq) for _ in range(D)]
            + [k[h] for h in range(Hkv) for _ in range(D)]
            + [v[h] for h in range(Hkv) for _ in range(D)])


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
                else tr("a row that is not in the weight")
            raise CheckFailed(tr("rank {rank} of {world} (Hq={Hq}, Hkv={Hkv}, D={D}): its row {j} "
                                 "should be {want}, got {held}", rank=rank, world=W, Hq=Hq,
                                 Hkv=Hkv, D=D, j=j, want=names[int(want[j, 0])], held=held))


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
            3, -1), tr("rank {rank}'s queries", rank=rank))
        expect_close(k, full_k.view(3, Hkv, D)[:, rank:rank + 1].reshape(3, -1),
                     tr("rank {rank}'s keys", rank=rank))
