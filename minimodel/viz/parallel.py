"""Plots for chapter 10: how tensor parallelism splits a Linear and a Qwen3 decoder block.

`block_layout(cfg, world_size)` says what each rank of a block holds (its query heads, its KV
heads, its columns of the intermediate size) and what crosses the wire, from the same rules the
package's layers use (`minimodel.layers.local_heads`, `qkv_shard_rows`); the drawings only show
it. Every drawing function returns the matplotlib Figure. Nothing here is timed.

Shapes: T tokens, C hidden, O out-features, W ranks, Hq/Hkv query/KV heads, D head dim,
I intermediate size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from minimodel.layers import local_heads

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from minimodel.config import Qwen3Config

REPLICATED = "#d9d9d9"  # every rank holds all of it
WIRE = "#d62728"  # an all-reduce


def rank_colors(n: int) -> list[Any]:
    """One colour per rank (matplotlib's tab10 without its red, which marks the wire)."""
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    return [cmap(i) for i in (0, 2, 1, 4, 5, 6, 8, 9)][:n] + [cmap(7)] * max(0, n - 8)


def _spans(text: str, items: list[int]) -> str:
    """'q heads 2-3' style: a run of consecutive numbers as first-last."""
    if not items:
        return f"{text} none"
    if items == list(range(items[0], items[-1] + 1)) and len(items) > 1:
        return f"{text} {items[0]}-{items[-1]}"
    return f"{text} {', '.join(map(str, items))}"


def _kv_word(shard: RankShard) -> str:
    return "KV heads" if len(shard.kv_heads) > 1 else "KV head"


@dataclass(frozen=True)
class RankShard:
    """What one rank of a tensor-parallel decoder block holds."""

    rank: int
    q_heads: list[int]  # query heads it computes
    kv_heads: list[int]  # KV heads it holds (and caches); shared with others when replicated
    columns: tuple[int, int]  # [first, last + 1) of the intermediate size (gate, up, down)
    weight_bytes: int  # this rank's weights of one block (projections and norms)
    kv_bytes_per_token: int  # K and V of its KV heads, one layer, one token


@dataclass(frozen=True)
class BlockLayout:
    """One decoder block split over `world_size` ranks, and its two all-reduces."""

    world_size: int
    ranks: list[RankShard]
    kv_replicas: int  # ranks that hold each KV head
    allreduce_bytes_per_token: int  # one all-reduce: C numbers per token
    allreduces_per_block: int  # after o_proj and after down_proj


def block_layout(cfg: Qwen3Config, world_size: int,
                 dtype: torch.dtype = torch.bfloat16) -> BlockLayout:
    """What each rank of one decoder block holds and what one all-reduce carries per token."""
    C, D, I = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size  # noqa: E741
    Hq, Hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    hq, hkv, replicas = local_heads(Hq, Hkv, world_size)
    i_local = I // world_size
    b = dtype.itemsize
    ranks = []
    for r in range(world_size):
        kv_first = r // replicas * hkv  # as minimodel.layers.qkv_shard_rows picks them
        weights = ((hq + 2 * hkv) * D * C  # q/k/v rows
                   + C * hq * D  # o_proj columns
                   + 3 * i_local * C  # gate and up rows, down_proj columns
                   + 2 * D + 2 * C)  # q_norm, k_norm, the two RMSNorms (replicated)
        ranks.append(RankShard(r, list(range(r * hq, (r + 1) * hq)),
                               list(range(kv_first, kv_first + hkv)),
                               (r * i_local, (r + 1) * i_local), weights * b, 2 * hkv * D * b))
    return BlockLayout(world_size, ranks, replicas, C * b, 2)


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=figsize, layout="constrained")
        return fig, ax
    return ax.figure, ax  # type: ignore[return-value]


def _matrix(ax: Axes, x: float, y: float, rows: int, cols: int, colors: list[Any], title: str,
            note: str, by: str | None, face: Any = None) -> None:
    """A rows x cols grid at (x, y) (top-left), cells coloured by rank along `by` ("rows" or
    "cols"), or all in `face` (grey by default: every rank has it). `title` goes above, `note`
    (what a rank holds) below."""
    from matplotlib.patches import Rectangle

    for i in range(rows):
        for j in range(cols):
            if by == "rows":
                color = colors[i * len(colors) // rows]
            elif by == "cols":
                color = colors[j * len(colors) // cols]
            else:
                color = REPLICATED if face is None else face
            ax.add_patch(Rectangle((x + j, y + i), 1, 1, facecolor=color, edgecolor="white"))
    ax.text(x + cols / 2, y - 0.3, title, ha="center", va="bottom", fontsize=9,
            fontweight="bold")
    ax.text(x + cols / 2, y + rows + 0.3, note, ha="center", va="top", fontsize=7.5)


def plot_linear_splits(out_features: int = 6, in_features: int = 8, world_size: int = 2,
                       tokens: int = 3) -> Figure:
    """y = x @ W.T with W [O, C], split two ways over W ranks, one colour per rank.

    Top, column parallel: rank r holds rows r·O/W.. of W and, from all of x, computes its
    columns of y; put side by side they are y, nothing is summed. Bottom, row parallel: rank r
    holds columns r·C/W.. of W and the same slice of x's features; its product is a partial y
    of full size, and the W partials are summed (the all-reduce).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    O, C, W, T = out_features, in_features, world_size, tokens  # noqa: E741
    colors = rank_colors(W)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.4), layout="constrained")
    gap = 3.0
    xw, xy = C + gap, 2 * C + 2 * gap

    def arrows(ax, at_w: float, at_y: float) -> None:
        ax.text(at_w - gap / 2, T / 2, "@ Wᵀ", ha="center", va="center", fontsize=11)
        ax.text(at_y - gap / 2, T / 2, "→", ha="center", va="center", fontsize=14)

    _matrix(top, 0, 0, T, C, colors, "x [T, C]", "every rank has all of x", None)
    _matrix(top, xw, 0, O, C, colors, "W [O, C]", "rank r holds its O/W rows", "rows")
    _matrix(top, xy, 0, T, O, colors, "y [T, O]", "rank r computes its O/W columns;\n"
            "side by side they are y: no communication", "cols")
    arrows(top, xw, xy)
    top.set_title("column parallel (qkv_proj, gate_up_proj)", loc="left")

    _matrix(bottom, 0, 0, T, C, colors, "x [T, C]", "rank r has its C/W features", "cols")
    _matrix(bottom, xw, 0, O, C, colors, "W [O, C]", "rank r holds its C/W columns", "cols")
    for r in range(W):
        at = xy + r * (O + 1.5)
        _matrix(bottom, at, 0, T, O, colors, f"rank {r}'s partial y", "[T, O], full size",
                None, face=colors[r])
        if r:
            bottom.text(at - 0.75, T / 2, "+", ha="center", va="center", fontsize=14)
    arrows(bottom, xw, xy)
    bottom.text(xy, T + 2.2, f"all-reduce: the {W} partials are summed,\nand every rank "
                "gets all of y", ha="left", va="top", fontsize=9, color=WIRE,
                fontweight="bold")
    bottom.set_title("row parallel (o_proj, down_proj)", loc="left")

    width = max(xy + O, xy + W * (O + 1.5))
    for ax in (top, bottom):
        ax.set_xlim(-0.5, width + 0.5)
        ax.set_ylim(max(O, T) + 2.0, -1.2)
        ax.set_aspect("equal")
        ax.axis("off")
    fig.legend(handles=[Patch(color=c, label=f"rank {r}") for r, c in enumerate(colors)]
               + [Patch(color=REPLICATED, label="every rank")], loc="outside lower center",
               ncols=W + 1, fontsize=8, frameon=False)
    return fig


def plot_tp_block(cfg: Qwen3Config, world_size: int, dtype: torch.dtype = torch.bfloat16,
                  name: str = "", ax: Axes | None = None) -> Figure:
    """One Qwen3 decoder block under tensor parallelism: a column per rank, top to bottom.

    Coloured boxes are what a rank holds alone (its query heads, its KV heads, its columns of
    the intermediate size); grey boxes are replicated on every rank; the red bars are the two
    all-reduces, labelled with what each one carries per token.
    """
    from matplotlib.patches import FancyBboxPatch

    lay = block_layout(cfg, world_size, dtype)
    W = world_size
    colors = rank_colors(W)
    per_token = lay.allreduce_bytes_per_token
    C, D = cfg.hidden_size, cfg.head_dim
    stages: list[tuple[str, Any]] = [
        ("x [T, C], the residual stream", None),
        ("input_layernorm", None),
        ("qkv_proj (column)", lambda s: f"{_spans('q heads', s.q_heads)}; "
                                        f"{_spans(_kv_word(s), s.kv_heads)}"),
        ("attention (per head)", lambda s: f"its {len(s.q_heads)} of {cfg.num_attention_heads} "
                                           f"heads: [T, {len(s.q_heads) * D}]"),
        ("o_proj (row)", lambda s: f"its {len(s.q_heads) * D} inputs -> partial [T, {C}]"),
        ("ALL-REDUCE 1", "wire"),
        ("+ residual, post_attention_layernorm", None),
        ("gate_up_proj (column)", lambda s: f"gate and up columns {s.columns[0]}-"
                                            f"{s.columns[1] - 1}"),
        ("SwiGLU (elementwise)", lambda s: f"[T, {s.columns[1] - s.columns[0]}], local"),
        ("down_proj (row)", lambda s: f"inputs {s.columns[0]}-{s.columns[1] - 1} -> partial "
                                      f"[T, {C}]"),
        ("ALL-REDUCE 2", "wire"),
        ("+ residual -> the next block", None),
    ]
    width, gap = 3.4, 0.3
    fig, ax = _axes(ax, (2.2 + W * 2.6, 0.52 * len(stages) + 1.6))
    for row, (label, what) in enumerate(stages):
        y = row
        ax.text(-0.2, y + 0.4, label, ha="right", va="center", fontsize=8,
                color=WIRE if what == "wire" else "black",
                fontweight="bold" if what == "wire" else "normal")
        if what == "wire":
            total = W * (width + gap) - gap
            ax.add_patch(FancyBboxPatch((0, y + 0.15), total, 0.5, boxstyle="round,pad=0.02",
                                        facecolor=WIRE, edgecolor="none", alpha=0.85))
            ax.text(total / 2, y + 0.4,
                    f"sum of the {W} partials [T, {C}] ({str(dtype)[6:]}): "
                    f"{per_token:,d} bytes per token" if W > 1 else
                    "one rank: nothing to sum", ha="center", va="center", fontsize=8,
                    color="white", fontweight="bold")
            continue
        for r, shard in enumerate(lay.ranks):
            x = r * (width + gap)
            face = REPLICATED if what is None else colors[r]
            ax.add_patch(FancyBboxPatch((x, y + 0.1), width, 0.6, boxstyle="round,pad=0.02",
                                        facecolor=face, edgecolor="white",
                                        alpha=1.0 if what is None else 0.8))
            text = "same on every rank" if what is None else what(shard)
            ax.text(x + width / 2, y + 0.4, text, ha="center", va="center", fontsize=7,
                    color="black" if what is None else "white")
    for r, shard in enumerate(lay.ranks):
        ax.text(r * (width + gap) + width / 2, -0.35,
                f"rank {r}: {shard.weight_bytes / 2**20:.2f} MiB of the block's weights,\n"
                f"KV cache {shard.kv_bytes_per_token} B per token in this layer", ha="center",
                va="bottom", fontsize=8,
                color=colors[r], fontweight="bold")
    ax.set_xlim(-0.2, W * (width + gap))
    ax.set_ylim(len(stages) + 0.1, -1.3)
    ax.axis("off")
    replicated = f", each KV head on {lay.kv_replicas} ranks" if lay.kv_replicas > 1 else ""
    n = lay.allreduces_per_block
    ax.set_title(f"{name + ': ' if name else ''}one decoder block on {W} rank(s){replicated}; "
                 f"{n} all-reduces, {n * per_token:,d} bytes per token", fontsize=9)
    return fig
