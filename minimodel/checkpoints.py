"""Model folders built offline: `tiny`, `random:<shape>` (random weights) and `bard` (shipped).

Each is a complete Hugging Face-format folder (config.json, model.safetensors,
generation_config.json, tokenizer files), so transformers loads the very same folder for
comparisons. `minimodel.hub` builds them into the cache on first use; this module only knows how
to write them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from minimodel.bpe import write_tokenizer_files
from minimodel.config import Qwen3Config

TINY = Qwen3Config(
    vocab_size=151936,  # the real Qwen3 vocabulary, so the real tokenizer works
    hidden_size=64,  # C
    intermediate_size=192,  # I
    num_hidden_layers=4,  # L
    num_attention_heads=4,  # Hq
    num_key_value_heads=2,  # Hkv: GQA, two query heads per KV head
    head_dim=32,  # D: Hq * D = 128 != C, as in the real models
    max_position_embeddings=4096,
    rope_theta=1_000_000.0,
    tie_word_embeddings=True,
    torch_dtype="float32",
)

# Published Qwen3 dense shapes (https://huggingface.co/Qwen), for `random:<name>`.
SHAPES: dict[str, Qwen3Config] = {
    "qwen3-0.6b": Qwen3Config(
        hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
    ),
    "qwen3-1.7b": Qwen3Config(
        hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
    ),
    "qwen3-4b": Qwen3Config(
        hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
    ),
    "qwen3-8b": Qwen3Config(
        hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False,
    ),
}

GENERATION_CONFIG = {
    "bos_token_id": 151643,
    "eos_token_id": [151645, 151643],
    "pad_token_id": 151643,
    "do_sample": True,
    "temperature": 0.6,
    "top_k": 20,
    "top_p": 0.95,
}

# `bard`: the course's own small Qwen3, trained by minimodel/train/ on Shakespeare and on Tang
# and Song poems (docs/bard.md). Its weights ship inside the package; the folder in the cache adds
# the tokenizer files. sha256 of its tensors (names, dtypes, shapes, bytes), as weights_checksum.
BARD_DIR = Path(__file__).resolve().parent / "models" / "bard"
# `bard-draft`: bard's drafter for speculative decoding (chapter 13), over a compact vocabulary.
DRAFT_DIR = BARD_DIR.parent / "bard-draft"
DRAFT_SHA256 = "dfca9d1bfbc35d02e750697dd50c7fb9b2e0fea8d9137e299dcb180c79ce4f93"
# sha256 of its draft_vocab.json (the token id of each row, and the rows its head scores)
DRAFT_VOCAB_SHA256 = "3bbc7626ddd57cf9cc1ba5735206d8db17137594a62f18477fb3bebf29863aad"
BARD_SHA256 = "e0e92d9a362475c1c6f80a693dc62fe349a74e561215c50b82081470b7a99c22"

# Bump when what the builders write changes, so that caches built by older code are rebuilt.
BUILD_VERSION = "1"


def tensor_shapes(cfg: Qwen3Config) -> dict[str, tuple[int, ...]]:
    """Every tensor of a checkpoint with this config, by its Hugging Face name, in file order."""
    C, I, V, D = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (V, C)}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (C,),
            p + "self_attn.q_proj.weight": (cfg.q_size, C),
            p + "self_attn.k_proj.weight": (cfg.kv_size, C),
            p + "self_attn.v_proj.weight": (cfg.kv_size, C),
            p + "self_attn.o_proj.weight": (C, cfg.q_size),
            p + "self_attn.q_norm.weight": (D,),
            p + "self_attn.k_norm.weight": (D,),
            p + "post_attention_layernorm.weight": (C,),
            p + "mlp.gate_proj.weight": (I, C),
            p + "mlp.up_proj.weight": (I, C),
            p + "mlp.down_proj.weight": (C, I),
        })
        if cfg.attention_bias:
            shapes.update({
                p + "self_attn.q_proj.bias": (cfg.q_size,),
                p + "self_attn.k_proj.bias": (cfg.kv_size,),
                p + "self_attn.v_proj.bias": (cfg.kv_size,),
            })
    shapes["model.norm.weight"] = (C,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (V, C)
    return shapes


def _std(name: str, shape: tuple[int, ...], embed_std: float) -> tuple[float, float]:
    """(mean, std) of the random init for one tensor: norms near 1, linears ~ 1/sqrt(fan_in)."""
    if "norm" in name:
        return 1.0, 0.1
    if "embed_tokens" in name or "lm_head" in name:
        return 0.0, embed_std
    return 0.0, shape[-1] ** -0.5


def random_state_dict_numpy(cfg: Qwen3Config, seed: int = 0) -> dict[str, torch.Tensor]:
    """Weights drawn from numpy's frozen legacy generator: the same bits on every machine."""
    rng = np.random.RandomState(seed)
    out = {}
    for name, shape in tensor_shapes(cfg).items():
        mean, std = _std(name, shape, embed_std=0.5)
        values = rng.standard_normal(size=shape).astype(np.float32) * np.float32(std)
        out[name] = torch.from_numpy(values + np.float32(mean))
    return out


def random_state_dict_torch(cfg: Qwen3Config, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights for the large shapes, drawn quickly with torch in the config's dtype."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in tensor_shapes(cfg).items():
        mean, std = _std(name, shape, embed_std=0.02)
        out[name] = (torch.randn(shape, generator=gen) * std + mean).to(cfg.dtype)
    return out


def weights_checksum(state_dict: dict[str, torch.Tensor]) -> str:
    """sha256 over names, dtypes, shapes and raw bytes, in sorted name order."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def write_checkpoint(
    folder: Path, cfg: Qwen3Config, state_dict: dict[str, torch.Tensor]
) -> None:
    """Write a complete Hugging Face-format model folder."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg.save(folder)
    save_file(state_dict, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "generation_config.json").write_text(
        json.dumps(GENERATION_CONFIG, indent=2) + "\n", encoding="utf-8"
    )
    write_tokenizer_files(folder)


def build_tiny(folder: Path) -> None:
    """`tiny`: the real vocabulary and a small random body, the same bits on every machine."""
    write_checkpoint(folder, TINY, random_state_dict_numpy(TINY))


def build_random(shape: str) -> Callable[[Path], None]:
    """The builder of `random:<shape>`: a published Qwen3 shape (SHAPES) with random weights."""
    cfg = SHAPES[shape]
    return lambda folder: write_checkpoint(folder, cfg, random_state_dict_torch(cfg))


def build_bard(folder: Path) -> None:
    """Copy bard's shipped files into `folder`, check its weights, add the tokenizer files."""
    copy_shipped(folder, BARD_DIR, BARD_SHA256, "bard")


def build_bard_draft(folder: Path) -> None:
    """The same for `bard-draft`, with its map of compact rows to token ids (checked too)."""
    vocab = DRAFT_DIR / "draft_vocab.json"
    digest = hashlib.sha256(vocab.read_bytes()).hexdigest() if vocab.is_file() else "missing"
    if digest != DRAFT_VOCAB_SHA256:
        raise ValueError(f"{vocab} has sha256 {digest}, expected {DRAFT_VOCAB_SHA256}: the file "
                         "is damaged or from another version. Restore it from the repository "
                         "(git checkout).")
    copy_shipped(folder, DRAFT_DIR, DRAFT_SHA256, "bard-draft", extra=("draft_vocab.json",))


def copy_shipped(folder: Path, source: Path, sha256: str, name: str,
                 extra: tuple[str, ...] = ()) -> None:
    """Copy a model shipped in the package into `folder`, check its weights' sha256, add the
    tokenizer files."""
    weights = source / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(
            f"{name}'s weights are missing: {weights} does not exist. Reinstall minimodel "
            "(pip install -e .) from a complete checkout."
        )
    digest = weights_checksum(load_file(str(weights)))
    if digest != sha256:
        raise ValueError(
            f"{weights} has weights checksum {digest}, expected {sha256}: the file is "
            "damaged or from another version. Restore it from the repository (git checkout)."
        )
    for file in ("config.json", "generation_config.json", "model.safetensors", *extra):
        shutil.copyfile(source / file, folder / file)
    write_tokenizer_files(folder)
