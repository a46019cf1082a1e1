"""The products' floor: how fast a decode step's matrix products run when no weight has to come
from memory.

A decode step of B requests multiplies B rows by every weight. At B = 1 reading the weights
binds (chapter 09); as B grows the multiply-adds catch up, and from some B on the arithmetic
binds. The floor says where, on this CPU: each (weight shape, kind) of the model, through the
formulation the engine chose for B rows, is timed on the weight's first rows (a slice that the
caches hold) and scaled up to the whole weight and every layer of that shape.

A step of B requests takes at least its products, and a product reading its weight from memory
is no faster than one reading it from the caches: the floor at B over the batch-1 step
estimates the least `step_over_batch1` these kernels allow on this CPU. Where it is well above
the card's 1.3 at B = 8, the arithmetic, not the engine around it, is what misses the target.
It is a measurement like the others, not a proof: a busy moment can lift it a little above a
step measured at a quieter one.

Timing a slice includes what each call costs whatever its size (Python, the call into C,
waking threads). Two slices, of n / 2 and n rows, cost the same outside the products: their
difference is the price of n / 2 rows of arithmetic, and the floor of a layer is its n rows'
call plus that price for the rest of its rows.
"""

from __future__ import annotations

import torch

from minimodel.bench.curve import tensor_bytes
from minimodel.kernels.matmul import FORMULATIONS, row_bucket
from minimodel.kernels.roofline import best_time

# bytes of the larger slice: both slices in the last-level cache of most CPUs, and on one side
# of the per-core caches (a slice that fits them against one that spills would price the spill as
# arithmetic), and far above the size under which gemv.c runs on one thread
HOT_BYTES = 4 << 20
CALL_SECONDS = 2e-3  # each timing: back-to-back calls adding up to about this long
REPEATS = 5  # the fastest of this many timings (a shared machine only makes a run slower)
ROUNDS = 3  # and of this many rounds over every (B, weight), seconds apart:
# a busy spell of a shared machine can outlast one product's timings, rarely all its rounds


def _call_seconds(run, x: torch.Tensor, weight: torch.Tensor, packed: object) -> float:
    """Seconds of one call: the fastest of REPEATS timings of back-to-back calls."""
    def once() -> None:
        run(x, weight, packed, None)

    def back_to_back() -> None:
        for _ in range(calls):
            once()

    calls = max(1, min(200, int(CALL_SECONDS / max(best_time(once, repeats=1), 1e-7))))
    return best_time(back_to_back, repeats=REPEATS) / calls


def slice_seconds(weight: torch.Tensor, name: str, rows: int) -> dict[int, float]:
    """{size: seconds} of `rows` rows times the weight's first n rows (about HOT_BYTES) and its
    first n / 2 rows through formulation `name`; the whole weight when it is smaller."""
    out, cols = weight.shape
    per_row = max(1, tensor_bytes(weight) // out)  # bytes of one output row (and its scale)
    n = min(out, max(16, HOT_BYTES // per_row) // 16 * 16)
    formulation = FORMULATIONS[name]
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(rows)).to(weight.dtype)
    seconds = {}
    for size in sorted({n // 2, n}):
        part = weight[:size]  # (a torchao weight slices outside inference mode only)
        packed = formulation.pack(part) if formulation.pack else None
        with torch.inference_mode():
            seconds[size] = _call_seconds(formulation.run, x, part, packed)
    return seconds


def whole_seconds(out: int, seconds: dict[int, float]) -> float:
    """The seconds of all `out` rows of a weight from its slices' (slice_seconds): the larger
    slice's, and the rest of the rows priced at the two slices' difference."""
    n, half = max(seconds), min(seconds)
    if n == out or n == half:
        return seconds[n]
    per_output = max(0.0, seconds[n] - seconds[half]) / (n - half)
    return seconds[n] + (out - n) * per_output


def weight_floor(weight: torch.Tensor, name: str, rows: int) -> float:
    """Seconds of `rows` rows times the whole `weight` through formulation `name`, the weight
    read from the caches."""
    return whole_seconds(weight.shape[0], slice_seconds(weight, name, rows))


def products_floor(llm, batches: tuple[int, ...]) -> dict[int, float] | None:
    """{B: seconds of a decode step's products with B rows, every weight read from the
    caches}, through the formulations the engine chose (`llm.kernel_choices`); None where the
    engine chose none (CUDA, or kernels not tuned). Each slice's time is its best over ROUNDS
    rounds, and the whole weight's is priced from those bests."""
    choices = getattr(llm, "kernel_choices", None)
    if not choices:
        return None
    modules = dict(llm.model.named_modules())
    weights = [modules[choice.layers[0]].weight for choice in choices]
    best: dict[tuple[int, int], dict[int, float]] = {}
    for _ in range(ROUNDS):
        for batch in batches:
            for k, choice in enumerate(choices):
                name = choice.choices.get(row_bucket(batch), "linear")  # type: ignore[arg-type]
                mine = best.setdefault((batch, k), {})
                for size, seconds in slice_seconds(weights[k], name, batch).items():
                    mine[size] = min(mine.get(size, float("inf")), seconds)
    return {batch: sum(len(choice.layers) * whole_seconds(weights[k].shape[0], best[batch, k])
                       for k, choice in enumerate(choices))
            for batch in batches}
