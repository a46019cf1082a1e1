"""Chapter 01's checks: every wrong implementation learners write fails, every right one passes."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from minimodel.grading import check

# --- ch01.embed ----------------------------------------------------------------------------


def embed_solution(ids, table):
    return table[ids]


def embed_f_embedding(ids, table):
    return F.embedding(ids, table)


def embed_one_hot(ids, table):
    return F.one_hot(ids, table.shape[0]).to(table.dtype) @ table


def embed_index_select(ids, table):
    B, T = ids.shape
    return table.index_select(0, ids.reshape(-1)).view(B, T, -1)


def embed_loop(ids, table):
    return torch.stack([torch.stack([table[i] for i in row]) for row in ids])


CORRECT_EMBED = [embed_solution, embed_f_embedding, embed_one_hot, embed_index_select, embed_loop]


def embed_flat(ids, table):  # forgets to put the batch back: [B*T, C]
    return table[ids.reshape(-1)]


def embed_scaled(ids, table):  # the original Transformer's sqrt(d_model) scaling
    return table[ids] * table.shape[1] ** 0.5


def embed_off_by_one(ids, table):  # 1-based ids
    return table[(ids - 1).clamp(min=0)]


def embed_one_hot_float(ids, table):  # the one-hot trick without matching dtypes
    return F.one_hot(ids, table.shape[0]).float() @ table.float()


def embed_columns(ids, table):  # indexes the wrong axis
    return table[:, ids].permute(1, 2, 0)[..., : table.shape[1]]


def embed_fresh_module(ids, table):  # a new, randomly initialised nn.Embedding
    V, C = table.shape
    return torch.nn.Embedding(V, C).to(table.dtype)(ids)


def embed_first_row_only(ids, table):  # looks up the first sequence for every row
    return table[ids[0]].expand(ids.shape[0], -1, -1)


def embed_transposed(ids, table):  # [T, B, C]
    return table[ids.T]


def embed_clamped(ids, table):  # "the tokenizer has 151669 ids", so it clamps the rest away
    return table[ids.clamp(max=min(table.shape[0], 151669) - 2)]


def embed_in_place(ids, table):  # normalises the table in place
    table.div_(table.norm(dim=-1, keepdim=True).clamp(min=1e-6)).mul_(table.norm(dim=-1).mean())
    return table[ids]


WRONG_EMBED = [
    embed_flat, embed_scaled, embed_off_by_one, embed_one_hot_float, embed_columns,
    embed_fresh_module, embed_first_row_only, embed_transposed, embed_clamped, embed_in_place,
]


@pytest.mark.parametrize("fn", CORRECT_EMBED, ids=lambda f: f.__name__)
def test_embed_correct_passes(fn):
    result = check("ch01.embed", fn)
    assert result.passed, str(result)


@pytest.mark.parametrize("fn", WRONG_EMBED, ids=lambda f: f.__name__)
def test_embed_mutant_fails(fn):
    assert not check("ch01.embed", fn).passed


def test_embed_hints():
    assert "sqrt(C)" in str(check("ch01.embed", embed_scaled))
    assert "shifted by one row" in str(check("ch01.embed", embed_off_by_one))


# --- ch01.pack -----------------------------------------------------------------------------


def pack_solution(seqs):
    ids = torch.tensor([t for s in seqs for t in s], dtype=torch.long)
    indptr = torch.tensor([0] + [len(s) for s in seqs]).cumsum(0)
    return ids, indptr


def pack_cat(seqs):
    ids = torch.cat([torch.tensor(s, dtype=torch.long) for s in seqs])
    indptr = torch.zeros(len(seqs) + 1, dtype=torch.long)
    indptr[1:] = torch.tensor([len(s) for s in seqs]).cumsum(0)
    return ids, indptr


def pack_itertools(seqs):
    ids = torch.LongTensor(list(itertools.chain.from_iterable(seqs)))
    indptr = torch.LongTensor([0, *itertools.accumulate(len(s) for s in seqs)])
    return ids, indptr


def pack_loop(seqs):
    flat, indptr = [], [0]
    for s in seqs:
        flat.extend(s)
        indptr.append(indptr[-1] + len(s))
    return torch.tensor(flat), torch.tensor(indptr)


CORRECT_PACK = [pack_solution, pack_cat, pack_itertools, pack_loop]


def pack_lengths_not_offsets(seqs):  # indptr = lengths
    ids, _ = pack_solution(seqs)
    return ids, torch.tensor([len(s) for s in seqs])


def pack_no_leading_zero(seqs):  # ends only: [B]
    ids, indptr = pack_solution(seqs)
    return ids, indptr[1:]


def pack_starts_only(seqs):  # starts only: [B]
    ids, indptr = pack_solution(seqs)
    return ids, indptr[:-1]


def pack_inclusive_ends(seqs):  # last index instead of one past it
    ids, indptr = pack_solution(seqs)
    return ids, torch.cat([indptr[:1], indptr[1:] - 1])


def pack_int32(seqs):  # FlashInfer wants int32 later, but the contract here is Long
    ids, indptr = pack_solution(seqs)
    return ids.int(), indptr.int()


def pack_padded(seqs):  # pads to the longest, then flattens: padding sneaks into N
    T = max(len(s) for s in seqs)
    ids = torch.tensor([s + [0] * (T - len(s)) for s in seqs]).reshape(-1)
    return ids, torch.arange(len(seqs) + 1) * T


def pack_sorted(seqs):  # sorts by length, like a scheduler might, and loses the order
    return pack_solution(sorted(seqs, key=len, reverse=True))


def pack_list_output(seqs):  # returns lists, not tensors
    ids, indptr = pack_solution(seqs)
    return ids.tolist(), indptr.tolist()


def pack_float(seqs):  # torch.tensor of a list built with floats
    ids, indptr = pack_solution(seqs)
    return ids.float(), indptr


def pack_in_place(seqs):  # flattens by extending the first list
    first = seqs[0]
    for s in seqs[1:]:
        first.extend(s)
    lens = [len(s) for s in seqs]
    lens[0] = len(first) - sum(lens[1:])
    return torch.tensor(first), torch.tensor([0, *lens]).cumsum(0)


WRONG_PACK = [
    pack_lengths_not_offsets, pack_no_leading_zero, pack_starts_only, pack_inclusive_ends,
    pack_int32, pack_padded, pack_sorted, pack_list_output, pack_float, pack_in_place,
]


@pytest.mark.parametrize("fn", CORRECT_PACK, ids=lambda f: f.__name__)
def test_pack_correct_passes(fn):
    result = check("ch01.pack", fn)
    assert result.passed, str(result)


@pytest.mark.parametrize("fn", WRONG_PACK, ids=lambda f: f.__name__)
def test_pack_mutant_fails(fn):
    assert not check("ch01.pack", fn).passed


# --- ch01.packed_positions -----------------------------------------------------------------


def positions_solution(indptr):
    lens = indptr[1:] - indptr[:-1]
    starts = torch.repeat_interleave(indptr[:-1], lens)
    return torch.arange(int(indptr[-1])) - starts


def positions_loop(indptr):
    out = []
    for a, b in zip(indptr[:-1].tolist(), indptr[1:].tolist(), strict=True):
        out.extend(range(b - a))
    return torch.tensor(out, dtype=torch.long)


def positions_cat(indptr):
    return torch.cat([torch.arange(int(b - a)) for a, b in zip(indptr[:-1], indptr[1:])])


def positions_searchsorted(indptr):  # which sequence each token is in, then its offset
    n = torch.arange(int(indptr[-1]))
    seq = torch.searchsorted(indptr, n, right=True) - 1
    return n - indptr[seq]


def positions_cumsum(indptr):  # steps of 1 that jump back to 0 at every start
    N, lens = int(indptr[-1]), indptr[1:] - indptr[:-1]
    steps = torch.ones(N, dtype=torch.long)
    steps[indptr[:-1]] = 0
    steps[indptr[1:-1]] = 1 - lens[:-1]
    return steps.cumsum(0)


CORRECT_POSITIONS = [positions_solution, positions_loop, positions_cat, positions_searchsorted,
                     positions_cumsum]


def positions_global(indptr):  # never restarts
    return torch.arange(int(indptr[-1]))


def positions_one_based(indptr):
    return positions_solution(indptr) + 1


def positions_float(indptr):
    return positions_solution(indptr).float()


def positions_per_sequence(indptr):  # one entry per sequence (its length), not per token
    return indptr[1:] - indptr[:-1]


def positions_reversed(indptr):  # counts down to the end of each sequence
    lens = indptr[1:] - indptr[:-1]
    return torch.repeat_interleave(lens, lens) - 1 - positions_solution(indptr)


def positions_int32(indptr):
    return positions_solution(indptr).int()


def positions_in_place(indptr):
    out = positions_solution(indptr)
    indptr -= indptr[0].clone() + 1
    return out


def positions_from_ends(indptr):  # subtracts the wrong boundary: the next sequence's start
    lens = indptr[1:] - indptr[:-1]
    return torch.arange(int(indptr[-1])) - torch.repeat_interleave(indptr[1:], lens) + 1


def positions_skips_first_start(indptr):  # restarts at every boundary but forgets indptr[0]
    out = positions_solution(indptr)
    return torch.where(torch.arange(len(out)) < indptr[1], out + 1, out)


WRONG_POSITIONS = [
    positions_global, positions_one_based, positions_float, positions_per_sequence,
    positions_reversed, positions_int32, positions_in_place, positions_from_ends,
    positions_skips_first_start,
]


@pytest.mark.parametrize("fn", CORRECT_POSITIONS, ids=lambda f: f.__name__)
def test_positions_correct_passes(fn):
    result = check("ch01.packed_positions", fn)
    assert result.passed, str(result)


@pytest.mark.parametrize("fn", WRONG_POSITIONS, ids=lambda f: f.__name__)
def test_positions_mutant_fails(fn):
    assert not check("ch01.packed_positions", fn).passed


def test_positions_hints():
    assert "restarts at 0" in str(check("ch01.packed_positions", positions_global))
    assert "start at 1" in str(check("ch01.packed_positions", positions_one_based))


def test_stub_is_not_implemented():
    def stub(*args):
        raise NotImplementedError("your code here")

    for name in ("ch01.embed", "ch01.pack", "ch01.packed_positions"):
        result = check(name, stub)
        assert not result.implemented and not result.passed
