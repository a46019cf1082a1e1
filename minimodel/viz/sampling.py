"""Plots and a widget for chapter 05: a next-token distribution before and after each filter.

The filters are the package's own (`minimodel.sampling`), applied in the sampler's order:
temperature -> top-k -> top-p. matplotlib and ipywidgets are imported when a function is called.
"""

from __future__ import annotations

from typing import Any

import torch

from minimodel.sampling import top_k_filter, top_p_filter

STAGES = ("softmax", "temperature", "top-k", "top-p")


def token_label(tokenizer: Any, token_id: int) -> str:
    """A short label for a token that any font can draw: its text if ASCII, else its id."""
    text = tokenizer.decode([token_id]) if tokenizer is not None else ""
    if text and text.isascii() and text.isprintable():
        return repr(text)
    return f"#{token_id}"


def filter_stages(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float
) -> dict[str, torch.Tensor]:
    """Probabilities [V] after each stage: raw softmax, temperature, top-k, top-p.

    logits: [V]. temperature=0 is greedy: every stage after the first is the argmax alone.
    """
    logits = logits.detach().float().reshape(1, -1)  # [1, V]
    stages = {"softmax": logits.softmax(-1)[0]}
    if temperature == 0:
        greedy = torch.zeros_like(stages["softmax"])
        greedy[logits.argmax()] = 1.0
        return stages | {name: greedy for name in STAGES[1:]}
    x = logits / temperature
    stages["temperature"] = x.softmax(-1)[0]
    if top_k > 0:  # 0 and 1.0 mean off, as in the sampler
        x = top_k_filter(x, torch.tensor([top_k]))
    stages["top-k"] = x.softmax(-1)[0]
    if top_p < 1.0:
        x = top_p_filter(x, torch.tensor([top_p], dtype=torch.float32))
    stages["top-p"] = x.softmax(-1)[0]
    return stages


def _entropy(p: torch.Tensor) -> float:
    nz = p[p > 0]
    return float(-(nz * nz.log()).sum())


def _bars(ax: Any, probs: torch.Tensor, base: torch.Tensor, order: torch.Tensor,
          labels: list[str], title: str) -> None:
    """One panel: the chosen tokens' probabilities, the raw softmax as an outline on top, and a
    red x under each token this stage removed."""
    x = list(range(len(order)))
    removed = [i for i, k in zip(x, (probs[order] > 0).tolist(), strict=True) if not k]
    ax.bar(x, probs[order].tolist(), color="tab:blue", label="this stage")
    ax.bar(x, base[order].tolist(), color="none", edgecolor="black", linewidth=0.8, zorder=3,
           label="raw softmax")
    if removed:
        ax.plot(removed, [0.0] * len(removed), "x", color="tab:red", label="removed")
    ax.set_xticks(x, labels, rotation=90, fontsize=7)
    n = int((probs > 0).sum())
    ax.set_title(f"{title}\n{n} tokens kept, entropy {_entropy(probs):.2f} nats", fontsize=9)
    ax.set_ylabel("probability")


def plot_filter_stages(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
    tokenizer: Any = None, n: int = 20,
) -> Any:
    """Four panels: the n most likely tokens after softmax, temperature, top-k and top-p."""
    import matplotlib.pyplot as plt

    stages = filter_stages(logits, temperature, top_k, top_p)
    base = stages["softmax"]
    order = stages["temperature"].argsort(descending=True)[:n]
    labels = [token_label(tokenizer, int(i)) for i in order]
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.6), sharey=True)
    titles = {"softmax": "softmax(logits)", "temperature": f"temperature {temperature}",
              "top-k": f"then top-k {top_k}", "top-p": f"then top-p {top_p}"}
    for ax, name in zip(axes, STAGES, strict=True):
        _bars(ax, stages[name], base, order, labels, titles[name])
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Next-token distribution, its {n} most likely tokens after temperature")
    fig.tight_layout()
    return fig


def sampling_widget(logits: torch.Tensor, tokenizer: Any = None, n: int = 20) -> Any:
    """Sliders for temperature, top-k and top-p over one next-token distribution (logits [V])."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    temperature = widgets.FloatSlider(value=1.0, min=0.0, max=3.0, step=0.05,
                                      description="temperature")
    top_k = widgets.IntSlider(value=0, min=0, max=100, description="top-k (0=off)")
    top_p = widgets.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.01,
                                description="top-p (1=off)")

    def draw(temperature: float, top_k: int, top_p: float) -> None:
        stages = filter_stages(logits, temperature, top_k, top_p)
        final, base = stages["top-p"], stages["softmax"]
        order = stages["temperature"].argsort(descending=True)[:n]
        fig, ax = plt.subplots(figsize=(10, 3.4))
        _bars(ax, final, base, order, [token_label(tokenizer, int(i)) for i in order],
              f"temperature {temperature}, top-k {top_k}, top-p {top_p}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        plt.show()
        mass = float(base[final > 0].sum())
        print(f"{int((final > 0).sum())} tokens can be drawn; they held {mass:.1%} of the raw "
              f"probability; the most likely now has {float(final.max()):.1%}")

    out = widgets.interactive_output(draw, {"temperature": temperature, "top_k": top_k,
                                            "top_p": top_p})
    return widgets.VBox([widgets.HBox([temperature, top_k, top_p]), out])
