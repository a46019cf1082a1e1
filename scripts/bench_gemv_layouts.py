"""gemv.c's layouts side by side: one int8 (or bfloat16) weight packed in every layout this CPU's
build offers, the same product timed in each, taking turns.

    python scripts/bench_gemv_layouts.py                  # bard's and Qwen3-0.6B's shapes
    python scripts/bench_gemv_layouts.py --weights bfloat16 --shapes 151936x1024

For each shape [out, in] and each row count: the fastest of `--repeats` turns of each layout
(plain: each weight widened to a float as it is read; words: int8 in pairs of inputs multiplied
as 16-bit integers, AVX2; quads: int8 bytes multiplied as integers, AVX512_VNNI; pairs: bfloat16
pair products, AVX512_BF16), each call on another of enough copies of the weight to pass the
caches (as a decode step reads it), and each layout's time over plain's. Activations bfloat16.
Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from minimodel.kernels import native
from minimodel.kernels.matmul import COLD_BYTES, MAX_COPIES

# [out, in] of each linear layer and the LM head
BARD = ["512x256", "256x256", "1536x256", "256x768", "151936x256"]
QWEN3_06B = ["4096x1024", "1024x2048", "6144x1024", "1024x3072", "151936x1024"]


def copies(weight: torch.Tensor, scale: torch.Tensor | None, layout: int) -> list[native.Packed]:
    """The weight packed in `layout`, as many times as pass COLD_BYTES between them."""
    first = native.pack(weight, scale, torch.bfloat16, layout=layout)
    n = min(MAX_COPIES, -(-COLD_BYTES // first.nbytes))
    return [first] + [native.pack(weight, scale, torch.bfloat16, layout=layout)
                      for _ in range(n - 1)]


def bench(shape: str, weights: str, rows_list: list[int], repeats: int) -> list[dict]:
    out, inp = (int(n) for n in shape.split("x"))
    g = torch.Generator().manual_seed(0)
    if weights == "int8":
        w = torch.randint(-127, 128, (out, inp), generator=g, dtype=torch.int8)
        scale = (torch.rand(out, generator=g) + 0.5) / 127
    else:
        w, scale = (torch.randn(out, inp, generator=g) / inp**0.5).to(torch.bfloat16), None
    kind = native.KINDS[w.dtype]
    offered = native.layouts(kind, inp, torch.bfloat16)
    packs = {layout: copies(w, scale, layout) for layout in offered}
    rows_out = []
    for rows in rows_list:
        x = torch.randn(rows, inp, generator=g).to(torch.bfloat16)
        for layout in offered:  # warm-up
            native.gemv(x, packs[layout][0])
        best = dict.fromkeys(offered, float("inf"))
        turn = 0
        for _ in range(repeats):
            for layout in offered:
                mine = packs[layout]
                calls = len(mine)
                start = time.perf_counter()
                for k in range(turn, turn + calls):
                    native.gemv(x, mine[k % len(mine)])
                best[layout] = min(best[layout], (time.perf_counter() - start) / calls)
                turn += calls
        plain = best[native.PLAIN]
        rows_out.append({"shape": shape, "weights": weights, "rows": rows,
                         "us": {native.LAYOUT_NAMES[k]: v * 1e6 for k, v in best.items()},
                         "over_plain": {native.LAYOUT_NAMES[k]: v / plain
                                        for k, v in best.items()},
                         "bytes": packs[offered[0]][0].nbytes})
    return rows_out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=",".join(BARD + QWEN3_06B),
                    help="[out]x[in] of each weight, comma-separated")
    ap.add_argument("--weights", choices=["int8", "bfloat16"], default="int8")
    ap.add_argument("--rows", default="1,2,4,8")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    if native.library() is None:
        raise SystemExit(f"the C kernel is not available: {native.status()}")
    print(f"gemv.c: {native.status()}; {torch.get_num_threads()} threads")
    rows_list = [int(r) for r in args.rows.split(",")]
    results = []
    for shape in args.shapes.split(","):
        for r in bench(shape, args.weights, rows_list, args.repeats):
            results.append(r)
            times = "  ".join(f"{k} {v:9.1f} us" for k, v in r["us"].items())
            ratios = "  ".join(f"{k}/plain {v:4.2f}" for k, v in r["over_plain"].items()
                               if k != "plain")
            print(f"{r['shape']:>12} {r['weights']:>8} rows {r['rows']:2d}  {times}  {ratios}",
                  flush=True)
    print(json.dumps({"status": native.status(), "threads": torch.get_num_threads(),
                      "results": results}))


if __name__ == "__main__":
    main()
