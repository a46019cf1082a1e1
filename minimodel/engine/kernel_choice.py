"""Bind every linear layer and the LM head to the product measured fastest on this CPU.

When an LLM starts on a CPU, each distinct (weight shape, weight kind) of its layers is timed
once per row bucket (1, 2, 4, ... 64 rows: a decode step's requests, or the rows speculative
decoding checks) in every formulation that can run it (minimodel/kernels/matmul.py), unless this
machine's table under $MINIMODEL_HOME already holds the choice. Each layer then keeps its choice
per bucket and the prepacked weights the choice needs. On CUDA nothing changes: every product
is F.linear.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from minimodel.engine.quantization import linear_layers
from minimodel.kernels.matmul import (
    FORMULATIONS,
    KernelTable,
    LinearKernels,
    candidates,
    describe_choices,
)


@dataclass(frozen=True)
class KernelChoice:
    """What one (weight shape, kind) of this model runs: its layers, the choice per bucket,
    whether it was measured in this start (else read from the table) and the seconds."""

    shape: tuple[int, int]
    kind: str
    layers: list[str]
    choices: dict[int, str]
    measured: bool
    seconds: dict[str, dict[str, float]]

    def describe(self) -> str:
        """'151936x1024 float32 (lm_head): 1-4 rows mkldnn, 8-64 rows matmul_t'."""
        names = {name.split(".")[-1] for name in self.layers}
        return (f"{self.shape[0]}x{self.shape[1]} {self.kind} ({', '.join(sorted(names))}): "
                f"{describe_choices(self.choices)}")


def choose_kernels(model: nn.Module, table: KernelTable | None = None) -> list[KernelChoice]:
    """Bind each layer's `kernels` (CPU only; [] and nothing bound on CUDA), measuring what the
    table lacks and saving it."""
    layers = [(name, m) for name, m in linear_layers(model) if m.weight.device.type == "cpu"]
    if not layers:
        return []
    table = table or KernelTable()
    groups: dict[str, list[tuple[str, nn.Module]]] = {}
    for name, module in layers:
        groups.setdefault(table.key(module.weight), []).append((name, module))
    report, changed = [], False
    for key, members in groups.items():
        weight = members[0][1].weight
        if len(candidates(weight)) == 1:
            continue  # nothing to choose between: F.linear (torchao's own kernel for int4)
        choices, packed = table.get(weight), {}
        measured = choices is None
        if measured:
            choices = table.measure(weight, packed=packed)  # its packs serve members[0]
            changed = True
        for i, (_, module) in enumerate(members):
            module.kernels = LinearKernels(module.weight, choices, packed if i == 0 else None)
        report.append(KernelChoice(tuple(weight.shape), key.split(":", 1)[1],
                                   [name for name, _ in members], choices, measured,
                                   table.seconds.get(key, {})))
    if changed:
        table.save()
    return report


def kernels_without(model: nn.Module, names: set[str]
                    ) -> list[tuple[nn.Module, LinearKernels, LinearKernels]]:
    """(layer, its kernels, its kernels without the formulations `names`) for every layer whose
    choice uses one of them: where one was chosen, the fastest other of the same timings
    (`model.kernel_choices`' seconds) takes its place."""
    by_layer = {layer: c for c in getattr(model, "kernel_choices", []) for layer in c.layers}
    swaps = []
    for layer, module in linear_layers(model):
        kernels, choice = module.kernels, by_layer.get(layer)
        if kernels is None or choice is None or not names & set(kernels.choices.values()):
            continue
        others = {}
        for bucket, chosen in kernels.choices.items():
            timed = {n: t for n, t in choice.seconds.get(str(bucket), {}).items()
                     if n not in names}
            others[bucket] = (chosen if chosen not in names
                              else min(timed, key=timed.__getitem__, default="linear"))
        swaps.append((module, kernels, LinearKernels(module.weight, others)))
    return swaps


def capturable_kernels(model: nn.Module) -> None:
    """Rebind every layer that chose a formulation a CUDA graph cannot capture (the C kernel)
    to the fastest one it can (CPU only: on CUDA nothing is bound)."""
    names = {n for n, f in FORMULATIONS.items() if not f.capturable}
    for module, _, other in kernels_without(model, names):
        module.kernels = other


def unbind_kernels(model: nn.Module) -> None:
    """Every layer back to F.linear (and its prepacked copies freed)."""
    for _, module in linear_layers(model):
        module.kernels = None


def packed_bytes(model: nn.Module) -> int:
    """Bytes of the prepacked weight copies the bound layers keep (tied weights count once)."""
    seen, total = set(), 0
    for _, module in linear_layers(model):
        kernels = module.kernels
        if kernels is not None and id(kernels) not in seen:
            seen.add(id(kernels))
            total += kernels.packed_bytes
    return total

