"""Small random Qwen3 checkpoints written to temporary folders, for parity tests."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import save_file

from minimodel.checkpoints import random_state_dict_numpy
from minimodel.config import Qwen3Config

# name -> config overrides; together they cover GQA ratios 1/2/4, MQA, Hq*D != C,
# tied and untied embeddings, and two rope thetas.
CONFIGS: dict[str, dict] = {
    "mha-untied-theta1e4": dict(num_attention_heads=4, num_key_value_heads=4, head_dim=16,
                                hidden_size=64, tie_word_embeddings=False, rope_theta=1e4),
    "gqa2-tied-hd!=C": dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                            hidden_size=64, tie_word_embeddings=True, rope_theta=1e6),
    "gqa4-untied": dict(num_attention_heads=8, num_key_value_heads=2, head_dim=16,
                        hidden_size=96, tie_word_embeddings=False, rope_theta=1e6),
    "mqa-tied-theta1e4": dict(num_attention_heads=4, num_key_value_heads=1, head_dim=24,
                              hidden_size=80, tie_word_embeddings=True, rope_theta=1e4),
    "gqa2-bias-3layers": dict(num_attention_heads=6, num_key_value_heads=3, head_dim=8,
                              hidden_size=40, num_hidden_layers=3, attention_bias=True,
                              tie_word_embeddings=False, rope_theta=5e5),
}


def small_config(**overrides) -> Qwen3Config:
    base = dict(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                max_position_embeddings=256, torch_dtype="float32", bos_token_id=None,
                eos_token_id=None)
    base.update(overrides)
    return Qwen3Config(**base)


def write_small_checkpoint(folder: Path, seed: int = 0, shards: int = 1, **overrides) -> Path:
    """A config.json + safetensors folder (no tokenizer) with numpy-seeded random weights."""
    cfg = small_config(**overrides)
    folder.mkdir(parents=True, exist_ok=True)
    cfg.save(folder)
    state = random_state_dict_numpy(cfg, seed=seed)
    if shards == 1:
        save_file(state, str(folder / "model.safetensors"))
        return folder
    names = list(state)
    weight_map = {}
    for i in range(shards):
        part = names[i::shards]
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: state[n] for n in part}, str(folder / file))
        weight_map.update({n: file for n in part})
    index = {"metadata": {}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


# Shapes bard and tiny lack, for the decode steps that rewrite the model's forward
# (engine/lean_decode.py): name -> (query heads, KV heads, q/k/v bias, tied embeddings).
DECODE_SHAPES = {
    "bias": (4, 2, True, True), "one-per-kv-head": (3, 3, False, False),
    "eight-per-kv-head": (8, 1, True, False),
}


def decode_shape_folders(tmp_path_factory) -> dict[str, Path]:
    """A checkpoint folder for each of DECODE_SHAPES (two layers, torch-seeded weights, the
    q/k/v biases drawn non-zero, so that a dropped bias shows)."""
    import torch

    from minimodel.checkpoints import random_state_dict_torch, write_checkpoint

    out = {}
    for name, (hq, hkv, bias, tied) in DECODE_SHAPES.items():
        cfg = Qwen3Config(vocab_size=300, hidden_size=48, intermediate_size=80,
                          num_hidden_layers=2, num_attention_heads=hq, num_key_value_heads=hkv,
                          head_dim=16, max_position_embeddings=128, attention_bias=bias,
                          tie_word_embeddings=tied, torch_dtype="float32")
        sd = random_state_dict_torch(cfg, seed=len(name))
        if bias:  # the drawn biases are zeros
            for key in sd:
                if key.endswith("_proj.bias"):
                    sd[key] = torch.randn(sd[key].shape) * 0.5
        folder = tmp_path_factory.mktemp(name)
        write_checkpoint(folder, cfg, sd)
        out[name] = folder
    return out


def prefilled_twins(model, prompt_lens: list[int], dtype, generator, page: int):
    """Two KV pools of 64 pages with the same pages lent out (out of order, as a pool lends
    them), each prefilled by the model with the same random prompts: one for the model's
    decode steps, one for a rewritten step's -> ([(cache, backend)] * 2, page tables)."""
    import torch

    from minimodel.engine.attention import TorchBackend, build_metadata
    from minimodel.engine.kv_cache import KVCache

    heads, kv_heads = model.num_local_heads
    caches = []
    for _ in range(2):
        cache = KVCache(model.cfg, 64, page, dtype, "cpu", num_kv_heads=kv_heads)
        caches.append((cache, TorchBackend(cache, heads, dtype)))
    tables, start = [], 3
    for n in prompt_lens:
        need = -(-(n + 5) // page)
        tables.append([(start + 5 * j) % 64 for j in range(need)])
        start += 1
    assert len({p for t in tables for p in t}) == sum(map(len, tables))  # no page shared
    prompts = [torch.randint(0, model.cfg.vocab_size, (n,), generator=generator)
               for n in prompt_lens]
    for _, backend in caches:
        md = build_metadata(tables, prompt_lens, prompt_lens, page)
        backend.plan(md)
        model(torch.cat(prompts), md.positions, backend)
    return caches, tables
