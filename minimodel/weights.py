"""safetensors -> modules: Hugging Face names, merged projections, tied embeddings, dtype.

The reference model keeps the checkpoint's layout (q_proj, k_proj, v_proj, gate_proj, up_proj).
The engine merges projections that read the same input into one matmul: q/k/v into `qkv_proj`
and gate/up into `gate_up_proj`. PACKED_MODULES says which checkpoint tensors are stacked, in
order along dim 0, into each merged parameter.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

from minimodel.config import Qwen3Config

PACKED_MODULES: dict[str, tuple[str, ...]] = {
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "gate_up_proj": ("gate_proj", "up_proj"),
}


M = TypeVar("M", bound=nn.Module)


class WeightsError(ValueError):
    """A checkpoint whose tensors do not fit the model."""


def safetensors_files(folder: str | Path) -> list[Path]:
    """The checkpoint's safetensors files: one file, or the shards an index names."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        files = [folder / f for f in sorted(set(weight_map.values()))]
    else:
        files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise WeightsError(
            f"No *.safetensors files in {folder}. minimodel loads safetensors only "
            "(no pickle .bin files); convert the checkpoint or download its safetensors."
        )
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise WeightsError(f"The index in {folder} names shards that are missing: {missing}.")
    return files


def iter_checkpoint(folder: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (name, tensor) for every tensor of every safetensors file, on the CPU."""
    from safetensors import safe_open

    for file in safetensors_files(folder):
        try:
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():
                    yield name, f.get_tensor(name)
        except WeightsError:
            raise
        except Exception as e:
            raise WeightsError(
                f"Could not read {file}: {e}. The file is corrupt or not safetensors; "
                "download it again."
            ) from e


def _shard_names(param_name: str) -> list[str] | None:
    """Checkpoint names stacked into a merged parameter, or None if it is not merged."""
    for merged, parts in PACKED_MODULES.items():
        if f".{merged}." in param_name:
            return [param_name.replace(f".{merged}.", f".{part}.") for part in parts]
    return None


def build_model(model_class: type[M], folder: str | Path, dtype: torch.dtype,
                device: torch.device | str) -> M:
    """`model_class(cfg)` for the checkpoint in `folder`, with its weights loaded.

    The modules are made on the meta device, so no random init is computed and thrown away,
    then given real storage on `device` in `dtype`; tied embeddings share one Parameter.
    """
    cfg = Qwen3Config.from_pretrained(folder)
    with torch.device("meta"):
        model = model_class(cfg)
    model = model.to_empty(device=device).to(dtype)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    load_weights(model, folder, cfg.tie_word_embeddings)
    return model


@torch.no_grad()
def load_weights(model: nn.Module, folder: str | Path, tie_word_embeddings: bool) -> None:
    """Copy a checkpoint into `model`'s parameters (converting dtype, merging packed tensors).

    Raises WeightsError naming the tensor when one is missing, unexpected or mis-shaped; the
    model is only written once every tensor has been checked.
    """
    checkpoint = dict(iter_checkpoint(folder))
    params = dict(model.named_parameters(remove_duplicate=False))
    used: set[str] = set()
    plan: list[tuple[nn.Parameter, torch.Tensor]] = []
    plan_loaders = []
    for name, param in params.items():
        if tie_word_embeddings and name == "lm_head.weight":
            continue  # the same Parameter as model.embed_tokens.weight
        owner_name, _, leaf = name.rpartition(".")
        owner = model.get_submodule(owner_name)
        # A tensor-parallel layer holds a shard: it checks the full shape and cuts its part.
        full_shape = tuple(getattr(owner, "full_shapes", {}).get(leaf, param.shape))
        sources = _shard_names(name) or [name]
        missing = [s for s in sources if s not in checkpoint]
        if missing:
            raise WeightsError(
                f"Tensor {missing[0]!r} (needed for parameter {name!r}, shape "
                f"{tuple(param.shape)}) is missing from the checkpoint in {folder}."
            )
        tensor = torch.cat([checkpoint[s] for s in sources], dim=0)
        if tuple(tensor.shape) != full_shape:
            detail = ", ".join(f"{s}: {tuple(checkpoint[s].shape)}" for s in sources)
            raise WeightsError(
                f"Tensor {name!r} has shape {tuple(tensor.shape)} in the checkpoint ({detail}) "
                f"but the model expects {full_shape}; config.json and the weights "
                "disagree."
            )
        used.update(sources)
        plan.append((param, tensor))
        plan_loaders.append(getattr(owner, "weight_loader", None))
    unexpected = sorted(set(checkpoint) - used)
    if tie_word_embeddings and "lm_head.weight" in unexpected:
        unexpected.remove("lm_head.weight")  # some tied checkpoints store the copy anyway
    if unexpected:
        raise WeightsError(
            f"The checkpoint in {folder} has tensors the model does not use: {unexpected[:5]}"
            f"{' ...' if len(unexpected) > 5 else ''}. Is config.json the one for these weights?"
        )
    for (param, tensor), loader in zip(plan, plan_loaders, strict=True):
        if loader is not None:
            loader(param, tensor)
        else:
            param.copy_(tensor.to(dtype=param.dtype))
