"""Weight-only quantization of the linear layers and the LM head, through torchao.

A decode step reads every weight once, so its time is the weights' bytes over the memory
bandwidth (chapter 09). Storing each weight in int8 (one byte, with a float scale per output
row) or int4 (half a byte, a scale and zero point per group of 128 inputs) reads 2x or 4x fewer
bytes than bfloat16; the activations stay in the model's dtype and each product dequantizes as
it reads. torchao does the quantizing (`quantize_` with `Int8WeightOnlyConfig`, and on a CPU
its `PrototypeInt4WeightOnlyConfig`, whose weights torch's int4 CPU kernel reads); on a CPU the
int8 product is timed against torch's `_weight_int8pack_mm` like every other product
(minimodel/kernels/matmul.py). The embedding table is kept exact: with tied embeddings the LM
head gets its own quantized copy.
"""

from __future__ import annotations

import torch
from torch import nn

from minimodel.layers.embedding import ParallelLMHead
from minimodel.layers.linear import _LinearBase

QUANTIZATIONS = ("int8", "int4")


def check_quantization(method: object, device: torch.device) -> str | None:
    """None, "int8" or "int4"; a ValueError for anything else, or int4 where torchao has no
    kernel for it here."""
    if method is None:
        return None
    if method not in QUANTIZATIONS:
        raise ValueError(f"quantization must be None, 'int8' or 'int4', got {method!r}.")
    if method == "int4" and device.type != "cpu":
        raise ValueError("quantization='int4' runs torch's int4 CPU kernel: use device='cpu', "
                         "or 'int8' on CUDA.")
    _torchao()  # a clear error now, before any weight is loaded, if torchao is missing
    return method  # type: ignore[return-value]


def _torchao():
    """torchao's quantization module; a ValueError that says how to install it if missing."""
    try:
        import torchao.quantization as quantization
    except ImportError:
        raise ValueError("quantization needs torchao: pip install 'torchao>=0.18'.") from None
    return quantization


def linear_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name, module) of every layer that multiplies by a weight matrix: the linear layers and
    the LM head (what is quantized, and what kernel_choice.py binds)."""
    return [(name, m) for name, m in model.named_modules()
            if isinstance(m, (_LinearBase, ParallelLMHead))]


def _group_size(in_features: int) -> int:
    """The largest of 128, 64, 32 that divides the layer's inputs (int4's groups)."""
    for size in (128, 64, 32):
        if in_features % size == 0:
            return size
    raise ValueError(f"quantization='int4' needs in_features divisible by 32; a layer has "
                     f"{in_features}.")


@torch.no_grad()
def quantize_model(model: nn.Module, method: str | None) -> None:
    """Quantize the linear layers and the LM head in place (None: nothing)."""
    if method is None:
        return
    quantization = _torchao()
    head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if head is not None and embed is not None and head.weight is embed.weight:
        head.weight = nn.Parameter(embed.weight.detach().clone(), requires_grad=False)
    for _, module in linear_layers(model):
        if method == "int8":
            config = quantization.Int8WeightOnlyConfig()
        else:
            from torchao.prototype.quantization.int4 import PrototypeInt4WeightOnlyConfig

            config = PrototypeInt4WeightOnlyConfig(group_size=_group_size(module.weight.shape[1]))
        quantization.quantize_(module, config, filter_fn=lambda m, _fqn: True)
