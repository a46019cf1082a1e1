"""A checkpoint folder with a damaged file: each is a ValueError (ConfigError for config.json)
that names the file and what is wrong in it, never a TypeError from deep inside."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import minimodel as mm
from minimodel.config import ConfigError, Qwen3Config


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of tiny's folder that the test may damage."""
    target = tmp_path / "model"
    shutil.copytree(mm.resolve_model("tiny"), target)
    return target


def _edit_config(folder: Path, **fields) -> None:
    path = folder / "config.json"
    raw = json.loads(path.read_text())
    path.write_text(json.dumps({**raw, **fields}))


@pytest.mark.parametrize("fields, name", [
    ({"rope_theta": "1e6"}, "rope_theta"), ({"rope_theta": None}, "rope_theta"),
    ({"rms_norm_eps": "1e-6"}, "rms_norm_eps"), ({"rms_norm_eps": 0}, "rms_norm_eps"),
    ({"hidden_size": "1024"}, "hidden_size"), ({"num_hidden_layers": True}, "num_hidden_layers"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
    ({"eos_token_id": "end"}, "eos_token_id"), ({"torch_dtype": 16}, "torch_dtype"),
    ({"rope_scaling": "linear"}, "rope_scaling"),
    ({"num_attention_heads": "16", "head_dim": None}, "num_attention_heads"),
])
def test_a_config_field_of_the_wrong_type_names_the_field_and_the_file(folder, fields, name):
    _edit_config(folder, **fields)
    with pytest.raises(ConfigError, match=name) as err:
        Qwen3Config.from_pretrained(folder)
    assert "config.json" in str(err.value)
    with pytest.raises(ValueError, match=name):
        mm.LLM(folder, device="cpu", num_pages=8)


@pytest.mark.parametrize("text, message", [
    ("[1, 2]", "JSON object"), ('"qwen3"', "JSON object"), ("{not json", "not valid JSON"),
])
def test_a_config_that_is_no_json_object(folder, text, message):
    (folder / "config.json").write_text(text)
    with pytest.raises(ConfigError, match=message):
        Qwen3Config.from_pretrained(folder)


@pytest.mark.parametrize("text", ['{"model": 1', '{"version": "1.0"}', "[]", "\xff garbage"])
def test_a_corrupt_tokenizer_json_names_the_file(folder, text):
    (folder / "tokenizer.json").write_text(text, encoding="latin-1")
    with pytest.raises(ValueError, match="tokenizer.json is not a valid tokenizer.json"):
        mm.load_tokenizer(folder)


@pytest.mark.parametrize("name", ["tokenizer_config.json", "generation_config.json"])
def test_a_corrupt_tokenizer_side_file_names_the_file(folder, name):
    (folder / name).write_text("{truncated")
    with pytest.raises(ValueError, match=name):
        mm.load_tokenizer(folder)


def test_the_real_files_still_load(folder):
    assert Qwen3Config.from_pretrained(folder).model_type == "qwen3"
    assert mm.load_tokenizer(folder).encode("Hello")


@pytest.fixture
def home_under_a_file(tmp_path: Path, monkeypatch) -> Path:
    """MINIMODEL_HOME set to a path below a regular file: nothing can be cached there."""
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("MINIMODEL_HOME", str(tmp_path / "file" / "cache"))
    return tmp_path / "file"


def test_a_cache_folder_under_a_file_says_how_to_move_it(home_under_a_file):
    with pytest.raises(OSError, match=f"{home_under_a_file} is a file, not a folder. Set "
                                      "MINIMODEL_HOME to a folder you can write"):
        mm.resolve_model("tiny")


def test_the_tokenizer_cache_under_a_file_says_how_to_move_it(folder, home_under_a_file):
    (folder / "tokenizer.json").unlink()  # so Qwen3's own tokenizer is built into the cache
    with pytest.raises(OSError, match="cannot write the cache folder .* Set MINIMODEL_HOME"):
        mm.load_tokenizer(folder)
