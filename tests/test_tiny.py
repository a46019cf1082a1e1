"""The `tiny` checkpoint: same bits everywhere, the real quirks, loadable by transformers."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from safetensors.torch import load_file

import minimodel as mm
from minimodel.checkpoints import TINY, random_state_dict_numpy, weights_checksum

# sha256 of tiny's weights (names, dtypes, shapes, bytes). numpy's legacy RandomState is frozen,
# so this holds on every machine and library version; if it changes, tiny is not tiny any more.
TINY_SHA256 = "3b5520f40adc0e008fb70003c90db096cf4e0c4aa926629884df9ad6a81303ec"


@pytest.fixture(scope="module")
def tiny():
    return mm.resolve_model("tiny")


def test_checksum_is_stable(tiny):
    assert weights_checksum(load_file(str(tiny / "model.safetensors"))) == TINY_SHA256
    assert weights_checksum(random_state_dict_numpy(TINY)) == TINY_SHA256


def test_keeps_the_real_models_quirks(tiny):
    cfg = mm.Qwen3Config.from_pretrained(tiny)
    assert cfg.vocab_size == 151936
    assert cfg.num_attention_heads > cfg.num_key_value_heads > 0  # GQA
    assert cfg.num_attention_heads * cfg.head_dim != cfg.hidden_size
    assert cfg.tie_word_embeddings
    names = load_file(str(tiny / "model.safetensors")).keys()
    assert "model.layers.0.self_attn.q_norm.weight" in names  # QK-norm
    assert "lm_head.weight" not in names  # tied


def test_folder_is_complete_hugging_face_format(tiny):
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
              "generation_config.json"):
        assert (tiny / f).is_file(), f
    gen = json.loads((tiny / "generation_config.json").read_text())
    assert 151645 in gen["eos_token_id"]
    assert "enable_thinking" in json.loads((tiny / "tokenizer_config.json").read_text())[
        "chat_template"]


def test_transformers_loads_the_same_folder_and_agrees(tiny):
    hf = transformers.AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(tiny)
    ours_tok = mm.load_tokenizer(tiny)
    text = "我爱datawhale! Qwen3 runs on a CPU."
    ids = ours_tok.encode(text)
    assert tok(text)["input_ids"] == ids
    ref = mm.reference.Qwen3ForCausalLM.from_pretrained(tiny)
    x = torch.tensor([ids])
    with torch.no_grad():
        diff = (ref(x) - hf(x).logits).abs().max().item()
    assert diff <= 1e-4
