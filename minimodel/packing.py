"""Packing: a ragged batch of token sequences as one flat tensor plus offsets.

Padding B sequences to the longest gives [B, T] ids and an attention mask, and every padded slot
is computed and thrown away. The engine instead concatenates the sequences into one [N] tensor
(N = total tokens) and keeps `indptr` [B+1], the offsets where each sequence starts: sequence i
is `ids[indptr[i]:indptr[i+1]]`. FlashInfer calls this array `qo_indptr`.
"""

from __future__ import annotations

import torch


def pack(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate B token sequences: (ids Long [N], indptr Long [B+1]).

    indptr[0] = 0, indptr[i+1] = indptr[i] + len(seqs[i]), indptr[B] = N. An empty sequence is
    allowed and shows as two equal neighbours in indptr.
    """
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)  # [B]
    indptr = torch.zeros(len(seqs) + 1, dtype=torch.long)  # [B+1]
    indptr[1:] = lengths.cumsum(0)
    ids = torch.tensor([t for s in seqs for t in s], dtype=torch.long)  # [N]
    return ids, indptr


def unpack(ids: torch.Tensor, indptr: torch.Tensor) -> list[list[int]]:
    """The inverse of `pack`: ids [N] and indptr [B+1] -> B lists of token ids."""
    if ids.dim() != 1 or indptr.dim() != 1 or indptr.numel() == 0 or int(indptr[-1]) != len(ids):
        raise ValueError(
            f"unpack expects ids [N] and indptr [B+1] with indptr[-1] == N; got ids of shape "
            f"{tuple(ids.shape)} and indptr {indptr.tolist()}"
        )
    flat, bounds = ids.tolist(), indptr.tolist()
    return [flat[start:end] for start, end in zip(bounds[:-1], bounds[1:], strict=True)]
