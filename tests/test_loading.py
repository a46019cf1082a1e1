"""Config dialects, checkpoint resolution and the safetensors loader's errors."""

from __future__ import annotations

import json
import time

import pytest
import torch
import transformers
from checkpoints import small_config, write_small_checkpoint
from safetensors.torch import load_file, save_file

import minimodel as mm
from minimodel.config import ConfigError
from minimodel.hub import resolve_model
from minimodel.weights import WeightsError

# --- config ------------------------------------------------------------------------------


def test_reads_real_qwen3_dialect(tmp_path):
    raw = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
           "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
           "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
           "rope_theta": 1000000, "torch_dtype": "bfloat16", "tie_word_embeddings": True,
           "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_scaling": None}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    cfg = mm.Qwen3Config.from_pretrained(tmp_path)
    assert (cfg.rope_theta, cfg.dtype, cfg.num_kv_groups, cfg.q_size) == (
        1e6, torch.bfloat16, 2, 2048)


def test_reads_transformers5_dialect(tmp_path):
    hf = transformers.Qwen3Config(vocab_size=300, hidden_size=48, num_hidden_layers=1,
                                  num_attention_heads=6, num_key_value_heads=2, head_dim=10,
                                  intermediate_size=64, rope_theta=12345.0)
    hf.save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert "rope_parameters" in raw  # the dialect this test is about
    cfg = mm.Qwen3Config.from_pretrained(tmp_path)
    assert (cfg.rope_theta, cfg.head_dim, cfg.num_key_value_heads) == (12345.0, 10, 2)


@pytest.mark.parametrize("change, message", [
    ({"model_type": "llama"}, "Qwen3"),
    ({"num_attention_heads": 6, "num_key_value_heads": 4}, "divisible"),
    ({"head_dim": 15}, "even"),
    ({"hidden_size": 0}, "positive"),
])
def test_bad_configs_are_clear_errors(tmp_path, change, message):
    raw = small_config().to_dict()
    raw.update(change)
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=message):
        mm.Qwen3Config.from_pretrained(tmp_path)


def test_config_roundtrip_loads_in_transformers(tmp_path):
    cfg = small_config(num_key_value_heads=1, rope_theta=5e5)
    cfg.save(tmp_path)
    hf = transformers.AutoConfig.from_pretrained(tmp_path)
    assert hf.model_type == "qwen3" and hf.num_key_value_heads == 1
    assert mm.Qwen3Config.from_pretrained(tmp_path) == cfg


# --- resolve_model ---------------------------------------------------------------------------


def test_unknown_names_are_clear_errors():
    with pytest.raises(ValueError, match="supported"):
        resolve_model("random:qwen3-99b")
    with pytest.raises(FileNotFoundError, match="Unknown model"):
        resolve_model("no-such-model")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        resolve_model(".")


@pytest.mark.parametrize("env", [{"HF_HUB_OFFLINE": "1"}, {"HF_ENDPOINT": "http://127.0.0.1:9"}])
def test_repo_id_offline_fails_fast_with_instructions(monkeypatch, tmp_path, env):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    start = time.perf_counter()
    with pytest.raises(FileNotFoundError, match="huggingface-cli download Qwen/Qwen3-0.6B"):
        resolve_model("Qwen/Qwen3-0.6B")
    assert time.perf_counter() - start < 30


# --- weights -------------------------------------------------------------------------------


def test_sharded_checkpoint_loads_like_single_file(tmp_path):
    one = write_small_checkpoint(tmp_path / "one", seed=3)
    three = write_small_checkpoint(tmp_path / "three", seed=3, shards=3)
    assert len(list(three.glob("*.safetensors"))) == 3
    ids = torch.arange(10)[None]
    a = mm.reference.Qwen3ForCausalLM.from_pretrained(one)(ids)
    b = mm.reference.Qwen3ForCausalLM.from_pretrained(three)(ids)
    assert torch.equal(a, b)


def test_dtype_conversion(tmp_path):
    folder = write_small_checkpoint(tmp_path)
    model = mm.reference.Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.cfg.tie_word_embeddings
    assert model.lm_head.weight is model.model.embed_tokens.weight


def _edit_weights(folder, edit):
    file = folder / "model.safetensors"
    state = load_file(str(file))
    edit(state)
    save_file(state, str(file))


def test_missing_tensor_is_named(tmp_path):
    folder = write_small_checkpoint(tmp_path)
    _edit_weights(folder, lambda s: s.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(WeightsError, match=r"model\.layers\.1\.mlp\.up_proj\.weight.*missing"):
        mm.reference.Qwen3ForCausalLM.from_pretrained(folder)


def test_unexpected_tensor_is_named(tmp_path):
    folder = write_small_checkpoint(tmp_path)
    _edit_weights(folder, lambda s: s.update({"model.layers.0.extra.weight": torch.zeros(2)}))
    with pytest.raises(WeightsError, match=r"does not use.*model\.layers\.0\.extra\.weight"):
        mm.reference.Qwen3ForCausalLM.from_pretrained(folder)


def test_wrong_shape_names_both_shapes(tmp_path):
    folder = write_small_checkpoint(tmp_path)
    _edit_weights(folder, lambda s: s.update(
        {"model.layers.0.self_attn.o_proj.weight": torch.zeros(64, 10)}))
    with pytest.raises(WeightsError, match=r"o_proj.*\(64, 10\).*\(64, 64\)"):
        mm.reference.Qwen3ForCausalLM.from_pretrained(folder)


def test_corrupt_file_is_a_clear_error(tmp_path):
    folder = write_small_checkpoint(tmp_path)
    file = folder / "model.safetensors"
    file.write_bytes(file.read_bytes()[:1000])
    with pytest.raises(WeightsError, match="corrupt"):
        mm.reference.Qwen3ForCausalLM.from_pretrained(folder)


def test_no_safetensors_is_a_clear_error(tmp_path):
    small_config().save(tmp_path)
    with pytest.raises(WeightsError, match="safetensors"):
        mm.reference.Qwen3ForCausalLM.from_pretrained(tmp_path)


def test_merged_projections_equal_separate_ones(tmp_path):
    """The packed-module mapping stacks q/k/v (and gate/up) so one matmul does the work."""
    from torch import nn

    from minimodel.weights import load_weights

    cfg = small_config()
    folder = write_small_checkpoint(tmp_path)

    class Merged(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.Module()
            self.attn.qkv_proj = nn.Linear(cfg.hidden_size, cfg.q_size + 2 * cfg.kv_size,
                                           bias=False)

    merged = Merged()
    # load only layer 0's q/k/v by renaming the module path to match
    state = load_file(str(folder / "model.safetensors"))
    sub = tmp_path / "sub"
    sub.mkdir()
    save_file({k.replace("model.layers.0.self_attn.", "attn."): v for k, v in state.items()
               if k.startswith("model.layers.0.self_attn.") and k.split(".")[-2] in
               ("q_proj", "k_proj", "v_proj")}, str(sub / "model.safetensors"))
    load_weights(merged, sub, tie_word_embeddings=False)
    x = torch.randn(5, cfg.hidden_size)
    ref = mm.reference.Qwen3ForCausalLM.from_pretrained(folder).model.layers[0].self_attn
    q, k, v = merged.attn.qkv_proj(x).split([cfg.q_size, cfg.kv_size, cfg.kv_size], dim=-1)
    assert torch.allclose(q, ref.q_proj(x)) and torch.allclose(k, ref.k_proj(x))
    assert torch.allclose(v, ref.v_proj(x))
