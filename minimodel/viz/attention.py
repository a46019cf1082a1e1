"""Attention maps of the reference model: capture them, plot them, explore them with a widget.

The reference model never returns its attention probabilities, and we do not change it to do so.
`attention_maps` runs it once with forward hooks that record what every attention layer sees,
then recomputes the probabilities with the package's own attention math.
matplotlib and ipywidgets are imported only inside the functions that draw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from minimodel.ops import apply_rope, softmax_attention
from minimodel.reference.model import repeat_kv


def _decoder_layers(model: nn.Module) -> nn.ModuleList:
    inner = getattr(model, "model", model)  # Qwen3ForCausalLM or Qwen3Model
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise TypeError(
            f"attention_maps needs a minimodel.reference model, got {type(model).__name__}."
        )
    return layers


@torch.no_grad()
def attention_maps(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> list[torch.Tensor]:
    """Attention probabilities of every layer: L float32 tensors [B, Hq, T, T].

    Entry [b, h, t, s] is how much query t of head h reads key s. Hooks record each layer's
    RoPE tables, mask and QK-normed q and k during one forward pass; the probabilities are then
    softmax(q k^T / sqrt(D) + mask), computed by `softmax_attention` with V = the identity.
    """
    seen: list[dict[str, torch.Tensor]] = []
    handles = []

    def record_inputs(module: nn.Module, args: tuple) -> None:
        _, cos, sin, mask = args  # Qwen3Attention.forward(x, cos, sin, mask)
        seen.append({"cos": cos, "sin": sin, "mask": mask})

    def record(key: str):
        def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            seen[-1][key] = output  # [B, T, H, D], normed, before RoPE

        return hook

    for layer in _decoder_layers(model):
        attn = layer.self_attn
        handles.append(attn.register_forward_pre_hook(record_inputs))
        handles.append(attn.q_norm.register_forward_hook(record("q")))
        handles.append(attn.k_norm.register_forward_hook(record("k")))
    try:
        model(input_ids, attention_mask=attention_mask)
    finally:
        for handle in handles:
            handle.remove()

    maps = []
    for entry in seen:
        q = apply_rope(entry["q"], entry["cos"], entry["sin"]).transpose(1, 2)  # [B, Hq, T, D]
        k = apply_rope(entry["k"], entry["cos"], entry["sin"]).transpose(1, 2)  # [B, Hkv, T, D]
        k = repeat_kv(k, q.shape[1] // k.shape[1])  # [B, Hq, T, D]
        T = q.shape[-2]
        eye = torch.eye(T, dtype=q.dtype, device=q.device)  # probs @ I = probs
        probs = softmax_attention(q, k, eye, entry["mask"], scale=1.0 / math.sqrt(q.shape[-1]))
        maps.append(probs.float())  # [B, Hq, T, T]
    return maps


def token_labels(tokenizer: Any, ids: Sequence[int] | torch.Tensor) -> list[str]:
    """Readable labels, one per token: spaces shown as '·', newlines as '⏎'."""
    ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    return [tokenizer.decode([i]).replace(" ", "·").replace("\n", "⏎") or "∅" for i in ids]


def plot_attention(probs: torch.Tensor, labels: Sequence[str], title: str = "", ax: Any = None):
    """Heatmap of one head's attention [T, T]: rows are queries, columns the keys they read."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 4.5))
    image = ax.imshow(probs.detach().float().cpu().numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
    T = probs.shape[-1]
    ax.set_xticks(range(T), labels, rotation=90, fontsize=8)
    ax.set_yticks(range(T), labels, fontsize=8)
    ax.set_xlabel("key: the token that is read")
    ax.set_ylabel("query: the token that reads")
    ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, label="attention probability")
    return ax


def _spread(n: int, most: int) -> list[int]:
    """At most `most` indices out of range(n), evenly spaced, first and last included."""
    if n <= most:
        return list(range(n))
    return sorted({round(i * (n - 1) / (most - 1)) for i in range(most)})


def plot_attention_grid(
    maps: Sequence[torch.Tensor],
    batch_index: int = 0,
    title: str = "",
    max_layers: int = 6,
    max_heads: int = 8,
):
    """Layers (rows) by heads (columns) of one sequence, as small heatmaps.

    Large models show at most `max_layers` x `max_heads` of them, evenly spaced.
    """
    import matplotlib.pyplot as plt

    layers = _spread(len(maps), max_layers)
    heads = _spread(maps[0].shape[1], max_heads)
    L, H = len(layers), len(heads)
    fig, axes = plt.subplots(L, H, figsize=(1.6 * H + 1, 1.6 * L + 0.6), squeeze=False)
    for layer, row in zip(layers, axes):
        for head, ax in zip(heads, row):
            ax.imshow(maps[layer][batch_index, head].cpu().numpy(), cmap="viridis",
                      vmin=0.0, vmax=1.0)
            ax.set_xticks([])
            ax.set_yticks([])
            if layer == layers[0]:
                ax.set_title(f"head {head}", fontsize=9)
            if head == heads[0]:
                ax.set_ylabel(f"layer {layer}", fontsize=9)
    fig.suptitle(title or "attention of every layer and head (rows: queries, columns: keys)")
    fig.tight_layout()
    return fig


def attention_explorer(maps: Sequence[torch.Tensor], labels: Sequence[str], batch_index: int = 0):
    """An ipywidgets layer/head picker that redraws `plot_attention` for the chosen head."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    layer = widgets.IntSlider(value=0, min=0, max=len(maps) - 1, description="layer")
    head = widgets.IntSlider(value=0, min=0, max=maps[0].shape[1] - 1, description="head")

    def draw(layer: int, head: int) -> None:
        plot_attention(maps[layer][batch_index, head], labels, f"layer {layer}, head {head}")
        plt.show()

    return widgets.interactive(draw, layer=layer, head=head)
