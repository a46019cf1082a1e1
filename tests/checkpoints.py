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
