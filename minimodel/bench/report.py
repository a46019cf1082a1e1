"""The results as people read them: the ratios against the targets, a text table, a bar plot;
and the card's targets and its decode-curve plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TARGETS = {
    "A_throughput_vs_transformers": 2.0,
    "B_decode_vs_transformers": 1.0,
    "B_ttft_transformers_over_engine": 1.0,
    "C_speedup_vs_no_cache": 10.0,
}


def ratios(res: dict[str, Any]) -> dict[str, float]:
    """The targets' ratios: A and B vs transformers, C vs the no-cache loop."""
    e, hf, ref = res.get("engine", {}), res.get("transformers", {}), res.get("reference", {})
    out = {}
    if "A" in e and "A" in hf:
        out["A_throughput_vs_transformers"] = e["A"]["tok_per_s"] / hf["A"]["tok_per_s"]
    if "B" in e and "B" in hf:
        out["B_decode_vs_transformers"] = e["B"]["decode_tok_per_s"] / hf["B"]["decode_tok_per_s"]
        out["B_ttft_transformers_over_engine"] = hf["B"]["ttft_s"] / e["B"]["ttft_s"]
    if "C" in e and "C" in ref:
        out["C_speedup_vs_no_cache"] = ref["C"]["seconds"] / e["C"]["seconds"]
    return out


def format_table(results: dict[str, Any]) -> str:
    """The results as a plain-text table, one block per dtype."""
    lines = []
    for dtype, res in results.items():
        e, hf, ref = res.get("engine", {}), res.get("transformers", {}), res.get("reference", {})
        lines.append(f"== {dtype} ==")
        lines.append(f"{'workload':42s} {'minimodel':>12s} {'transformers':>13s} "
                     f"{'no-cache':>10s}")

        def row(name: str, a: Any, b: Any = None, c: Any = None, fmt: str = "{:.2f}") -> None:
            cells = [fmt.format(x) if x is not None else "-" for x in (a, b, c)]
            lines.append(f"{name:42s} {cells[0]:>12s} {cells[1]:>13s} {cells[2]:>10s}")

        if "A" in e:
            row("A throughput (output tok/s)", e["A"]["tok_per_s"],
                hf.get("A", {}).get("tok_per_s"))
            row("A wall time (s)", e["A"]["seconds"], hf.get("A", {}).get("seconds"))
        if "B" in e:
            row("B time to first token (s)", e["B"]["ttft_s"], hf.get("B", {}).get("ttft_s"),
                fmt="{:.3f}")
            row("B decode (tok/s)", e["B"]["decode_tok_per_s"],
                hf.get("B", {}).get("decode_tok_per_s"))
        if "C" in e:
            row("C wall time (s)", e["C"]["seconds"], None, ref.get("C", {}).get("seconds"))
        if "N" in e:
            row("N nano-vllm workload (output tok/s)", e["N"]["tok_per_s"])
        row("peak memory (GiB)", e.get("peak_gib"), hf.get("peak_gib"), ref.get("peak_gib"))
        for key in ("engine_torch_backend", "engine_eager"):
            if key in res:
                v = res[key]
                row(f"{key}: A tok/s | B decode tok/s", v.get("A", {}).get("tok_per_s"),
                    v.get("B", {}).get("decode_tok_per_s"))
        pool = e.get("kv_pool")
        if pool:
            verdict = "ok" if pool["ok"] else "MISMATCH"
            lines.append(f"KV pool: {pool['num_pages']} pages x {pool['page_size']} tokens = "
                         f"{pool['bytes'] / 2**20:.1f} MiB; 2*L*Hkv*D*bytes*S*P = "
                         f"{pool['expected'] / 2**20:.1f} MiB -> {verdict}")
        for name, value in res["ratios"].items():
            target = TARGETS[name]
            verdict = "met" if value >= target else "MISSED"
            lines.append(f"  {name:36s} {value:7.2f}x  (target >= {target:.1f}x: {verdict})")
        lines.append("")
    return "\n".join(lines)


def pyplot() -> Any:
    """matplotlib.pyplot drawing to files, or None (with a message) where it is not installed."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib).")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(results: dict[str, Any], path: Path) -> None:
    """Bars per workload and dtype: engine vs transformers vs the no-cache loop."""
    plt = pyplot()
    if plt is None:
        return

    panels = [
        ("A: throughput (output tok/s)", "A", "tok_per_s", ["engine", "transformers"]),
        ("B: decode (tok/s)", "B", "decode_tok_per_s", ["engine", "transformers"]),
        ("B: time to first token (s)", "B", "ttft_s", ["engine", "transformers"]),
        ("C: wall time (s), lower is better", "C", "seconds", ["engine", "reference"]),
    ]
    labels = {"engine": "minimodel", "transformers": "transformers", "reference": "no-cache"}
    dtypes = list(results)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
    for ax, (title, wl, key, systems) in zip(axes, panels, strict=True):
        width = 0.8 / len(systems)
        for j, system in enumerate(systems):
            values = [results[d].get(system, {}).get(wl, {}).get(key, 0.0) for d in dtypes]
            xs = [i + j * width for i in range(len(dtypes))]
            ax.bar(xs, values, width, label=labels[system])
        ax.set_xticks([i + width * (len(systems) - 1) / 2 for i in range(len(dtypes))], dtypes)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("dtype")
        ax.legend(fontsize=8)
    fig.suptitle(f"minimodel bench: {results[dtypes[0]]['model']} on "
                 f"{results[dtypes[0]]['device']}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# The card's targets on a CPU: (what, the bound, ">=" or "<=").
CARD_TARGETS = {
    "mbu_float32": (0.70, ">="),         # batch-1 decode / the memory ceiling, float32
    "mbu_bfloat16": (0.70, ">="),        # the same in bfloat16
    "batch8_step_over_batch1": (1.3, "<="),  # the costliest decode step of 2-8 requests / 1
    "int8_over_bfloat16_decode": (1.7, ">="),  # batch-1 decode tok/s, int8 weights / bfloat16
    "overhead": (0.15, "<="),            # share of a batch-1 step outside the products
    "prefix_p1_ttft_mean": (5.0, ">="),  # workload P1's mean TTFT, cache off / on
    "prefix_p1_total_time": (2.0, ">="),  # P1's total time, off / on
    "prefix_p2_prefill_tokens": (3.0, ">="),  # P2's prefill tokens computed, off / on
}


def card_targets(cards: dict[str, Any],
                 prefix: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Each target the cards (and the card's workloads P) measure: its name, the format, the
    value, the bound, met or not."""
    rows: list[tuple[str, str, float]] = []
    floors: dict[tuple[str, str], float] = {}  # the products alone, weights in cache
    for fmt in ("float32", "bfloat16"):
        if fmt in cards:
            rows.append((f"mbu_{fmt}", fmt, cards[fmt]["bandwidth_utilisation"]))
    for fmt, c in cards.items():
        points = [p for p in c["curve"] if 1 < p["batch"] <= 8]
        if points and c["curve"][0]["batch"] == 1:
            rows.append(("batch8_step_over_batch1", fmt,
                         max(p["step_over_batch1"] for p in points)))
            if all("floor_over_batch1" in p for p in points):
                floors["batch8_step_over_batch1", fmt] = max(p["floor_over_batch1"]
                                                             for p in points)
    if "int8" in cards and "bfloat16" in cards:
        rows.append(("int8_over_bfloat16_decode", "int8",
                     cards["int8"]["decode_tok_per_s"] / cards["bfloat16"]["decode_tok_per_s"]))
    for fmt, c in cards.items():
        rows.append(("overhead", fmt, c["overhead"]["overhead"]))
    if prefix is not None:
        rows += [("prefix_p1_ttft_mean", prefix["format"], prefix["P1"]["ttft_mean_ratio"]),
                 ("prefix_p1_total_time", prefix["format"], prefix["P1"]["total_time_ratio"]),
                 ("prefix_p2_prefill_tokens", prefix["format"],
                  prefix["P2"]["prefill_tokens_ratio"])]
    out = []
    for name, fmt, value in rows:
        bound, sense = CARD_TARGETS[name]
        met = value >= bound if sense == ">=" else value <= bound
        row = {"target": name, "format": fmt, "value": value, "bound": bound, "sense": sense,
               "met": met}
        if (name, fmt) in floors:
            row["floor"] = floors[name, fmt]
        out.append(row)
    return out


def format_targets(targets: list[dict[str, Any]]) -> str:
    """The targets as text lines: value, bound, met or MISSED."""
    lines = ["== targets =="]
    for t in targets:
        verdict = "met" if t["met"] else "MISSED"
        floor = ("" if "floor" not in t
                 else f"; the products alone, their weights in cache: {t['floor']:.2f}")
        lines.append(f"  {t['target']:28s} {t['format']:9s} {t['value']:7.2f}  "
                     f"(target {t['sense']} {t['bound']:.2f}: {verdict}{floor})")
    return "\n".join(lines)


def plot_curve(cards: dict[str, Any], path: Path) -> None:
    """Two panels over B requests per decode step, one line per format: tokens/s, and bytes/s
    read with the memory roof as a line."""
    plt = pyplot()
    if plt is None or not cards:
        return
    first = next(iter(cards.values()))
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    for fmt, c in cards.items():
        batches = [p["batch"] for p in c["curve"]]
        left.plot(batches, [p["tok_per_s"] for p in c["curve"]], marker="o", label=fmt)
        right.plot(batches, [p["bytes_per_s"] / 1e9 for p in c["curve"]], marker="o", label=fmt)
    right.axhline(first["bandwidth_bytes_per_s"] / 1e9, color="black", linestyle="--",
                  label="memory roof")
    for ax, title, unit in ((left, "decode throughput", "tokens/s"),
                            (right, "bytes read per second", "GB/s")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.set_xlabel("requests per decode step (B)")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle(f"minimodel decode curve: {first['model']} on {first['device']}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
