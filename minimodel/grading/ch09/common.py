"""What several of chapter 09's checks share: the tolerance and how a result is compared with
the float64 one, and the checks every kernel's result passes (a pair of tensors, its inputs
left unchanged)."""

from __future__ import annotations

import torch

from minimodel.grading.core import expect
from minimodel.grading.i18n import tr

_TOL = 1e-5  # float32 against float64, as the chapter promises: <= 1e-5


def _close(got: torch.Tensor, want: torch.Tensor, tol: float = _TOL) -> bool:
    """got equals want within tol (absolute and relative), compared in float64."""
    return bool(torch.allclose(got.double(), want.double(), atol=tol, rtol=tol))


def _worst(got: torch.Tensor, want: torch.Tensor) -> float:
    """The largest |got - want| (inf where it is not a number)."""
    return float((got.double() - want.double()).abs().nan_to_num(float("inf")).max())


def _pair(out: object, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The (output, lse) a function returned, after checking it is a pair of tensors."""
    expect(isinstance(out, (tuple, list)) and len(out) == 2,
           tr("{what} should return a tuple (o, lse), got {got}", what=what,
              got=type(out).__name__))
    assert isinstance(out, (tuple, list))
    o, lse = out
    for name, t in (("o", o), ("lse", lse)):
        expect(isinstance(t, torch.Tensor),
               tr("{what}: {name} should be a torch.Tensor, got {got}", what=what, name=name,
                  got=type(t).__name__))
    return o, lse


def _unchanged(inputs: tuple[torch.Tensor, ...], copies: tuple[torch.Tensor, ...],
               what: str) -> None:
    """Fail unless every input still equals the copy taken before the call."""
    same = all(torch.equal(a, b) for a, b in zip(inputs, copies, strict=True))
    expect(same, tr("{what} changed one of its inputs; compute into new tensors (a kernel reads "
                    "q, k, v and the states, and writes only its outputs)", what=what))
