"""Checks for chapter 01, tokens and embeddings: embed, pack, packed_positions.

Shapes: B sequences, T tokens per sequence, N packed tokens, V vocabulary rows, C hidden size.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator

import torch

from minimodel.grading.common import clip, first_difference
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import Text, tr
from minimodel.packing import pack as reference_pack

QWEN3_V = 151936  # rows of Qwen3's embedding table

# --- ch01.embed ----------------------------------------------------------------------------

# (B, T, V, C): a single token, small tables, and the real Qwen3 vocabulary size.
EMBED_CASES = [(1, 1, 7, 3), (2, 5, 50, 8), (3, 4, 1000, 16), (2, 6, QWEN3_V, 8)]
EMBED_DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _embed_inputs(
    B: int, T: int, V: int, C: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids [B, T] (0 and V-1 among them) and a random table [V, C] in `dtype`."""
    table = torch.randn(V, C).to(dtype)  # [V, C]
    ids = torch.randint(0, V, (B, T))  # [B, T]
    ids.view(-1)[0] = 0  # the first and the last row of the table are always asked for
    ids.view(-1)[-1] = V - 1
    return ids, table


def _embed_hint(out: torch.Tensor, ids: torch.Tensor, table: torch.Tensor) -> Text | str:
    """Say which classic mistake `out` looks like, or "" when none fits."""
    want = table[ids].float()
    C = table.shape[1]
    guesses = [
        (tr("; it looks like every vector is multiplied by sqrt(C): Qwen3 does not scale its "
            "embeddings"), want * C**0.5),
        (tr("; it looks shifted by one row: id i must read row i (ids start at 0)"),
         table[(ids - 1) % table.shape[0]].float()),
    ]
    for hint, guess in guesses:
        if out.shape == guess.shape and torch.allclose(out.float(), guess, atol=1e-2, rtol=1e-2):
            return hint
    return ""


def _embed_runs(fn: Callable) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(ids, table, fn(ids, table)) for every case and dtype, once the output's shape is checked
    to be [B, T, C]."""
    for B, T, V, C in EMBED_CASES:
        for dtype in EMBED_DTYPES:
            ids, table = _embed_inputs(B, T, V, C, dtype)
            out = fn(ids, table)
            expect_shape(out, (B, T, C), f"embed(ids [{B}, {T}], table [{V}, {C}])")
            yield ids, table, out


@exercise("ch01.embed", "returns [B, T, C] in the table's dtype, for several sizes and dtypes")
def _embed_shape(fn: Callable) -> str:
    for _, table, out in _embed_runs(fn):
        expect(out.dtype == table.dtype,
               tr("with a {dtype} table the embeddings should be {dtype}, got {got}",
                  dtype=table.dtype, got=out.dtype))
    return tr("{n} cases", n=len(EMBED_CASES) * len(EMBED_DTYPES))


@exercise("ch01.embed", "out[b, t] is row ids[b, t] of the table, exactly")
def _embed_values(fn: Callable) -> str:
    for ids, table, out in _embed_runs(fn):
        want = table[ids]  # [B, T, C]
        bad = (out.float() - want.float()).abs().amax(-1) > 0  # [B, T]
        if bad.any():
            b, t = (int(i) for i in bad.nonzero()[0])
            (B, T), (V, C) = ids.shape, table.shape
            raise CheckFailed(tr(
                "with ids [{B}, {T}] and a [{V}, {C}] {dtype} table, out[{b}, {t}] should be row "
                "{row} of the table, but it is not{hint}",
                B=B, T=T, V=V, C=C, dtype=table.dtype, b=b, t=t, row=int(ids[b, t]),
                hint=_embed_hint(out, ids, table)))
    return tr("checked every position, ids 0 and V-1 included")


@exercise("ch01.embed", "leaves ids and the table unchanged")
def _embed_pure(fn: Callable) -> None:
    ids, table = _embed_inputs(2, 5, 64, 8, torch.float32)
    ids0, table0 = ids.clone(), table.clone()
    fn(ids, table)
    expect(torch.equal(ids, ids0), tr("embed changed the ids tensor it was given"))
    expect(torch.equal(table, table0), tr("embed changed the embedding table it was given"))


# --- ch01.pack -----------------------------------------------------------------------------


def _ragged_batches() -> list[list[list[int]]]:
    """Random ragged batches (every sequence at least one token), plus the special shapes."""
    rng = random.Random(torch.randint(0, 2**31, ()).item())
    batches = []
    for B in (1, 2, 3, 5, 8):
        batches.append(
            [[rng.randrange(QWEN3_V) for _ in range(rng.randint(1, 17))] for _ in range(B)]
        )
    batches.append([[rng.randrange(QWEN3_V)] for _ in range(6)])  # decode: one token each
    batches.append([[rng.randrange(QWEN3_V) for _ in range(40)]])  # one long prompt
    batches.append([[7, 7, 7], [7], [7, 7]])  # equal ids: only the lengths tell them apart
    return batches


def _pack_of(seqs: list[list[int]]) -> Text:
    """How a call of pack on `seqs` is named in a message."""
    n = len(seqs)
    return tr("pack of {n} sequence", n=n) if n == 1 else tr("pack of {n} sequences", n=n)


def _unpack_result(out: object, what: Text) -> tuple[torch.Tensor, torch.Tensor]:
    """pack's result, checked to be a tuple (ids, indptr) of 1-D Long tensors."""
    expect(isinstance(out, (tuple, list)) and len(out) == 2,
           tr("{what} should return a tuple (ids, indptr), got {got}", what=what,
              got=type(out).__name__))
    ids, indptr = out  # type: ignore[misc]
    for name, t in (("ids", ids), ("indptr", indptr)):
        expect(isinstance(t, torch.Tensor),
               tr("{what}: {name} should be a torch.Tensor, got {got}", what=what, name=name,
                  got=type(t).__name__))
        expect(t.dtype == torch.long, tr("{what}: {name} should be torch.long, got {got}",
                                         what=what, name=name, got=t.dtype))
        expect(t.dim() == 1, tr("{what}: {name} should be 1-D, got shape {shape}", what=what,
                                name=name, shape=tuple(t.shape)))
    return ids, indptr


@exercise("ch01.pack", "returns ids Long[N] and indptr Long[B+1]")
def _pack_types(fn: Callable) -> str:
    batches = _ragged_batches()
    for seqs in batches:
        lens = [len(s) for s in seqs]
        ids, indptr = _unpack_result(fn(seqs), _pack_of(seqs))
        N, B = sum(lens), len(seqs)
        expect_shape(ids, (N,), tr("ids for sequences of lengths {lens}", lens=lens))
        expect_shape(indptr, (B + 1,),
                     tr("indptr for {B} sequences (one start per sequence plus the end)", B=B))
    return tr("{n} batches", n=len(batches))


@exercise("ch01.pack", "indptr starts at 0, grows by each length and ends at N")
def _pack_indptr(fn: Callable) -> None:
    for seqs in _ragged_batches():
        lens = [len(s) for s in seqs]
        _, indptr = _unpack_result(fn(seqs), _pack_of(seqs))
        want = reference_pack(seqs)[1]
        expect(indptr.tolist() == want.tolist(),
               tr("for lengths {lens}, indptr should be {want} (0, then running sums of the "
                  "lengths), got {got}", lens=lens, want=want.tolist(), got=indptr.tolist()))


@exercise("ch01.pack", "ids[indptr[i]:indptr[i+1]] is sequence i, in the original order")
def _pack_ids(fn: Callable) -> None:
    for seqs in _ragged_batches():
        ids, indptr = _unpack_result(fn(seqs), _pack_of(seqs))
        want, got = reference_pack(seqs)[0].tolist(), ids.tolist()
        lens = [len(s) for s in seqs]
        expect(len(got) == len(want),
               tr("for lengths {lens}, ids should hold the {want} real tokens and nothing else "
                  "(no padding), got {got} ids", lens=lens, want=len(want), got=len(got)))
        if got != want:
            k = first_difference(got, want)
            i = next(i for i in range(len(seqs)) if k < sum(lens[: i + 1]))
            raise CheckFailed(tr(
                "for lengths {lens}, ids[{k}] should be token {j} of sequence {i} ({want}), got "
                "{got}: ids holds the sequences one after the other, in their original order",
                lens=lens, k=k, j=k - sum(lens[:i]), i=i, want=want[k], got=got[k]))


@exercise("ch01.pack", "leaves the input lists unchanged")
def _pack_pure(fn: Callable) -> None:
    seqs = [[1, 2, 3], [4], [5, 6]]
    before = copy.deepcopy(seqs)
    fn(seqs)
    expect(seqs == before, tr("pack changed its input: {before} became {after}", before=before,
                              after=seqs))


# --- ch01.packed_positions -----------------------------------------------------------------


def _positions_of(lens: list[int]) -> list[int]:
    """The grader's own packed positions: 0..n-1 for a sequence of n tokens, one after another."""
    return [p for n in lens for p in range(n)]


def _indptr_cases() -> list[list[int]]:
    """Lists of sequence lengths (each >= 1)."""
    rng = random.Random(torch.randint(0, 2**31, ()).item())
    cases = [[rng.randint(1, 20) for _ in range(B)] for B in (1, 2, 4, 7)]
    cases += [[1] * 5, [33], [3, 1, 4, 1, 5]]  # decode batch, one prompt, mixed
    return cases


@exercise("ch01.packed_positions", "returns Long[N], one position per packed token")
def _pos_shape(fn: Callable) -> None:
    for lens in _indptr_cases():
        indptr = torch.tensor([0, *lens]).cumsum(0)  # [B+1]
        out = fn(indptr)
        expect_shape(out, (sum(lens),), tr("positions for lengths {lens}", lens=lens))
        expect(out.dtype == torch.long,
               tr("positions should be torch.long, got {got}", got=out.dtype))


@exercise("ch01.packed_positions", "every sequence counts its own positions from 0")
def _pos_values(fn: Callable) -> None:
    for lens in _indptr_cases():
        indptr = torch.tensor([0, *lens]).cumsum(0)
        out = fn(indptr)
        expect_shape(out, (sum(lens),), tr("positions for lengths {lens}", lens=lens))
        want = _positions_of(lens)
        got = out.tolist()
        if got != want:
            hint: Text | str = ""
            if got == list(range(sum(lens))):
                hint = tr(": the positions keep counting across sequences; each restarts at 0")
            elif got == [p + 1 for p in want]:
                hint = tr(": they start at 1; the first token of a sequence is at position 0")
            raise CheckFailed(tr(
                "for lengths {lens} (indptr {indptr}) the positions should be {want}, got "
                "{got}{hint}", lens=lens, indptr=indptr.tolist(), want=clip(want, 16),
                got=clip(got, 16), hint=hint))


@exercise("ch01.packed_positions", "leaves indptr unchanged")
def _pos_pure(fn: Callable) -> None:
    indptr = torch.tensor([0, 3, 4, 9])
    fn(indptr)
    expect(indptr.tolist() == [0, 3, 4, 9],
           tr("packed_positions changed the indptr it was given"))

