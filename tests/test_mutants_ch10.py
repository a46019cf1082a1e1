"""Chapter 10's checks: every wrong implementation fails, every right one (in any style) passes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from minimodel.grading import check

# --- column_parallel_linear ----------------------------------------------------------------------


def col_ok(x, weight, bias, rank, world_size):
    w = weight.chunk(world_size, dim=0)[rank]
    b = None if bias is None else bias.chunk(world_size)[rank]
    return F.linear(x, w, b)


def col_ok_slices(x, weight, bias, rank, world_size):
    n = weight.shape[0] // world_size
    y = x @ weight[rank * n:(rank + 1) * n].T
    return y if bias is None else y + bias[rank * n:(rank + 1) * n]


def col_full_then_slice(x, weight, bias, rank, world_size):
    return F.linear(x, weight, bias).tensor_split(world_size, dim=-1)[rank]


def col_interleaved(x, weight, bias, rank, world_size):
    b = None if bias is None else bias[rank::world_size]
    return F.linear(x, weight[rank::world_size], b)


def col_bias_unsplit(x, weight, bias, rank, world_size):
    y = x @ weight.chunk(world_size, dim=0)[rank].T
    return y if bias is None else y + bias[: y.shape[-1]]


def col_split_inputs(x, weight, bias, rank, world_size):
    w = weight.chunk(world_size, dim=1)[rank]
    return x.chunk(world_size, dim=-1)[rank] @ w.T


def col_reversed(x, weight, bias, rank, world_size):
    return col_ok(x, weight, bias, world_size - 1 - rank, world_size)


def col_in_place(x, weight, bias, rank, world_size):
    if bias is not None:
        bias.mul_(1.0)
        weight.add_(0.0)
        x.mul_(2.0)
        x.div_(2.0)
        weight[0, 0] += 1.0
        weight[0, 0] -= 1.0
    out = col_ok(x, weight, bias, rank, world_size)
    if bias is not None:
        x.add_(1.0)
    return out


# --- row_parallel_linear -------------------------------------------------------------------------


def row_ok(x_shard, weight, bias, rank, world_size):
    y = x_shard @ weight.chunk(world_size, dim=1)[rank].T
    return y + bias if bias is not None and rank == 0 else y


def row_ok_linear(x_shard, weight, bias, rank, world_size):
    cols = weight.shape[1] // world_size
    w = weight[:, rank * cols:(rank + 1) * cols]
    return F.linear(x_shard, w, bias if rank == 0 else None)


def row_ok_einsum(x_shard, weight, bias, rank, world_size):
    w = weight.tensor_split(world_size, dim=1)[rank]
    y = torch.einsum("nc,oc->no", x_shard, w)
    if rank == 0 and bias is not None:
        y = y + bias
    return y


def row_bias_every_rank(x_shard, weight, bias, rank, world_size):
    return F.linear(x_shard, weight.chunk(world_size, dim=1)[rank], bias)


def row_bias_divided(x_shard, weight, bias, rank, world_size):
    y = x_shard @ weight.chunk(world_size, dim=1)[rank].T
    return y if bias is None else y + bias / world_size  # sums right, but not rank 0 only


def row_no_bias(x_shard, weight, bias, rank, world_size):
    return x_shard @ weight.chunk(world_size, dim=1)[rank].T


def row_interleaved(x_shard, weight, bias, rank, world_size):
    y = x_shard @ weight[:, rank::world_size].T
    return y + bias if bias is not None and rank == 0 else y


def row_wrong_rank(x_shard, weight, bias, rank, world_size):
    return row_ok(x_shard, weight, bias, (rank + 1) % world_size, world_size) \
        if world_size > 1 else row_ok(x_shard, weight, bias, rank, world_size) * 1.5


# --- vocab_parallel_embedding --------------------------------------------------------------------


def emb_ok(ids, shard, rank, world_size, vocab_size):
    start = rank * -(-vocab_size // world_size)
    mine = (ids >= start) & (ids < start + shard.shape[0])
    rows = F.embedding(torch.where(mine, ids - start, 0), shard)
    return rows * mine.unsqueeze(-1).to(shard.dtype)


def emb_ok_index(ids, shard, rank, world_size, vocab_size):
    per = (vocab_size + world_size - 1) // world_size
    local = ids - rank * per
    out = shard.new_zeros(*ids.shape, shard.shape[1])
    hit = (local >= 0) & (local < len(shard))
    out[hit] = shard[local[hit]]
    return out


def emb_ok_onehot(ids, shard, rank, world_size, vocab_size):
    per = -(-vocab_size // world_size)
    local = ids - rank * per
    onehot = (local.unsqueeze(-1) == torch.arange(len(shard))).to(shard.dtype)
    return onehot @ shard


def emb_no_mask(ids, shard, rank, world_size, vocab_size):
    start = rank * -(-vocab_size // world_size)
    return shard[(ids - start).clamp(0, shard.shape[0] - 1)]


def emb_floor_shards(ids, shard, rank, world_size, vocab_size):
    start = rank * (vocab_size // world_size)  # V // W rows each: wrong unless W divides V
    mine = (ids >= start) & (ids < start + shard.shape[0])
    return torch.where(mine.unsqueeze(-1), shard[torch.where(mine, ids - start, 0)], 0)


def emb_off_by_one(ids, shard, rank, world_size, vocab_size):
    start = rank * -(-vocab_size // world_size)
    mine = (ids >= start) & (ids <= start + shard.shape[0] - 1 - (rank == 0))
    return torch.where(mine.unsqueeze(-1), shard[torch.where(mine, ids - start, 0)], 0)


def emb_mask_but_local_ids_wrong(ids, shard, rank, world_size, vocab_size):
    start = rank * -(-vocab_size // world_size)
    mine = (ids >= start) & (ids < start + shard.shape[0])
    return torch.where(mine.unsqueeze(-1), shard[torch.where(mine, ids % shard.shape[0], 0)], 0)


def emb_strided(ids, shard, rank, world_size, vocab_size):
    mine = ids % world_size == rank  # ids dealt round-robin: not how the table was split
    return torch.where(mine.unsqueeze(-1), shard[torch.where(mine, ids // world_size, 0)
                                                 .clamp(max=len(shard) - 1)], 0)


# --- shard_qkv -----------------------------------------------------------------------------------


def qkv_ok(weight, num_heads, num_kv_heads, head_dim, rank, world_size):
    D = head_dim
    q, k, v = weight.split([num_heads * D, num_kv_heads * D, num_kv_heads * D])
    q = q.chunk(world_size)[rank]
    if num_kv_heads >= world_size:
        k, v = k.chunk(world_size)[rank], v.chunk(world_size)[rank]
    else:
        h = rank * num_kv_heads // world_size
        k, v = k[h * D:(h + 1) * D], v[h * D:(h + 1) * D]
    return torch.cat([q, k, v])


def qkv_ok_heads(weight, Hq, Hkv, D, rank, W):
    """Via head views: [H, D, C] per block."""
    C = weight.shape[1]
    q = weight[: Hq * D].view(Hq, D, C)
    k = weight[Hq * D: (Hq + Hkv) * D].view(Hkv, D, C)
    v = weight[(Hq + Hkv) * D:].view(Hkv, D, C)
    hq = Hq // W
    heads_q = list(range(rank * hq, (rank + 1) * hq))
    groups = Hq // Hkv
    heads_kv = sorted({h // groups for h in heads_q})
    return torch.cat([q[heads_q].reshape(-1, C), k[heads_kv].reshape(-1, C),
                      v[heads_kv].reshape(-1, C)])


def qkv_even_split(weight, Hq, Hkv, D, rank, W):
    return weight.chunk(W)[rank]  # the classic bug: rank 0 gets all of q, none of k and v


def qkv_kv_modulo(weight, Hq, Hkv, D, rank, W):
    q, k, v = weight.split([Hq * D, Hkv * D, Hkv * D])
    if Hkv >= W:
        return torch.cat([q.chunk(W)[rank], k.chunk(W)[rank], v.chunk(W)[rank]])
    h = rank % Hkv  # the KV head of another rank's queries
    return torch.cat([q.chunk(W)[rank], k[h * D:(h + 1) * D], v[h * D:(h + 1) * D]])


def qkv_no_replication(weight, Hq, Hkv, D, rank, W):
    q, k, v = weight.split([Hq * D, Hkv * D, Hkv * D])
    return torch.cat([q.chunk(W)[rank], k.tensor_split(W)[rank], v.tensor_split(W)[rank]])


def qkv_k_twice(weight, Hq, Hkv, D, rank, W):
    out = qkv_ok(weight, Hq, Hkv, D, rank, W)
    kv = out.shape[0] - Hq // W * D
    return torch.cat([out[: Hq // W * D + kv // 2], out[Hq // W * D: Hq // W * D + kv // 2]])


def qkv_heads_interleaved(weight, Hq, Hkv, D, rank, W):
    q, k, v = weight.split([Hq * D, Hkv * D, Hkv * D])
    C = weight.shape[1]
    qh = q.view(Hq, D, C)[rank::W].reshape(-1, C)  # heads dealt round-robin
    if Hkv >= W:
        kh, vh = k.view(Hkv, D, C)[rank::W], v.view(Hkv, D, C)[rank::W]
        return torch.cat([qh, kh.reshape(-1, C), vh.reshape(-1, C)])
    h = rank // (W // Hkv)
    return torch.cat([qh, k[h * D:(h + 1) * D], v[h * D:(h + 1) * D]])


CASES = {
    "ch10.column_parallel_linear": (
        [col_ok, col_ok_slices, col_full_then_slice],
        [col_interleaved, col_bias_unsplit, col_split_inputs, col_reversed, col_in_place],
    ),
    "ch10.row_parallel_linear": (
        [row_ok, row_ok_linear, row_ok_einsum],
        [row_bias_every_rank, row_bias_divided, row_no_bias, row_interleaved, row_wrong_rank],
    ),
    "ch10.vocab_parallel_embedding": (
        [emb_ok, emb_ok_index, emb_ok_onehot],
        [emb_no_mask, emb_floor_shards, emb_off_by_one, emb_mask_but_local_ids_wrong,
         emb_strided],
    ),
    "ch10.shard_qkv": (
        [qkv_ok, qkv_ok_heads],
        [qkv_even_split, qkv_kv_modulo, qkv_no_replication, qkv_k_twice,
         qkv_heads_interleaved],
    ),
}


@pytest.mark.parametrize("name, fn", [(n, f) for n, (ok, _) in CASES.items() for f in ok],
                         ids=lambda v: getattr(v, "__name__", v))
def test_correct_solutions_pass(name, fn):
    result = check(name, fn)
    assert result.passed, [(o.title, o.message) for o in result.outcomes if not o.passed]


@pytest.mark.parametrize("name, fn", [(n, f) for n, (_, bad) in CASES.items() for f in bad],
                         ids=lambda v: getattr(v, "__name__", v))
def test_mutants_fail(name, fn):
    assert not check(name, fn).passed


@pytest.mark.parametrize("name", list(CASES))
def test_stub_is_todo_not_an_error(name):
    def stub(*args):
        raise NotImplementedError

    result = check(name, stub)
    assert not result.passed
    assert all(o.status == "todo" for o in result.outcomes)
