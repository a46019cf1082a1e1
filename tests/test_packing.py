"""minimodel.packing: pack/unpack are exact inverses and indptr is the running sum of lengths."""

from __future__ import annotations

import random

import pytest
import torch

from minimodel.packing import pack, unpack


def _random_batch(rng: random.Random, allow_empty: bool) -> list[list[int]]:
    B = rng.randint(1, 9)
    low = 0 if allow_empty else 1
    return [[rng.randrange(151936) for _ in range(rng.randint(low, 12))] for _ in range(B)]


@pytest.mark.parametrize("seed", range(20))
def test_roundtrip_and_layout(seed: int) -> None:
    rng = random.Random(seed)
    seqs = _random_batch(rng, allow_empty=seed % 2 == 0)
    ids, indptr = pack(seqs)
    assert ids.dtype == torch.long and indptr.dtype == torch.long
    assert ids.shape == (sum(map(len, seqs)),)
    assert indptr.shape == (len(seqs) + 1,)
    assert indptr[0] == 0 and indptr[-1] == ids.numel()
    assert (indptr[1:] - indptr[:-1]).tolist() == [len(s) for s in seqs]
    for i, s in enumerate(seqs):
        assert ids[indptr[i] : indptr[i + 1]].tolist() == s
    assert unpack(ids, indptr) == seqs


def test_packed_equals_padded_without_the_padding() -> None:
    seqs = [[5, 6, 7], [8], [9, 10]]
    ids, indptr = pack(seqs)
    T = max(map(len, seqs))
    padded = torch.tensor([s + [0] * (T - len(s)) for s in seqs])  # [B, T]
    mask = torch.tensor([[1] * len(s) + [0] * (T - len(s)) for s in seqs]).bool()
    assert torch.equal(padded[mask], ids)  # row-major order of real tokens == packed order
    assert indptr.tolist() == [0, 3, 4, 6]


def test_edge_cases() -> None:
    ids, indptr = pack([])
    assert ids.shape == (0,) and ids.dtype == torch.long and indptr.tolist() == [0]
    assert unpack(ids, indptr) == []
    ids, indptr = pack([[], [3], []])
    assert ids.tolist() == [3] and indptr.tolist() == [0, 0, 1, 1]
    assert unpack(ids, indptr) == [[], [3], []]
    ids, indptr = pack([[1], [2], [3]])  # a decode batch: one new token per request
    assert indptr.tolist() == [0, 1, 2, 3]


def test_inputs_are_not_modified() -> None:
    seqs = [[1, 2], [3]]
    pack(seqs)
    assert seqs == [[1, 2], [3]]


@pytest.mark.parametrize(
    "ids, indptr",
    [
        (torch.arange(5), torch.tensor([0, 2, 4])),  # indptr[-1] != N
        (torch.arange(6).view(2, 3), torch.tensor([0, 6])),  # ids not 1-D
        (torch.arange(3), torch.tensor([], dtype=torch.long)),  # no indptr at all
    ],
)
def test_unpack_rejects_inconsistent_input(ids: torch.Tensor, indptr: torch.Tensor) -> None:
    with pytest.raises(ValueError, match="indptr"):
        unpack(ids, indptr)
