"""The same product y = x @ W.T written several ways, and the fastest one for each shape, measured.

In a decode step x has a handful of rows (one per request) and W is a whole weight: the step is
a pass over W's bytes, bound by memory bandwidth. How close a product comes to that bound
depends on the kernel a library picks for the shape, and on a CPU the differences are large
(chapter 09): with 2 to 16 rows `F.linear` can read W several times slower than the same
product written `W @ X.T`, and a weight prepacked once into oneDNN's blocked layout is faster
still. Real engines choose a kernel per shape (vLLM's and SGLang's GEMM dispatch, torch.compile's
autotuning); this module does it the plain way: time each formulation once per (weight shape,
weight kind, row bucket) on this machine, keep the fastest, cache the choice.

- `FORMULATIONS`: name -> the product written one way (`linear`, `matmul_t`, `mkldnn`,
  `int8pack` for torchao's int8 weights, and `c_gemv`, a C kernel compiled on this machine:
  minimodel/kernels/native.py).
- `candidates(weight)`: the formulations that can run a weight.
- `time_formulations(weight, rows, names)`: seconds per product, best of a few, interleaved.
- `LinearKernels`: one layer's choice per row bucket, with its prepacked weights; a layer
  holds it in `BoundKernels`, which counts every rebinding.
- `KernelTable`: the choices measured on this machine, in a JSON file under $MINIMODEL_HOME.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from minimodel.home import minimodel_home, write_atomic
from minimodel.kernels import native

# A decode step's rows: its requests, or with speculative decoding each request's 1 + k rows
# (8 requests at k = 4 check 40 rows). More rows (prefill) use F.linear.
ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
# A choice is measured at a first start and once more at a start at least this long after (each
# formulation keeping its best time of both sittings): a busy moment during one costs nothing.
SECOND_SITTING_AFTER_S = 600.0
# Timings read W from memory, not from the caches: copies of W in turn, at least this many bytes
COLD_BYTES = 64 * 2**20
MAX_COPIES = 512
TABLE_VERSION = 5  # bump when the formulations or the measurement change: old choices go


def row_bucket(rows: int) -> int | None:
    """The smallest bucket holding `rows` rows, or None above the largest (prefill: F.linear)."""
    return next((b for b in ROW_BUCKETS if rows <= b), None)


def weight_kind(weight: torch.Tensor) -> str:
    """"float32", "bfloat16", ... for a plain weight; "int8" / "int4" for torchao's quantized
    ones (their class names: Int8Tensor, Int4OpaqueTensor, ...)."""
    name = type(weight).__name__
    for kind in ("int8", "int4"):
        if name.lower().startswith(kind):
            return kind
    return str(weight.dtype).removeprefix("torch.")


def _linear(x: torch.Tensor, w: torch.Tensor, packed: object, bias: torch.Tensor | None
            ) -> torch.Tensor:
    return F.linear(x, w, bias)


def _matmul_t(x: torch.Tensor, w: torch.Tensor, packed: object, bias: torch.Tensor | None
              ) -> torch.Tensor:
    # W @ X.T is [out, rows]; BLAS sees a product with few columns rather than few rows
    y = (w @ x.t()).t().contiguous()
    return y if bias is None else y + bias


def _pack_mkldnn(w: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(w.detach(), None)


def _mkldnn(x: torch.Tensor, w: torch.Tensor, packed: object, bias: torch.Tensor | None
            ) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")


def _pack_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return w.qdata, w.scale.reshape(-1)  # type: ignore[attr-defined]


def _int8pack(x: torch.Tensor, w: torch.Tensor, packed: object, bias: torch.Tensor | None
              ) -> torch.Tensor:
    qdata, scale = packed  # type: ignore[misc]
    y = torch.ops.aten._weight_int8pack_mm(x.contiguous(), qdata, scale.to(x.dtype))
    return y if bias is None else y + bias


def _pack_c(w: torch.Tensor) -> native.Packed:
    if weight_kind(w) == "int8":
        return native.pack(w.qdata, w.scale, w.dtype)  # type: ignore[attr-defined]
    return native.pack(w)


def _c_gemv(x: torch.Tensor, w: torch.Tensor, packed: object, bias: torch.Tensor | None
            ) -> torch.Tensor:
    return native.gemv(x, packed, bias)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Formulation:
    """One way to write y = x @ W.T (+ bias): `run(x, W, packed, bias)`, with `pack(W)` done
    once when the layer is bound (None: nothing to prepare). `capturable`: made of torch ops
    only, so that a CUDA graph's capture records it (a call into foreign code is not)."""

    name: str
    run: Callable[..., torch.Tensor]
    pack: Callable[[torch.Tensor], object] | None
    about: str
    capturable: bool = True


FORMULATIONS = {f.name: f for f in (
    Formulation("linear", _linear, None, "F.linear(x, W): the call every layer makes"),
    Formulation("matmul_t", _matmul_t, None, "(W @ x.T).T: the same product, transposed"),
    Formulation("mkldnn", _mkldnn, _pack_mkldnn,
                "oneDNN's linear on W prepacked once into its blocked layout"),
    Formulation("int8pack", _int8pack, _pack_int8,
                "aten._weight_int8pack_mm on torchao's int8 weight and per-row scales"),
    Formulation("c_gemv", _c_gemv, _pack_c,
                "a C kernel built on this machine, on W prepacked into blocks of output rows",
                capturable=False),
)}


def candidates(weight: torch.Tensor) -> list[str]:
    """The formulations that can run this CPU weight, `linear` first (the reference)."""
    if weight.device.type != "cpu" or weight.dim() != 2:
        return ["linear"]
    kind = weight_kind(weight)
    if kind == "int8":
        scale = getattr(weight, "scale", None)
        per_row = scale is not None and scale.numel() == weight.shape[0]
        if not per_row:
            return ["linear"]
        return ["linear", "int8pack", *_c_gemv_if(weight.dtype, per_row)]
    if type(weight) not in (torch.Tensor, torch.nn.Parameter):
        return ["linear"]  # another tensor subclass (int4): its own kernel behind F.linear
    names = ["linear", "matmul_t"]
    if _mkldnn_runs(weight.dtype):
        names.append("mkldnn")
    return names + _c_gemv_if(weight.dtype, True)


@functools.cache
def _mkldnn_runs(dtype: torch.dtype) -> bool:
    """Whether oneDNN's prepacked linear runs this dtype on this CPU: its bfloat16 path needs
    AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT, and on a CPU without them packing raises. Asked by
    packing a small weight once, not by reading CPU flags."""
    if not torch.backends.mkldnn.is_available() or dtype not in (torch.float32, torch.bfloat16):
        return False
    try:
        _pack_mkldnn(torch.zeros(16, 16, dtype=dtype))
    except RuntimeError:
        return False
    return True


def _c_gemv_if(dtype: torch.dtype, ok: bool) -> list[str]:
    """["c_gemv"] when the C kernel is built here and takes this dtype's activations."""
    if ok and dtype in (torch.float32, torch.bfloat16) and native.library() is not None:
        return ["c_gemv"]
    return []


def time_formulations(weight: torch.Tensor, rows: int, names: list[str], repeats: int = 5,
                      packed: dict[str, object] | None = None, cold: ColdSet | None = None
                      ) -> dict[str, float]:
    """Seconds of one product with `rows` rows for each formulation: the fastest of `repeats`,
    the formulations taking turns so that a busy moment slows them all alike (a product of
    microseconds is timed as the mean of enough calls to last about a millisecond).

    Each call reads a weight from memory, as in a decode step, where every layer's weights were
    last read a whole step ago: products run in turn on enough copies of W (each with its own
    prepacked form) to pass COLD_BYTES, more than a CPU's caches hold (`cold`: made once for
    several calls by `cold_set`). Timed on one W that stays in the caches, a product looks several
    times faster than it is, and one that does more arithmetic per byte (a few rows through a
    kernel that converts every weight) looks best."""
    dtype = weight.dtype  # the activations' (a quantized weight reports its model's dtype)
    generator = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, weight.shape[1], generator=generator).to(dtype)
    weights, packs = cold or cold_set(weight, names, packed)
    packed = {name: packs[name][0] for name in names}
    best = dict.fromkeys(names, float("inf"))
    turn = 0  # the next copy to read
    with torch.inference_mode():
        for name in names:  # warm-up: first calls allocate and pick code paths
            FORMULATIONS[name].run(x, weight, packed.get(name), None)
        # a small product takes microseconds, less than the timer's noise: time `calls` of it
        # back to back, enough for about a millisecond
        start = time.perf_counter()
        FORMULATIONS[names[0]].run(x, weight, packed.get(names[0]), None)
        calls = max(1, min(100, int(1e-3 / max(time.perf_counter() - start, 1e-6))))
        for _ in range(repeats):
            for name in names:
                run, mine = FORMULATIONS[name].run, packs[name]
                start = time.perf_counter()
                for k in range(turn, turn + calls):
                    run(x, weights[k % len(weights)], mine[k % len(weights)], None)
                best[name] = min(best[name], (time.perf_counter() - start) / calls)
                turn += calls
    return best


ColdSet = tuple[list[torch.Tensor], dict[str, list[object]]]


def cold_set(weight: torch.Tensor, names: list[str], packed: dict[str, object] | None = None
             ) -> ColdSet:
    """W and enough copies of it to hold COLD_BYTES between them (at most MAX_COPIES), and each
    formulation's prepacked form of each (W's own from `packed` when there, else packed now and
    added to it)."""
    packed = {} if packed is None else packed
    for name in names:
        pack = FORMULATIONS[name].pack
        if name not in packed and pack is not None:
            packed[name] = pack(weight)
    inner = getattr(weight, "qdata", weight)  # a quantized weight: its integers' bytes
    nbytes = inner.numel() * inner.element_size()
    n = min(MAX_COPIES, -(-COLD_BYTES // max(nbytes, 1)))
    weights = [weight] + [weight.detach().clone() for _ in range(n - 1)]
    packs = {name: [packed.get(name)] + [FORMULATIONS[name].pack(w)  # type: ignore[misc]
                                         if FORMULATIONS[name].pack else None
                                         for w in weights[1:]] for name in names}
    return weights, packs


class LinearKernels:
    """One layer's product: the chosen formulation per row bucket, with what it prepacked.

    `__call__(x, weight, bias)` runs x [rows, in] with the choice for its bucket; more rows
    than the largest bucket, or x with another shape, take F.linear.
    """

    def __init__(self, weight: torch.Tensor, choices: dict[int, str],
                 packed: dict[str, object] | None = None) -> None:
        """`packed`: what measuring this same weight already prepacked (reused, not redone)."""
        self.choices = dict(choices)
        packed = packed or {}
        self.packed = {name: packed[name] if name in packed
                       else FORMULATIONS[name].pack(weight)  # type: ignore[misc]
                       for name in set(choices.values()) if FORMULATIONS[name].pack}
        self._by_rows: list[tuple[Callable[..., torch.Tensor], object]] = [
            (_linear, None)]  # rows 0
        for rows in range(1, ROW_BUCKETS[-1] + 1):
            name = self.choices.get(row_bucket(rows), "linear")  # type: ignore[arg-type]
            self._by_rows.append((FORMULATIONS[name].run, self.packed.get(name)))

    @property
    def packed_bytes(self) -> int:
        """Bytes of the prepacked copies this layer keeps beside its weight (int8pack's are
        views of the quantized weight: none)."""
        return sum(v.numel() * v.element_size() if isinstance(v, torch.Tensor)
                   else v.nbytes if isinstance(v, native.Packed) else 0
                   for v in self.packed.values())

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
                 ) -> torch.Tensor:
        if x.dim() != 2 or x.shape[0] > ROW_BUCKETS[-1]:
            return F.linear(x, weight, bias)
        run, packed = self._by_rows[x.shape[0]]
        return run(x, weight, packed, bias)


class BoundKernels:
    """A layer's `kernels` attribute (layers/linear.py, layers/embedding.py): its
    LinearKernels, or None for F.linear. Every assignment, to any layer, adds one to
    `BoundKernels.rebinds`: what was built from a model's kernels (engine/native_decode.py)
    asks one number each step, not every layer, whether any was rebound since."""

    rebinds = 0

    def __get__(self, obj: object, owner: type | None = None) -> LinearKernels | None:
        return None if obj is None else obj.__dict__.get("_kernels")

    def __set__(self, obj: object, value: LinearKernels | None) -> None:
        obj.__dict__["_kernels"] = value
        BoundKernels.rebinds += 1


def describe_choices(choices: dict[int, str]) -> str:
    """{1: "mkldnn", 2: "mkldnn", 4: "matmul_t", ...} -> "1-2 rows mkldnn, 4-64 rows matmul_t"."""
    runs: list[list] = []
    for bucket in ROW_BUCKETS:
        name = choices.get(bucket, "linear")
        if runs and runs[-1][2] == name:
            runs[-1][1] = bucket
        else:
            runs.append([bucket, bucket, name])
    return ", ".join(f"{lo}{'' if lo == hi else f'-{hi}'} rows {name}" for lo, hi, name in runs)


def machine_key() -> str:
    """What a measured choice depends on: the CPU, torch's version and threads, oneDNN, and
    which build of the C kernel is loaded, if any."""
    parts = [native.cpu_description(), torch.__version__, str(torch.get_num_threads()),
             str(torch.backends.mkldnn.is_available()), str(TABLE_VERSION),
             native.build_key()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


class KernelTable:
    """The choices measured on this machine: {"<out>x<in>:<kind>": {"<bucket>": name}} (kind:
    the weight's dtype, or e.g. "int8:bfloat16" for int8 weights and bfloat16 activations), in
    $MINIMODEL_HOME/kernels/<machine key>.json (the key changes with the CPU, torch's version
    and thread count, so another machine, or the same one with other threads, measures anew).

    A timing taken while other programs hold the cores can make a slow formulation look fast.
    So a shape is measured twice, at two starts at least SECOND_SITTING_AFTER_S apart: the
    first sitting's choice serves until then, the second merges its times with the first's
    (each formulation's best of both) and settles the choice. Delete the file to measure
    again from scratch."""

    def __init__(self, path: Path | None = None, clock: Callable[[], float] | None = None
                 ) -> None:
        self.path = path or minimodel_home() / "kernels" / f"{machine_key()}.json"
        self.clock = clock or time.time
        self.choices: dict[str, dict[str, str]] = {}
        self.seconds: dict[str, dict[str, dict[str, float]]] = {}
        self.sittings: dict[str, list[float]] = {}  # key -> when each sitting was (clock time)
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("version") == TABLE_VERSION:
                self.choices = data.get("choices", {})
                self.seconds = data.get("seconds", {})
                self.sittings = data.get("sittings", {})
        except (OSError, ValueError, AttributeError):
            pass  # none yet, or unreadable: measure again

    @staticmethod
    def key(weight: torch.Tensor) -> str:
        out, inp = weight.shape
        kind, dtype = weight_kind(weight), str(weight.dtype).removeprefix("torch.")
        return f"{out}x{inp}:{kind}" if kind == dtype else f"{out}x{inp}:{kind}:{dtype}"

    def get(self, weight: torch.Tensor) -> dict[int, str] | None:
        """The choice per bucket, or None when the shape is to be measured (now): never yet,
        or once, long enough ago for a second sitting."""
        key = self.key(weight)
        found = self.choices.get(key)
        if found is None or any(str(b) not in found for b in ROW_BUCKETS):
            return None
        if any(name not in candidates(weight) for name in found.values()):
            return None  # a formulation this machine can no longer run: measure again
        when = self.sittings.get(key, [])
        if len(when) < 2 and (not when or self.clock() - when[0] >= SECOND_SITTING_AFTER_S):
            return None
        return {int(b): name for b, name in found.items()}

    def measure(self, weight: torch.Tensor, repeats: int = 5,
                packed: dict[str, object] | None = None) -> dict[int, str]:
        """Time every candidate at every row bucket on this weight; keep and return the
        fastest per bucket (saved with `save`). At the shape's second sitting each
        formulation's time is the better of this one and the first's. The prepacked weights go
        into `packed`, when given, for the layer to keep."""
        names = candidates(weight)
        packed = {} if packed is None else packed
        cold = cold_set(weight, names, packed)  # fills `packed` with W's own packs
        key = self.key(weight)
        first = self.sittings.get(key, [])
        second = len(first) == 1 and key in self.seconds  # this is the second sitting
        before = self.seconds[key] if second else {}
        chosen, seconds = {}, {}
        for bucket in ROW_BUCKETS:
            times = time_formulations(weight, bucket, names, repeats, packed, cold)
            earlier = before.get(str(bucket), {})
            times = {n: min(t, earlier.get(n, t)) for n, t in times.items()}  # best of both
            chosen[bucket] = min(times, key=times.__getitem__)
            seconds[str(bucket)] = times
        self.choices[key] = {str(b): n for b, n in chosen.items()}
        self.seconds[key] = seconds
        self.sittings[key] = [first[0], self.clock()] if second else [self.clock()]
        return chosen

    def save(self) -> None:
        """Write the table (atomically: a reader sees the old file or the new one). Choices
        another process saved meanwhile are kept; a folder that cannot be written is only a
        cost (the next start measures again), never an error."""
        try:
            old = json.loads(self.path.read_text(encoding="utf-8"))
            if old.get("version") == TABLE_VERSION:
                self.choices = {**old.get("choices", {}), **self.choices}
                self.seconds = {**old.get("seconds", {}), **self.seconds}
                self.sittings = {**old.get("sittings", {}), **self.sittings}
        except (OSError, ValueError, AttributeError):
            pass
        data = {"version": TABLE_VERSION, "torch": torch.__version__,
                "threads": torch.get_num_threads(), "choices": self.choices,
                "seconds": self.seconds, "sittings": self.sittings}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
        except OSError:
            pass
