"""Plots for chapter 12: the prefix cache's radix tree, and the KV pool with pages that several
requests share.

Every drawing function returns the matplotlib Figure; pass `ax` to draw into an existing axes
instead (several snapshots of a tree that grows side by side, for instance).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from minimodel.viz.kv_pages import FREE_COLOR, _axes, _lighten, request_colors

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from minimodel.engine.radix_cache import Node, RadixCache

HELD_COLOR = "#4c72b0"  # a node some request holds
EVICTABLE_COLOR = "#b7dfb0"  # a node only the tree holds
TREE_COLOR = "#8fbc8f"  # a page only the tree holds, in the pool picture


def _layout(root: Node) -> dict[int, tuple[float, int]]:
    """id(node) -> (x, depth): leaves one unit apart in depth-first order (children in key
    order), each parent centred over its children."""
    where: dict[int, tuple[float, int]] = {}
    next_x = [0.0]

    def place(node: Node, depth: int) -> float:
        kids = [node.children[k] for k in sorted(node.children)]
        if not kids:
            x = next_x[0]
            next_x[0] += 1
        else:
            xs = [place(c, depth + 1) for c in kids]
            x = (xs[0] + xs[-1]) / 2
        where[id(node)] = (x, depth)
        return x

    place(root, 0)
    return where


def draw_radix_tree(
    cache: RadixCache,
    ax: Axes | None = None,
    title: str | None = None,
    label: Callable[[tuple[int, ...]], str] | None = None,
) -> Figure:
    """The tree as boxes: each node shows its pages and the time it was last used; `label`
    turns a node's token ids into a short text shown above its pages (default: the first ids).
    Blue: a request holds its pages; green: only the tree does (evictable once it is a leaf)."""
    from matplotlib.patches import FancyBboxPatch, Patch

    where = _layout(cache.root)
    depth = max(d for _, d in where.values())
    width = max(x for x, _ in where.values()) + 1
    fig, ax = _axes(ax, (max(4.0, 1.9 * width + 1), 1.3 * depth + 1.6))
    refs = cache.allocator.refs
    S = cache.page_size

    def text_of(key: tuple[int, ...]) -> str:
        if label is not None:
            return label(key)
        ids = ",".join(str(t) for t in key[:3])
        return ids + ("…" if len(key) > 3 else "")

    stack = [cache.root]
    while stack:
        node = stack.pop()
        x, d = where[id(node)]
        for child in node.children.values():
            cx, cd = where[id(child)]
            ax.plot([x, cx], [-d, -cd], color="#999999", linewidth=1, zorder=1)
            stack.append(child)
        if node.parent is None:
            ax.text(x, -d, "root", ha="center", va="center", fontsize=8,
                    bbox=dict(boxstyle="round", facecolor="#eeeeee", edgecolor="#999999"))
            continue
        held = any(refs[p] > 1 for p in node.pages)
        face = HELD_COLOR if held else EVICTABLE_COLOR
        ax.add_patch(FancyBboxPatch((x - 0.42, -d - 0.3), 0.84, 0.6, zorder=2,
                                    boxstyle="round,pad=0.02", facecolor=face,
                                    edgecolor="#333333", linewidth=0.8))
        pages = ",".join(map(str, node.pages))
        ax.text(x, -d + 0.1, text_of(node.key), ha="center", va="center", fontsize=7,
                color="white" if held else "black", zorder=3)
        ax.text(x, -d - 0.13, f"pages {pages}", ha="center", va="center", fontsize=7,
                color="white" if held else "black", zorder=3, fontweight="bold")
        ax.text(x + 0.44, -d + 0.3, f"t={node.last_used}", ha="left", va="bottom", fontsize=6,
                color="#666666", zorder=3)
    ax.set_xlim(-0.6, width - 0.4)
    ax.set_ylim(-depth - 0.55, 0.45)
    ax.axis("off")
    ax.legend(handles=[Patch(color=HELD_COLOR, label="held by a request"),
                       Patch(color=EVICTABLE_COLOR, label="only the tree: evictable")],
              loc="lower left", fontsize=7, frameon=False)
    ax.set_title(title or f"radix tree: {cache.num_pages} pages of {S} tokens", fontsize=9)
    return fig


def plot_shared_pool(
    page_tables: Sequence[Sequence[int]],
    kv_lens: Sequence[int],
    refs: Sequence[int],
    page_size: int,
    ax: Axes | None = None,
    title: str | None = None,
    names: Sequence[str] | None = None,
) -> Figure:
    """The pool as in chapter 07 (one column per page, one row per slot, each slot the position
    of the token it holds), with pages that several requests share split into their colours,
    pages only the tree holds in green, and each page's reference count above it."""
    from matplotlib.patches import Patch, Rectangle

    num_pages = len(refs)
    fig, ax = _axes(ax, (max(5.0, 0.55 * num_pages + 3.5), 0.45 * page_size + 1.8))
    colors = request_colors(len(page_tables))
    owners: dict[int, list[int]] = {}
    for i, pages in enumerate(page_tables):
        for k, page in enumerate(pages):
            if k * page_size < kv_lens[i]:
                owners.setdefault(page, []).append(i)
    for p in range(num_pages):
        holders = owners.get(p, [])
        for off in range(page_size):
            if not holders:
                face = _lighten(TREE_COLOR, 0.3) if refs[p] else FREE_COLOR
                ax.add_patch(Rectangle((p, off), 1, 1, facecolor=face, edgecolor="#cccccc"))
                continue
            w = 1 / len(holders)
            for j, i in enumerate(holders):
                ax.add_patch(Rectangle((p + j * w, off), w, 1, edgecolor="white",
                                       facecolor=_lighten(colors[i], 0.35)))
        if refs[p]:
            ax.text(p + 0.5, -0.25, f"×{refs[p]}", ha="center", va="bottom", fontsize=7,
                    color="#d62728" if len(holders) > 1 else "#333333")
    for i, pages in enumerate(page_tables):
        for k, page in enumerate(pages):
            for off in range(page_size):
                pos = k * page_size + off
                if pos < kv_lens[i] and owners[page][0] == i:
                    ax.text(page + 0.5, off + 0.5, str(pos), ha="center", va="center",
                            fontsize=7)
    ax.set_xlim(0, num_pages)
    ax.set_ylim(page_size, -0.9)
    ax.set_xticks([p + 0.5 for p in range(num_pages)], [str(p) for p in range(num_pages)])
    ax.set_yticks([o + 0.5 for o in range(page_size)], [str(o) for o in range(page_size)])
    ax.tick_params(length=0, labelsize=8)
    ax.set_xlabel("page id in the pool (×n above a page: its reference count)")
    ax.set_ylabel("offset in page")
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)
    names = names or [f"request {i}" for i in range(len(page_tables))]
    handles = [Patch(color=_lighten(colors[i], 0.35), label=f"{names[i]}: pages {list(pages)}")
               for i, pages in enumerate(page_tables)]
    handles += [Patch(color=_lighten(TREE_COLOR, 0.3), label="only the tree (evictable)"),
                Patch(facecolor=FREE_COLOR, edgecolor="#cccccc", label="free")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8,
              frameon=False)
    ax.set_title(title or f"KV pool: {num_pages} pages of {page_size} slots, shared pages split "
                          "between their holders")
    return fig
