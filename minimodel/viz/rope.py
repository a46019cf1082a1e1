"""Plots for chapter 02: how fast each RoPE pair turns, and what that does to attention scores.

Every function draws with the package's own RoPE (`minimodel.ops`) and returns the matplotlib
Figure; pass `ax` to draw into an existing axes instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from minimodel.ops import rope_cos_sin, rope_inv_freq

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=figsize, layout="constrained")
        return fig, ax
    return ax.figure, ax  # type: ignore[return-value]


def wavelengths(head_dim: int, theta: float) -> torch.Tensor:
    """Positions per full turn of each pair: 2*pi / theta^(-2i/D), float32 [D/2]."""
    return 2 * math.pi / rope_inv_freq(head_dim, theta)


def plot_wavelengths(
    head_dim: int,
    thetas: Sequence[float] = (10_000.0, 1_000_000.0),
    context: int | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Wavelength (positions per full turn) of each of the D/2 pairs, log scale, per theta.

    With `context`, a dashed line marks the context length: pairs above it never complete a
    turn inside one sequence, so they measure coarse distance without ever repeating.
    """
    fig, ax = _axes(ax, (6.5, 3.6))
    pairs = torch.arange(head_dim // 2)
    for theta in thetas:
        ax.plot(pairs, wavelengths(head_dim, theta), marker="o", markersize=3,
                label=f"theta = {theta:g}")
    if context is not None:
        ax.axhline(context, color="gray", linestyle="--", linewidth=1)
        ax.text(0, context * 1.3, f"context length {context}", color="gray", fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("pair index i (dimension i pairs with i + D/2)")
    ax.set_ylabel("wavelength (positions per turn)")
    ax.set_title(f"RoPE wavelengths, head_dim D = {head_dim}")
    ax.legend()
    ax.grid(True, which="major", alpha=0.3)
    return fig


def plot_cos_over_positions(
    head_dim: int,
    theta: float,
    pairs: Sequence[int] = (0, 2, 4, 8),
    max_position: int = 64,
    ax: Axes | None = None,
) -> Figure:
    """cos(position * frequency) over positions 0..max_position for a few pairs."""
    fig, ax = _axes(ax, (6.5, 3.2))
    positions = torch.arange(max_position + 1)
    cos, _ = rope_cos_sin(positions, head_dim, theta)  # [T, D]
    for i in pairs:
        ax.plot(positions, cos[:, i], label=f"pair {i}")
    ax.set_xlabel("position")
    ax.set_ylabel("cos(position x frequency)")
    ax.set_title(f"RoPE cos table, D = {head_dim}, theta = {theta:g}")
    ax.legend(loc="lower left", fontsize=8)
    return fig


def score_vs_distance(head_dim: int, theta: float, max_distance: int) -> torch.Tensor:
    """Expected q·k / |q|^2 when k = q is a random vector and q sits d positions after k.

    Each pair of a random vector carries the same share of |q|^2 on average, and RoPE turns
    pair i by d * f_i, so the expectation is the mean of cos(d * f_i) over the D/2 pairs.
    float32 [max_distance + 1], for d = 0..max_distance.
    """
    cos, _ = rope_cos_sin(torch.arange(max_distance + 1), head_dim, theta)  # [d, D]
    return cos[:, : head_dim // 2].mean(-1)


def plot_score_vs_distance(
    head_dim: int,
    thetas: Sequence[float] = (10_000.0, 1_000_000.0),
    max_distance: int = 2048,
    ax: Axes | None = None,
) -> Figure:
    """score_vs_distance for each theta, on a log distance axis."""
    fig, ax = _axes(ax, (6.5, 3.2))
    for theta in thetas:
        scores = score_vs_distance(head_dim, theta, max_distance)
        ax.plot(torch.arange(1, max_distance + 1), scores[1:], label=f"theta = {theta:g}")
    ax.set_xscale("log")
    ax.set_xlabel("distance m - n (positions)")
    ax.set_ylabel("expected q·k / |q|² (k = q)")
    ax.set_title(f"Scores fall as tokens move apart, D = {head_dim}")
    ax.legend()
    ax.grid(True, alpha=0.3)
    return fig


def rope_explorer(head_dim: int = 128, context: int = 40960) -> Any:
    """A widget: a theta slider and a head-dim picker over the wavelength and score plots.

    Returns an `ipywidgets.interactive`; display it in a notebook (needs ipywidgets).
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    def draw(theta: float, head_dim: int) -> None:
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4), layout="constrained")
        plot_wavelengths(head_dim, thetas=(theta,), context=context, ax=left)
        plot_score_vs_distance(head_dim, thetas=(theta,), max_distance=context, ax=right)
        plt.show()

    return widgets.interactive(
        draw,
        theta=widgets.FloatLogSlider(value=1e6, base=10, min=3, max=7, step=0.25,
                                     description="theta"),
        head_dim=widgets.Dropdown(options=sorted({32, 64, 128, head_dim}), value=head_dim,
                                  description="head_dim D"),
    )
