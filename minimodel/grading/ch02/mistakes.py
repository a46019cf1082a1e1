"""The mistakes learners make in chapter 02, as the tables and outputs they give, to name them
in a failure message: each dict maps "what went wrong" (a message, in both languages) to what
that mistake returns.

Shapes: T tokens, H heads, D head dim.
"""

from __future__ import annotations

import torch

from minimodel.grading.ch02.common import (
    _other_theta,
    _pairs_neighbours,
    _rope_half_reference,
    _tables,
    _turn_neighbours,
    rope_interleaved_reference,
)
from minimodel.grading.i18n import Text, tr
from minimodel.ops import apply_rope, rope_cos_sin


def _table_mistakes(positions: torch.Tensor, D: int, theta: float) -> dict[Text, tuple]:
    """(cos, sin) [T, D] of the classic wrong rope_tables variants, in float32."""
    T = len(positions)
    other_theta = _other_theta(theta)
    cos, sin = _tables(positions, D, theta)
    return {
        _pairs_neighbours(): _tables(positions, D, theta, interleaved=True),
        tr("uses the exponent i/D; the frequency of pair i is theta^(-2i/D)"):
            _tables(positions, D, theta, exponent=1.0),
        tr("uses theta^(+2i/D); the frequency of pair i is theta^(-2i/D), slower for larger i"):
            _tables(positions, D, theta, exponent=-2.0),
        tr("ignores theta (it looks like theta = {theta:g})", theta=other_theta):
            _tables(positions, D, other_theta),
        tr("ignores the positions it is given and uses 0, 1, ..., T-1"):
            _tables(torch.arange(T), D, theta),
        tr("is one position ahead: position p must rotate by p * frequency"):
            _tables(positions + 1, D, theta),
        tr("swaps cos and sin"): (sin, cos),
        tr("negates sin in the second half; the minus sign belongs to rotate_half, the table "
           "repeats the same angles"):
            (cos, torch.cat([sin[:, : D // 2], -sin[:, D // 2 :]], -1)),
        tr("negates sin in the first half; the minus sign belongs to rotate_half, the table "
           "repeats the same angles"):
            (cos, torch.cat([-sin[:, : D // 2], sin[:, D // 2 :]], -1)),
    }


def _rope_mistakes(x: torch.Tensor, positions: torch.Tensor, theta: float) -> dict[Text, object]:
    """Outputs [T, H, D] of the classic wrong apply_rope variants, in float32."""
    D = x.shape[-1]
    x32 = x.float()
    out = {}
    for hint, (cos, sin) in _table_mistakes(positions, D, theta).items():
        out[hint] = apply_rope(x32, cos, sin)
    out[_pairs_neighbours()] = rope_interleaved_reference(x32, positions, theta)
    cos, sin = rope_cos_sin(positions, D, theta)
    out[tr("rotates the wrong way: every pair turns by minus its angle (a sign in the turn of "
           "the pairs is flipped)")] = apply_rope(x32, cos, -sin)
    out[tr("returns x unrotated")] = x32
    return out


def _interleaved_mistakes(x: torch.Tensor, positions: torch.Tensor,
                          theta: float) -> dict[Text, object]:
    """Outputs [T, H, D] of the classic wrong interleaved variants, in float32."""
    D, T = x.shape[-1], len(positions)
    x32 = x.float()

    def turn(cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return _turn_neighbours(x32, cos, sin)

    cos, sin = _tables(positions, D, theta, interleaved=True)
    other_theta = _other_theta(theta)
    return {
        tr("pairs dimension i with i + D/2, Qwen3's rotate-half; this exercise pairs neighbours "
           "(2i, 2i+1)"): _rope_half_reference(x32, positions, theta),
        tr("pairs neighbours, but its angles are laid out as for rotate-half, so the two "
           "dimensions of a pair turn by different angles"): turn(*_tables(positions, D, theta)),
        tr("rotates the wrong way: every pair turns by minus its angle"): turn(cos, -sin),
        tr("uses the exponent i/D; the frequency of pair i is theta^(-2i/D)"):
            turn(*_tables(positions, D, theta, exponent=1.0, interleaved=True)),
        tr("ignores theta (it looks like theta = {theta:g})", theta=other_theta):
            turn(*_tables(positions, D, other_theta, interleaved=True)),
        tr("ignores the positions it is given and uses 0, 1, ..., T-1"):
            turn(*_tables(torch.arange(T), D, theta, interleaved=True)),
        tr("is one position ahead: position p must rotate by p * frequency"):
            turn(*_tables(positions + 1, D, theta, interleaved=True)),
        tr("returns x unrotated"): x32,
    }
