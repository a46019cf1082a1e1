"""Plots for chapter 07: the paged KV pool, FlashInfer's page-table arrays, causal masks for
chunked prefill, and a step button that decodes and redraws.

A page holds S = page_size tokens; request i's pages are its page table. Every drawing function
returns the matplotlib Figure; pass `ax` to draw into an existing axes instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from minimodel.engine.kv_cache import pages_needed
from minimodel.ops import causal_mask

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from minimodel.engine.attention import AttentionMetadata

FREE_COLOR = "#f4f4f4"


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=figsize, layout="constrained")
        return fig, ax
    return ax.figure, ax  # type: ignore[return-value]


def request_colors(n: int) -> list[Any]:
    """One distinct colour per request (matplotlib's tab10, repeating after 10)."""
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def _lighten(color: Any, amount: float) -> tuple[float, float, float]:
    """Mix a colour with white: amount 0 keeps it, 1 gives white."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


def plot_page_pool(
    page_tables: Sequence[Sequence[int]],
    kv_lens: Sequence[int],
    num_pages: int,
    page_size: int,
    q_lens: Sequence[int] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """The pool as a grid: one column per page (its id below), one row per slot offset.

    A slot of request i shows the position of the token whose K/V it holds, in request i's
    colour: pale for tokens cached by earlier steps, full colour for the q_lens[i] tokens
    written in this step, hatched for pages a request owns but has not filled yet. Free pages
    are grey.
    """
    from matplotlib.patches import Patch, Rectangle

    fig, ax = _axes(ax, (max(4.0, 0.55 * num_pages + 1.5), 0.45 * page_size + 1.6))
    colors = request_colors(len(page_tables))
    q_lens = q_lens if q_lens is not None else [0] * len(page_tables)
    for p in range(num_pages):
        for off in range(page_size):
            ax.add_patch(Rectangle((p, off), 1, 1, facecolor=FREE_COLOR, edgecolor="#cccccc"))
    for i, (pages, n, q) in enumerate(zip(page_tables, kv_lens, q_lens, strict=True)):
        for k, page in enumerate(pages):
            for off in range(page_size):
                pos = k * page_size + off
                if pos < n:
                    new = pos >= n - q
                    face = colors[i] if new else _lighten(colors[i], 0.6)
                    ax.add_patch(Rectangle((page, off), 1, 1, facecolor=face, edgecolor="white"))
                    ax.text(page + 0.5, off + 0.5, str(pos), ha="center", va="center",
                            fontsize=7, color="white" if new else "black")
                else:
                    ax.add_patch(Rectangle((page, off), 1, 1, facecolor="white",
                                           edgecolor=colors[i], hatch="///", linewidth=0.5))
        for page in pages:  # a frame around each page the request owns
            ax.add_patch(Rectangle((page, 0), 1, page_size, fill=False, edgecolor=colors[i],
                                   linewidth=1.5))
    ax.set_xlim(0, num_pages)
    ax.set_ylim(page_size, 0)  # offset 0 at the top
    ax.set_xticks([p + 0.5 for p in range(num_pages)], [str(p) for p in range(num_pages)])
    ax.set_yticks([o + 0.5 for o in range(page_size)], [str(o) for o in range(page_size)])
    ax.tick_params(length=0, labelsize=8)
    ax.set_xlabel("page id in the pool")
    ax.set_ylabel("offset in page")
    ax.set_aspect("equal")
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)
    handles = [
        Patch(color=colors[i], label=f"request {i}: {n} tokens, pages {list(pages)}")
        for i, (pages, n) in enumerate(zip(page_tables, kv_lens, strict=True))
    ]
    handles.append(Patch(facecolor=FREE_COLOR, edgecolor="#cccccc", label="free"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8,
              frameon=False)
    ax.set_title(title or f"KV pool: {num_pages} pages of {page_size} slots")
    return fig


def plot_kv_indices(
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_last_page_len: torch.Tensor,
    ax: Axes | None = None,
) -> Figure:
    """FlashInfer's page-table arrays as one strip: kv_indices boxes coloured by request, with
    kv_indptr marking where each request starts and kv_last_page_len under its last page."""
    from matplotlib.patches import Rectangle

    indptr = [int(x) for x in kv_indptr]
    P = len(kv_indices)
    fig, ax = _axes(ax, (max(4.0, 0.6 * P + 1.5), 2.0))
    colors = request_colors(len(indptr) - 1)
    for i in range(len(indptr) - 1):
        for j in range(indptr[i], indptr[i + 1]):
            ax.add_patch(Rectangle((j, 0), 1, 1, facecolor=colors[i], edgecolor="white"))
            ax.text(j + 0.5, 0.5, str(int(kv_indices[j])), ha="center", va="center",
                    color="white", fontsize=9, fontweight="bold")
        last = indptr[i + 1] - 1
        ax.text(last + 0.5, -0.35, f"last: {int(kv_last_page_len[i])}", ha="center",
                va="center", fontsize=7, color=colors[i])
    for i, x in enumerate(indptr):
        ax.plot([x, x], [1.0, 1.45], color="black", linewidth=1)
        ax.text(x, 1.65, f"indptr[{i}]={x}", ha="center", va="bottom", fontsize=7, rotation=30)
    ax.set_xlim(-0.6, max(P, 1) + 0.6)
    ax.set_ylim(-0.7, 2.6)
    ax.set_xticks([j + 0.5 for j in range(P)], [str(j) for j in range(P)])
    ax.tick_params(length=0, labelsize=7)
    ax.set_yticks([])
    ax.set_xlabel("index into kv_indices (the value in a box is a page id)")
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title("kv_indices, cut into requests by kv_indptr")
    return fig


def plot_metadata(metadata: AttentionMetadata, num_pages: int) -> Figure:
    """One step's batch drawn from its metadata alone: the pool above, the arrays below."""
    import matplotlib.pyplot as plt

    indptr = metadata.kv_indptr.tolist()
    tables = [metadata.kv_indices[indptr[i] : indptr[i + 1]].tolist()
              for i in range(len(indptr) - 1)]
    S = metadata.page_size
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(max(6.0, 0.6 * num_pages + 4), 0.45 * S + 4.2), layout="constrained",
        height_ratios=[S + 1.5, 3.0],
    )
    plot_page_pool(tables, metadata.kv_lens, num_pages, S, metadata.q_lens, ax=top,
                   title="the pool: pale = cached before, full colour = written this step")
    plot_kv_indices(metadata.kv_indptr, metadata.kv_indices, metadata.kv_last_page_len,
                    ax=bottom)
    return fig


def causal_masks(kv_len: int, q_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(bottom-right, top-left) Bool [Q, K] masks for q_len new tokens over kv_len keys.

    Bottom-right (right): new token j is token K-Q+j of the sequence and sees keys 0..K-Q+j.
    Top-left (wrong once K > Q): new token j sees keys 0..j, as if the chunk started the text.
    """
    j = torch.arange(q_len)[:, None]
    keys = torch.arange(kv_len)[None, :]
    return causal_mask(q_len, kv_len), keys <= j


def plot_causal_masks(kv_len: int, q_len: int) -> Figure:
    """Side by side: the bottom-right mask a chunk of new tokens needs, and the top-left one."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    right, wrong = causal_masks(kv_len, q_len)
    fig, axes = plt.subplots(1, 2, figsize=(9, 1.0 + 0.55 * q_len), layout="constrained")
    cached = kv_len - q_len
    for ax, mask, name in ((axes[0], right, "bottom-right (correct)"),
                           (axes[1], wrong, "top-left (wrong for a chunk)")):
        ax.imshow(mask.int(), cmap=ListedColormap(["#eeeeee", "#1f77b4"]), vmin=0, vmax=1)
        for j in range(q_len):
            for s in range(kv_len):
                ax.text(s, j, "✓" if mask[j, s] else "", ha="center", va="center",
                        color="white", fontsize=9)
        ax.axvline(cached - 0.5, color="#d62728", linewidth=2)
        ax.set_xticks(range(kv_len))
        ax.set_yticks(range(q_len), [f"new {j} (pos {cached + j})" for j in range(q_len)])
        ax.set_xlabel(f"key position (0..{cached - 1} cached | {cached}..{kv_len - 1} new)")
        ax.set_title(f"{name}: K={kv_len}, Q={q_len}")
    return fig


def plot_reservations(used: Sequence[int], max_len: int, page_size: int) -> Figure:
    """Tokens each request really holds vs what a contiguous buffer of max_len tokens reserves
    vs what pages of page_size reserve (the used tokens rounded up to whole pages)."""
    import matplotlib.pyplot as plt

    n = len(used)
    paged = [pages_needed(u, page_size) * page_size for u in used]
    fig, ax = plt.subplots(figsize=(9, 0.45 * n + 1.4), layout="constrained")
    rows = torch.arange(n).float()
    ax.barh(rows + 0.25, [max_len] * n, height=0.25, color="#d9d9d9",
            label=f"contiguous: reserve max_len = {max_len}")
    ax.barh(rows, paged, height=0.25, color="#ff7f0e", label=f"paged: whole pages of {page_size}")
    ax.barh(rows - 0.25, used, height=0.25, color="#1f77b4", label="tokens actually cached")
    ax.set_yticks(rows.tolist(), [f"request {i}" for i in range(n)])
    ax.invert_yaxis()
    ax.set_xlabel("tokens of KV memory")
    ax.set_title("KV memory reserved per request")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return fig


def step_button(
    step: Callable[[], str], draw: Callable[[], Figure], label: str = "decode one step"
) -> Any:
    """A button that calls step() (which returns a line of text), then shows draw()'s figure.

    Returns an ipywidgets VBox: [button, output]. The first picture is drawn at once.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    button = widgets.Button(description=label, icon="forward")
    out = widgets.Output()

    def redraw(note: str) -> None:
        with out:
            out.clear_output(wait=True)
            print(note)
            fig = draw()
            display(fig)
            plt.close(fig)

    def on_click(_: Any) -> None:
        redraw(step())

    button.on_click(on_click)
    redraw("press the button to decode one more token for every request")
    return widgets.VBox([button, out])
