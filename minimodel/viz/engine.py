"""Plots for chapter 08: what the engine's scheduler did, step by step, and benchmark bars.

A trace is a list of `StepTrace`, one per `LLM.step()`: which requests brought how many tokens,
who was waiting, who was preempted or finished, and how many pages were free afterwards.
`record_step` makes one from a live engine; `format_step` prints it as one line and
`plot_timeline` draws the whole trace. Drawing functions return the matplotlib Figure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from minimodel.engine.llm import LLM
    from minimodel.engine.outputs import RequestOutput

COLORS = {
    "prefill": "#1f77b4",  # a whole prompt (or what is left of it)
    "chunk": "#9ecae1",  # part of a prompt: the token budget ran out
    "recompute": "#9467bd",  # a preempted request prefilling its tokens again
    "decode": "#2ca02c",  # one new token
    "idle": "#e5f5e0",  # running, but this step is a prefill step for others
    "waiting": "#eeeeee",  # queued: not started yet, or preempted
}


@dataclass
class StepTrace:
    """What one engine step did. Request ids are the engine's `request_id`s."""

    step: int
    kind: str  # "prefill" | "decode" | "none" (nothing was scheduled)
    q_lens: dict[int, int]  # request -> new tokens it brought to this step
    roles: dict[int, str]  # request -> "prefill" | "chunk" | "recompute" | "decode"
    waiting: list[int]  # waiting before the step, oldest first
    running: list[int]  # running before the step
    preempted: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    free_pages: int = 0  # after the step

    @property
    def num_tokens(self) -> int:
        return sum(self.q_lens.values())


def record_step(llm: LLM, step: int) -> tuple[StepTrace, list[RequestOutput]]:
    """Run `llm.step()` once and describe it -> (the trace of the step, finished outputs)."""
    from minimodel.engine.sequence import Status

    waiting = [s.request_id for s in llm.scheduler.waiting]
    running = [s.request_id for s in llm.scheduler.running]
    preempted_before = {s.request_id for s in llm.scheduler.waiting if s.num_preemptions}
    outputs = llm.step()
    batch = llm.last_batch
    q_lens: dict[int, int] = {}
    roles: dict[int, str] = {}
    if batch is not None:
        for seq, q in zip(batch.seqs, batch.q_lens, strict=True):
            q_lens[seq.request_id] = q
            if not batch.is_prefill:
                roles[seq.request_id] = "decode"
            elif seq.status == Status.WAITING:  # still queued after its step: a chunk
                roles[seq.request_id] = "chunk"
            elif seq.request_id in preempted_before:
                roles[seq.request_id] = "recompute"
            else:
                roles[seq.request_id] = "prefill"
    trace = StepTrace(
        step=step,
        kind="none" if batch is None else ("prefill" if batch.is_prefill else "decode"),
        q_lens=q_lens,
        roles=roles,
        waiting=waiting,
        running=running,
        preempted=[s.request_id for s in batch.preempted] if batch is not None else [],
        finished=sorted(o.request_id for o in outputs),
        free_pages=llm.allocator.num_free,
    )
    return trace, outputs


def format_step(t: StepTrace) -> str:
    """One line: step, kind, request(new tokens) of each, preempted, finished, free pages."""
    tags = {"chunk": " chunk", "recompute": " recompute", "prefill": "", "decode": ""}
    items = ", ".join(f"r{r}({q}{tags[t.roles[r]]})" for r, q in t.q_lens.items()) or "-"
    line = f"step {t.step:2d}  {t.kind:7s} {t.num_tokens:3d} tok: {items}"
    line = f"{line:<58s}"
    if t.preempted:
        line += f" preempted {', '.join(f'r{r}' for r in t.preempted)};"
    if t.finished:
        line += f" finished {', '.join(f'r{r}' for r in t.finished)};"
    return f"{line} free pages {t.free_pages}"


def plot_timeline(trace: Sequence[StepTrace], num_pages: int, title: str | None = None) -> Figure:
    """The trace as a Gantt chart (one row per request, one column per step) over a panel with
    the tokens of each step and the free pages after it."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    requests = sorted({r for t in trace for r in (*t.q_lens, *t.waiting, *t.running)})
    if not requests:  # nothing has run yet
        fig, ax = plt.subplots(figsize=(10, 1.5), layout="constrained")
        ax.text(0.5, 0.5, "no step has run yet", ha="center", va="center")
        ax.set_axis_off()
        return fig
    row = {r: i for i, r in enumerate(requests)}
    fig, (ax, ax2) = plt.subplots(
        2, 1, figsize=(10, 1.2 + 0.45 * len(requests) + 2.2), sharex=True, layout="constrained",
        gridspec_kw={"height_ratios": [max(2, len(requests)), 2.2]},
    )
    for t in trace:
        x = t.step
        for r in t.waiting:
            if r not in t.q_lens:
                ax.barh(row[r], 1, left=x - 0.5, color=COLORS["waiting"], edgecolor="white")
        for r in t.running:
            if r not in t.q_lens and r not in t.preempted:
                ax.barh(row[r], 1, left=x - 0.5, color=COLORS["idle"], edgecolor="white")
        for r, q in t.q_lens.items():
            role = t.roles[r]
            ax.barh(row[r], 1, left=x - 0.5, color=COLORS[role], edgecolor="white")
            if role != "decode":
                ax.text(x, row[r], str(q), ha="center", va="center", fontsize=7, color="black")
        for r in t.preempted:
            ax.plot(x, row[r], marker="x", color="#d62728", markersize=11, markeredgewidth=2.5)
        for r in t.finished:
            ax.plot(x + 0.5, row[r], marker="|", color="black", markersize=14,
                    markeredgewidth=2.5)
    ax.set_yticks(range(len(requests)), [f"request {r}" for r in requests])
    ax.invert_yaxis()
    ax.set_title(title or "What the scheduler ran in each step")
    handles = [Patch(color=c, label=k) for k, c in COLORS.items()]
    handles.append(plt.Line2D([], [], marker="x", color="#d62728", linestyle="", label="preempted"))
    handles.append(plt.Line2D([], [], marker="|", color="black", linestyle="", markersize=12,
                              markeredgewidth=2.5, label="finished"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)

    steps = [t.step for t in trace]
    colors = [COLORS["prefill"] if t.kind == "prefill" else COLORS["decode"] for t in trace]
    ax2.bar(steps, [t.num_tokens for t in trace], color=colors, width=0.8)
    ax2.set_ylabel("tokens in the step")
    ax2.set_xlabel("engine step")
    twin = ax2.twinx()
    twin.step(steps, [t.free_pages for t in trace], where="mid", color="#d62728")
    twin.set_ylim(0, num_pages + 0.5)
    twin.set_ylabel(f"free pages (of {num_pages})", color="#d62728")
    ax2.set_xticks(steps)
    return fig


def plot_throughput(
    rows: Sequence[tuple[str, float]], title: str, xlabel: str = "output tokens per second"
) -> Figure:
    """Horizontal bars, one per system: (label, value)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.5 * len(rows)), layout="constrained")
    labels = [label for label, _ in rows]
    values = [value for _, value in rows]
    bars = ax.barh(labels, values, color=["#1f77b4", "#ff7f0e", "#7f7f7f", "#2ca02c"][: len(rows)])
    for bar, value in zip(bars, values, strict=True):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {value:.0f}",
                va="center", fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.margins(x=0.15)
    return fig



def show_markdown(path: Path) -> None:
    """Display a markdown file in a notebook with its local images embedded.

    Links like `![plot](img/bench.png)` are relative to the file, not to the notebook, so they
    would not resolve from chapters/; each such image is shown from its file instead.
    """
    from IPython.display import Image, Markdown, display

    text = path.read_text(encoding="utf-8")
    pos = 0
    for m in re.finditer(r"!\[[^\]]*\]\(([^)\s]+)[^)]*\)", text):
        image = (path.parent / m.group(1)).resolve()
        if image.is_file():
            display(Markdown(text[pos : m.start()]))
            display(Image(filename=str(image)))
            pos = m.end()
    display(Markdown(text[pos:]))
