"""What several of chapter 02's checks share: the positions, head dims and thetas they draw,
the grader's own cos/sin tables and RoPE in both conventions, how positions are written in a
message, and the comparison that names a known mistake.

Shapes: T tokens, H heads, D head dim. Qwen3 uses the rotate-half convention: dimension i is
paired with dimension i + D/2; the interleaved one (RoFormer, GPT-J) pairs neighbours (2i, 2i+1).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.core import CheckFailed, expect_close
from minimodel.grading.i18n import Text, join, tr
from minimodel.ops import apply_rope, rope_cos_sin

HEAD_DIMS = (2, 8, 32, 64, 128)
THETAS = (10_000.0, 1_000_000.0)
# float32 angles of positions up to ~2000 carry about 2e-4 rad of rounding, and two correct
# implementations may round differently; the classic mistakes are off by 0.1 to 2.
ATOL = 2e-3
LOW_PRECISION = {torch.bfloat16: 3e-2, torch.float16: 5e-3}  # x in [-4, 4]: a few ulps


def _pairs_neighbours() -> Text:
    """What a table or a rotation in the interleaved convention does, said as a mistake."""
    return tr("pairs neighbours (2i, 2i+1) as in the RoFormer paper; Qwen3 pairs dimension i "
              "with i + D/2, so columns i and i + D/2 carry the same angle")


def _positions() -> list[torch.Tensor]:
    """Position vectors: from 0, a later chunk, a single decode step, and unsorted ones."""
    return [
        torch.arange(7),  # a prompt
        torch.arange(5) + 37,  # the next chunk of a prompt
        torch.tensor([1000]),  # one decode step, far into a sequence
        torch.randint(0, 2048, (9,)),  # packed tokens of several sequences: any order
    ]


def _cases() -> list[tuple[torch.Tensor, int, float]]:
    """(positions, head_dim, theta) over every head dim, theta and kind of positions."""
    return [(p, D, theta) for D in HEAD_DIMS for theta in THETAS for p in _positions()]


def _pos_text(positions: torch.Tensor) -> str:
    """The positions as a list, the first five only when there are more than six."""
    pos = positions.tolist()
    return str(pos) if len(pos) <= 6 else "[" + ", ".join(map(str, pos[:5])) + ", ...]"


def _describe(positions: torch.Tensor, D: int, theta: float) -> str:
    """The arguments of a rope_tables call, as written in a message."""
    return f"positions {_pos_text(positions)}, head_dim {D}, theta {theta:g}"


def _other_theta(theta: float) -> float:
    """The other of Qwen3's two thetas: what a function that ignores theta seems to use."""
    return 10_000.0 if theta != 10_000.0 else 1_000_000.0


def _tables(positions: torch.Tensor, D: int, theta: float, exponent: float = 2.0,
            interleaved: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [T, D] in float32, optionally built the wrong way."""
    i = torch.arange(D // 2, dtype=torch.float32)
    inv_freq = theta ** (-exponent * i / D)  # [D/2]
    angles = positions.float()[:, None] * inv_freq[None, :]  # [T, D/2]
    if interleaved:
        angles = angles.repeat_interleave(2, dim=-1)  # [a0, a0, a1, a1, ...]
    else:
        angles = torch.cat([angles, angles], dim=-1)  # [a0 .. a_{D/2-1}, a0 .. a_{D/2-1}]
    return angles.cos(), angles.sin()


def _rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    """(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...): each neighbour pair turned by 90°."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([-x2, x1], dim=-1).flatten(-2)


def _turn_neighbours(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, D] with each neighbour pair (2i, 2i+1) turned by the tables cos/sin [T, D]."""
    return x * cos[:, None] + _rotate_every_two(x) * sin[:, None]


def rope_interleaved_reference(x: torch.Tensor, positions: torch.Tensor,
                               theta: float) -> torch.Tensor:
    """RoPE with neighbour pairs (2i, 2i+1), pair i turned by p * theta^(-2i/D): [T, H, D]."""
    cos, sin = _tables(positions, x.shape[-1], theta, interleaved=True)  # [T, D]
    return _turn_neighbours(x.float(), cos, sin).to(x.dtype)


def _rope_half_reference(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Qwen3's rotate-half RoPE, as minimodel.ops runs it: [T, H, D]."""
    return apply_rope(x, *rope_cos_sin(positions, x.shape[-1], theta))


def _it_does(mistake: Text) -> Text:
    """"; it <what went wrong>": a mistake named at the end of a failure message."""
    return tr("; it {mistake}", mistake=mistake)


def _hint(actual: torch.Tensor, mistakes: dict[str, object], atol: float) -> Text | str:
    """"; it <what went wrong>" for the first known mistake that `actual` matches, else ""."""
    for hint, wrong in mistakes.items():
        if isinstance(wrong, tuple):
            continue
        assert isinstance(wrong, torch.Tensor)
        if wrong.shape == actual.shape and torch.allclose(actual.float(), wrong, atol=atol):
            return _it_does(hint)
    return ""


def _expect_rope_close(actual: object, expected: torch.Tensor, what: str,
                       hint: Callable[[], str], atol: float) -> None:
    """expect_close, with hint() appended to the failure when `actual` has the right shape."""
    try:
        expect_close(actual, expected, what, atol=atol, rtol=atol)
    except CheckFailed as e:
        extra = hint() if isinstance(actual, torch.Tensor) and actual.shape == expected.shape \
            else ""
        message = e.args[0] if e.args and isinstance(e.args[0], Text) else str(e)
        raise CheckFailed(join("", [message, extra])) from None
