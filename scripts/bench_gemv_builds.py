"""Two versions of the C kernels side by side: this tree's gemv.c and the one at a git revision,
each built the way minimodel builds it, both loaded in one process, the same products timed in
each, taking turns.

    python scripts/bench_gemv_builds.py --against HEAD~1
    python scripts/bench_gemv_builds.py --against a6d99e6 --weights bfloat16 --shapes 151936x256
    python scripts/bench_gemv_builds.py --against HEAD~1 --hot --shapes 2048x1024


For each shape [out, in], weight kind and row count: the fastest of `--repeats` turns of each
build, each call on another of enough copies of the weight to pass the caches (as a decode step
reads it, every weight packed by its own build; with --hot, on one copy, which stays in the
caches: the arithmetic alone), and this tree's time over the other's.
Activations are float32 for float32 weights, else bfloat16; each build packs in its fastest
layout. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from minimodel.kernels import native
from minimodel.kernels.matmul import COLD_BYTES, MAX_COPIES

ROOT = Path(__file__).resolve().parents[1]
BARD_HEAD, QWEN3_06B = ["151936x256"], ["6144x1024", "1024x3072", "151936x1024"]


def build(folder: Path, name: str, revision: str | None) -> ctypes.CDLL:
    """The kernels' sources (this tree's, or `revision`'s) compiled with minimodel's flags."""
    src = folder / name
    src.mkdir()
    for path in native.SOURCES:
        rel = path.relative_to(ROOT).as_posix()
        if revision is None:
            text = path.read_text()
        else:
            shown = subprocess.run(["git", "show", f"{revision}:{rel}"], cwd=ROOT,
                                   capture_output=True, text=True)
            if shown.returncode:
                raise SystemExit(f"git has no {rel} at {revision!r}: {shown.stderr.strip()} "
                                 "(give --against a commit of this repository that has it)")
            text = shown.stdout
        (src / path.name).write_text(text)
    cc = native.compiler()
    if cc is None:
        raise SystemExit("no C compiler found (set CC, or install cc, gcc or clang)")
    out = folder / f"{name}.so"
    flags = native.build(cc, out, folder / f"{name}.flags",
                         tuple(src / path.name for path in native.SOURCES))
    if isinstance(flags, str):
        raise SystemExit(f"{name} did not build: {flags}")
    try:
        return native.declare(ctypes.CDLL(str(out)))
    except AttributeError as err:  # a build older than this tree's interface
        raise SystemExit(f"{name}'s kernels lack a function this tree calls: {err}") from None


def packs(lib: ctypes.CDLL, w: torch.Tensor, activations: torch.dtype, hot: bool
          ) -> tuple[int, list[torch.Tensor]]:
    """(layout, copies of w packed by `lib`: enough to pass COLD_BYTES between them, or one
    when `hot`)."""
    kind, (out, inp) = native.KINDS[w.dtype], w.shape
    lay = native.layouts(kind, inp, activations, lib)[0]
    nbytes = lib.mm_packed_bytes(kind, lay, out, inp)
    copies = []
    for _ in range(1 if hot else min(MAX_COPIES, -(-COLD_BYTES // nbytes))):
        data = torch.empty(nbytes, dtype=torch.uint8)
        lib.mm_pack(w.data_ptr(), kind, lay, out, inp, data.data_ptr(), torch.get_num_threads())
        copies.append(data)
    return lay, copies


def bench(libs: dict[str, ctypes.CDLL], shape: str, weights: str, rows_list: list[int],
          repeats: int, hot: bool = False) -> list[dict]:
    out, inp = (int(n) for n in shape.split("x"))
    g = torch.Generator().manual_seed(0)
    scale = None
    if weights == "int8":
        w = torch.randint(-127, 128, (out, inp), generator=g, dtype=torch.int8)
        scale = ((torch.rand(out, generator=g) + 0.5) / 127).contiguous()
    else:
        w = (torch.randn(out, inp, generator=g) / inp**0.5).to(getattr(torch, weights))
    xdtype = torch.float32 if weights == "float32" else torch.bfloat16
    xk = native.KINDS[xdtype]
    packed = {name: packs(lib, w, xdtype, hot) for name, lib in libs.items()}
    results = []
    for rows in rows_list:
        x = torch.randn(rows, inp, generator=g).to(xdtype)
        y = torch.empty(rows, out, dtype=xdtype)

        def call(name: str, data: torch.Tensor, x: torch.Tensor = x, y: torch.Tensor = y,
                 rows: int = rows) -> None:
            code = libs[name].mm_gemv(
                x.data_ptr(), xk, data.data_ptr(), native.KINDS[w.dtype], packed[name][0],
                None if scale is None else scale.data_ptr(), 0, None, y.data_ptr(), rows, inp,
                out, torch.get_num_threads())
            assert code == 0, code

        outputs = {}
        for name in libs:  # warm-up, and each build's product
            call(name, packed[name][1][0])
            outputs[name] = y.float().clone()
        best = dict.fromkeys(libs, float("inf"))
        for _ in range(repeats):
            for name in libs:
                copies = packed[name][1]
                calls = copies * (20 if hot else 1)  # hot: enough calls to time
                start = time.perf_counter()
                for data in calls:
                    call(name, data)
                best[name] = min(best[name], (time.perf_counter() - start) / len(calls))
        first, other = list(libs)
        results.append({"shape": shape, "weights": weights, "rows": rows,
                        "us": {k: v * 1e6 for k, v in best.items()},
                        "this_over_other": best[first] / best[other],
                        "max_abs_difference": (outputs[first] - outputs[other]).abs().max().item()})
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", required=True, help="the git revision to compare with")
    ap.add_argument("--shapes", default=",".join(BARD_HEAD + QWEN3_06B),
                    help="[out]x[in] of each weight, comma-separated")
    ap.add_argument("--weights", default="float32,bfloat16,int8",
                    help="weight kinds, comma-separated: float32, bfloat16, int8")
    ap.add_argument("--rows", default="1,2,4,8")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--hot", action="store_true",
                    help="time each product on one copy of the weight, which the caches hold")
    args = ap.parse_args()
    rows_list = [int(r) for r in args.rows.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        libs = {"this": build(Path(tmp), "this", None),
                args.against: build(Path(tmp), "other", args.against)}
        print(f"{torch.get_num_threads()} threads; this tree over {args.against}", flush=True)
        results = []
        for weights in args.weights.split(","):
            for shape in args.shapes.split(","):
                for r in bench(libs, shape, weights, rows_list, args.repeats, args.hot):
                    results.append(r)
                    times = "  ".join(f"{k} {v:9.1f} us" for k, v in r["us"].items())
                    print(f"{r['shape']:>12} {r['weights']:>8} rows {r['rows']:2d}  {times}  "
                          f"this/other {r['this_over_other']:4.2f}", flush=True)
    print(json.dumps({"against": args.against, "hot": args.hot, "threads": torch.get_num_threads(),
                      "results": results}))


if __name__ == "__main__":
    main()
