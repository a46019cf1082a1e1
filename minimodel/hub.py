"""Find a model folder: `tiny`, `random:<shape>`, a local folder, or a Hugging Face repo id.

Every model that minimodel runs is a folder in Hugging Face format (config.json, safetensors,
tokenizer files), so transformers can load the very same folder for comparisons.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

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

HF_ALLOW_PATTERNS = [
    "config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
    "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
]


# `bard`: the course's own small Qwen3, trained by minimodel/bard.py on Shakespeare and on Tang
# and Song poems (docs/bard.md). Its weights ship inside the package; the folder in the cache adds
# the tokenizer files. sha256 of its tensors (names, dtypes, shapes, bytes), as weights_checksum.
BARD_DIR = Path(__file__).resolve().parent / "models" / "bard"
BARD_SHA256 = "9caea7ba13f6f705e05bb474f7584cff785767527b66d38c9e2756ea011d83f1"


def minimodel_home() -> Path:
    """The cache folder: $MINIMODEL_HOME, or ~/.cache/minimodel (also when it is set empty)."""
    return Path(os.environ.get("MINIMODEL_HOME") or Path.home() / ".cache" / "minimodel")


def cache_write_error(err: OSError) -> OSError:
    """The same kind of OSError as `err`, saying that the cache folder cannot be written and
    how to move it (a read-only home, a MINIMODEL_HOME under a regular file, a full disk)."""
    home = minimodel_home()
    file = next((p for p in (home, *home.parents) if p.exists() and not p.is_dir()), None)
    if file is not None:
        why = f"{file} is a file, not a folder"
    else:
        why = (err.strerror or str(err)) + (f" ({err.filename})" if err.filename else "")
    new = type(err)(f"cannot write the cache folder {home}: {why}. Set MINIMODEL_HOME to a "
                    "folder you can write (e.g. MINIMODEL_HOME=/tmp/minimodel) and try again.")
    new.errno = err.errno
    return new


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
    from minimodel.tokenizer import write_tokenizer_files

    folder.mkdir(parents=True, exist_ok=True)
    cfg.save(folder)
    save_file(state_dict, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "generation_config.json").write_text(
        json.dumps(GENERATION_CONFIG, indent=2) + "\n", encoding="utf-8"
    )
    write_tokenizer_files(folder)


# Bump when what _build_once writes changes, so that caches built by older code are rebuilt.
BUILD_VERSION = "1"
_STAMP = ".minimodel-build"


def _build_once(name: str, build, version: str = BUILD_VERSION) -> Path:
    """Build a model folder into the cache once; concurrent builders race on a rename."""
    target = minimodel_home() / "models" / name
    stamp = target / _STAMP
    if stamp.is_file() and stamp.read_text().strip() == version:
        return target
    try:  # where an unusable cache folder shows first
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    except OSError as err:
        raise cache_write_error(err) from None
    try:
        build(tmp)
        (tmp / _STAMP).write_text(version + "\n")
        tmp.chmod(0o755)
        if target.exists():  # built by older code: replace it
            shutil.rmtree(target, ignore_errors=True)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first; its folder is identical
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _build_bard(folder: Path) -> None:
    """Copy bard's shipped files into `folder`, check its weights, add the tokenizer files."""
    from safetensors.torch import load_file

    from minimodel.tokenizer import write_tokenizer_files

    weights = BARD_DIR / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(
            f"bard's weights are missing: {weights} does not exist. Reinstall minimodel "
            "(pip install -e .) from a complete checkout."
        )
    digest = weights_checksum(load_file(str(weights)))
    if digest != BARD_SHA256:
        raise ValueError(
            f"{weights} has weights checksum {digest}, expected {BARD_SHA256}: the file is "
            "damaged or from another version. Restore it from the repository (git checkout)."
        )
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copyfile(BARD_DIR / name, folder / name)
    write_tokenizer_files(folder)


def _download(repo_id: str) -> Path:
    """Download config, safetensors and tokenizer files of a Hugging Face repo (cached)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:  # pragma: no cover - a dependency
        raise RuntimeError("huggingface_hub is needed to download models: pip install it") from e
    try:
        return Path(snapshot_download(repo_id, allow_patterns=HF_ALLOW_PATTERNS,
                                      local_files_only=True))
    except Exception:
        pass
    if os.environ.get("HF_HUB_OFFLINE") == "1" or not _hub_reachable():
        raise FileNotFoundError(
            f"Cannot download {repo_id!r}: the Hugging Face hub is not reachable from this machine "
            f"and the model is not in the local cache. On a machine with internet run\n"
            f"    hf download {repo_id} --local-dir {repo_id.split('/')[-1]}\n"
            f"(older huggingface_hub: huggingface-cli download {repo_id}), copy the folder here "
            f"and pass its path as the model (--model /path/to/folder, or "
            f"resolve_model('/path/to/folder')). Offline, use 'bard', 'tiny' or "
            f"'random:qwen3-0.6b'."
        )
    try:
        return Path(snapshot_download(repo_id, allow_patterns=HF_ALLOW_PATTERNS))
    except Exception as e:
        raise FileNotFoundError(
            f"Could not download {repo_id!r} from the Hugging Face hub: {e}. Check the repo id "
            "(e.g. 'Qwen/Qwen3-0.6B') and your network, or pass a local folder."
        ) from e


def _hub_reachable(timeout: float = 3.0) -> bool:
    """A quick TCP check, so that offline machines fail in seconds, not after retries."""
    import socket
    from urllib.parse import urlparse

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    host = urlparse(endpoint).hostname or "huggingface.co"
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def resolve_model(name: str | os.PathLike) -> Path:
    """Return the folder of a model: "bard", "tiny", "random:<shape>", a folder, or a repo id.

    `bard` (trained, shipped in the package), `tiny` (random weights) and `random:<shape>` are
    built on first use into $MINIMODEL_HOME/models/.
    Supported shapes: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b.
    """
    text = str(name)
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is a folder but has no config.json: not a model.")
        return path
    if text == "bard":
        return _build_once("bard", _build_bard, version=f"{BUILD_VERSION}-{BARD_SHA256}")
    if text == "tiny":
        return _build_once(
            "tiny", lambda d: write_checkpoint(d, TINY, random_state_dict_numpy(TINY))
        )
    if text.startswith("random:"):
        shape = text.split(":", 1)[1].lower()
        if shape not in SHAPES:
            raise ValueError(
                f"Unknown shape {shape!r} in {text!r}; supported: {', '.join(sorted(SHAPES))}."
            )
        cfg = SHAPES[shape]
        return _build_once(
            f"random-{shape}", lambda d: write_checkpoint(d, cfg, random_state_dict_torch(cfg))
        )
    if text.count("/") == 1 and not text.startswith((".", "/", "~")) and not path.exists():
        return _download(text)
    raise FileNotFoundError(
        f"Unknown model {text!r}: not a folder, not 'bard' or 'tiny', not 'random:<shape>' "
        f"(shapes: {', '.join(sorted(SHAPES))}), and not a Hugging Face repo id like "
        "'Qwen/Qwen3-0.6B'."
    )
