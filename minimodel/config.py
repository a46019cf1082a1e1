"""Qwen3Config: the model's hyper-parameters, with the names of a Hugging Face config.json."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


class ConfigError(ValueError):
    """A config.json that is not a usable Qwen3 config."""


def read_json_object(path: Path) -> dict[str, Any] | None:
    """A checkpoint's side file (tokenizer_config.json, generation_config.json) as a dict; None
    if there is no such file; a ValueError naming the file if it is not a JSON object."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON ({err}); restore the file (download it "
                         "again) or delete it.") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(data).__name__}; restore "
                         "the file (download it again) or delete it.")
    return data


def _token_ids(value: object, where: Path) -> list[int]:
    ids = [] if value is None else [value] if isinstance(value, int) else value
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                            for i in ids):
        raise ValueError(f"eos_token_id must be an integer, a list of integers or null, got "
                         f"{value!r} (in {where}).")
    return ids


def eos_token_ids(folder: Path, fallback: int | list[int] | None = None) -> list[int] | None:
    """The ids that end generation, read in one place: generation_config.json's `eos_token_id`
    when the folder's file has one (Qwen3: [151645, 151643]; null: none), else `fallback`
    (config.json's, as a list), or None when there is neither. A ValueError names the file if
    the value is not an integer, a list of integers or null."""
    file = folder / "generation_config.json"
    raw = read_json_object(file)
    if raw is not None and "eos_token_id" in raw:
        return _token_ids(raw["eos_token_id"], file)
    return None if fallback is None else _token_ids(fallback, folder / "config.json")


@dataclass(frozen=True)
class Qwen3Config:
    """Shapes and constants of a Qwen3 dense model.

    Names follow config.json. Derived sizes used everywhere in the course:
    C = hidden_size, Hq = num_attention_heads, Hkv = num_key_value_heads, D = head_dim,
    V = vocab_size, L = num_hidden_layers, I = intermediate_size.
    """

    vocab_size: int = 151936
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 28
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    max_position_embeddings: int = 40960
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    tie_word_embeddings: bool = True
    attention_bias: bool = False
    hidden_act: str = "silu"
    torch_dtype: str = "bfloat16"
    bos_token_id: int | None = 151643
    eos_token_id: int | list[int] | None = 151645
    model_type: str = field(default="qwen3", repr=False)

    def __post_init__(self) -> None:
        self.validate()

    # --- derived quantities -------------------------------------------------------------
    @property
    def num_kv_groups(self) -> int:
        """Query heads that share one KV head (Hq // Hkv): 1 is MHA, Hq is MQA."""
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def q_size(self) -> int:
        """Width of the Q projection output: Hq * D (not always equal to C)."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of the K (or V) projection output: Hkv * D."""
        return self.num_key_value_heads * self.head_dim

    @property
    def dtype(self) -> torch.dtype:
        """The checkpoint's own dtype as a torch.dtype."""
        return _DTYPES.get(self.torch_dtype, torch.float32)

    def kv_bytes_per_token(self, dtype: torch.dtype | None = None) -> int:
        """Bytes of K and V that one token keeps in the cache over all layers."""
        itemsize = (dtype or self.dtype).itemsize
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * itemsize

    def num_parameters(self) -> int:
        """Parameter count (tied embeddings counted once)."""
        C, I, V = self.hidden_size, self.intermediate_size, self.vocab_size
        attn = C * self.q_size + 2 * C * self.kv_size + self.q_size * C + 2 * self.head_dim
        mlp = 3 * C * I
        per_layer = attn + mlp + 2 * C
        head = 0 if self.tie_word_embeddings else V * C
        return V * C + self.num_hidden_layers * per_layer + C + head

    # --- checks ---------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ConfigError if the numbers cannot describe a working Qwen3 model."""
        if self.model_type != "qwen3":
            raise ConfigError(
                f"model_type is {self.model_type!r}, but minimodel implements Qwen3 only "
                "(model_type 'qwen3'). Use a Qwen3 checkpoint such as Qwen/Qwen3-0.6B."
            )
        for name in (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}.")
        for name in ("rms_norm_eps", "rope_theta"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not (
                    0 < value < float("inf")):
                raise ConfigError(f"{name} must be a positive number, got {value!r}.")
        for name in ("tie_word_embeddings", "attention_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}.")
        if not isinstance(self.torch_dtype, str):
            raise ConfigError(f"torch_dtype must be a string such as 'bfloat16', got "
                              f"{self.torch_dtype!r}.")
        for name in ("bos_token_id", "eos_token_id"):
            value = getattr(self, name)
            ids = value if isinstance(value, list) else [] if value is None else [value]
            if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
                raise ConfigError(f"{name} must be a token id, a list of them or null, got "
                                  f"{value!r}.")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"num_attention_heads ({self.num_attention_heads}) must be divisible by "
                f"num_key_value_heads ({self.num_key_value_heads}): each KV head serves a whole "
                "group of query heads in grouped-query attention."
            )
        if self.head_dim % 2:
            raise ConfigError(
                "head_dim must be even for rotary embeddings (it rotates pairs of dimensions), "
                f"got {self.head_dim}."
            )
        if self.hidden_act != "silu":
            raise ConfigError(f"hidden_act must be 'silu' for Qwen3, got {self.hidden_act!r}.")

    # --- (de)serialisation ----------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Qwen3Config:
        """Build from a config.json dict in either dialect.

        Real Qwen3 checkpoints write `rope_theta` and `torch_dtype` at the top level;
        transformers 5 `save_pretrained` writes `rope_parameters` and `dtype`.
        """
        if not isinstance(raw, dict):
            raise ConfigError(f"config.json must hold a JSON object, got {type(raw).__name__}.")
        model_type = raw.get("model_type")
        if model_type != "qwen3":
            archs = raw.get("architectures") or []
            raise ConfigError(
                f"config.json has model_type {model_type!r} (architectures {archs}); minimodel "
                "loads Qwen3 checkpoints only (model_type 'qwen3'), e.g. Qwen/Qwen3-0.6B."
            )
        data = dict(raw)
        rope = data.get("rope_parameters") or data.get("rope_scaling") or {}
        if not isinstance(rope, dict):
            raise ConfigError(f"rope_parameters / rope_scaling must be a JSON object or null, "
                              f"got {rope!r}.")
        if "rope_theta" not in data and "rope_theta" in rope:
            data["rope_theta"] = rope["rope_theta"]
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", None):
            raise ConfigError(
                f"rope type {rope_type!r} is not supported; minimodel implements plain RoPE only."
            )
        if "torch_dtype" not in data and "dtype" in data:
            data["torch_dtype"] = data["dtype"]
        hidden, heads = data.get("hidden_size"), data.get("num_attention_heads")
        if data.get("head_dim") is None and isinstance(hidden, int) and isinstance(heads, int) \
                and heads > 0:
            data["head_dim"] = hidden // heads
        if data.get("num_key_value_heads") is None:
            data["num_key_value_heads"] = data.get("num_attention_heads")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def from_pretrained(cls, path: str | Path) -> Qwen3Config:
        """Read `config.json` from a checkpoint folder (a model name goes through
        `mm.resolve_model` first: `Qwen3Config.from_pretrained(mm.resolve_model("tiny"))`)."""
        folder = Path(path).expanduser()
        if not folder.is_dir():
            raise ConfigError(f"{str(path)!r} is not a folder: Qwen3Config.from_pretrained reads "
                              "a checkpoint folder; for a model name such as 'tiny' pass "
                              "mm.resolve_model(name).")
        file = folder / "config.json"
        if not file.is_file():
            raise ConfigError(f"{folder} has no config.json; is it a Hugging Face model folder?")
        try:
            raw = json.loads(file.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConfigError(f"{file} is not valid JSON: {e}") from e
        try:
            return cls.from_dict(raw)
        except ConfigError as e:
            raise ConfigError(f"{file}: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        """A config.json dict in the real Qwen3 dialect, loadable by transformers."""
        data = asdict(self)
        data["architectures"] = ["Qwen3ForCausalLM"]
        data["use_sliding_window"] = False
        data["sliding_window"] = None
        data["max_window_layers"] = self.num_hidden_layers
        data["attention_dropout"] = 0.0
        data["initializer_range"] = 0.02
        data["use_cache"] = True
        data["rope_scaling"] = None
        return data

    def save(self, folder: str | Path) -> None:
        """Write config.json into `folder`."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True)
        (Path(folder) / "config.json").write_text(text + "\n", encoding="utf-8")
