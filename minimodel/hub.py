"""Find a model folder from its name: `bard`, `tiny`, `random:<shape>`, a folder, or a repo id.

Every model that minimodel runs is a folder in Hugging Face format (config.json, safetensors,
tokenizer files), so transformers can load the very same folder for comparisons. This module is
the one place a name becomes a folder: the offline models are built into the cache on first use
(by `minimodel.checkpoints`), a repo id is downloaded, a folder is checked. Loaders below it
(`Qwen3Config.from_pretrained`, `Tokenizer.from_folder`, `weights.build_model`) take folders.
"""

from __future__ import annotations

import os
from pathlib import Path

from minimodel.checkpoints import (
    BARD_SHA256,
    BUILD_VERSION,
    DRAFT_SHA256,
    DRAFT_VOCAB_SHA256,
    SHAPES,
    build_bard,
    build_bard_draft,
    build_random,
    build_tiny,
)
from minimodel.home import build_once, minimodel_home

HF_ALLOW_PATTERNS = [
    "config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
    "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
]


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

    `bard` and its drafter `bard-draft` (trained, shipped in the package), `tiny` (random
    weights) and `random:<shape>` are built on first use into $MINIMODEL_HOME/models/.
    Supported shapes: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b.
    """
    text = str(name)
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is a folder but has no config.json: not a model.")
        return path
    models = minimodel_home() / "models"
    if text == "bard":
        return build_once(models / "bard", build_bard, f"{BUILD_VERSION}-{BARD_SHA256}")
    if text == "bard-draft":
        return build_once(models / "bard-draft", build_bard_draft,
                          f"{BUILD_VERSION}-{DRAFT_SHA256}-{DRAFT_VOCAB_SHA256}")
    if text == "tiny":
        return build_once(models / "tiny", build_tiny, BUILD_VERSION)
    if text.startswith("random:"):
        shape = text.split(":", 1)[1].lower()
        if shape not in SHAPES:
            raise ValueError(
                f"Unknown shape {shape!r} in {text!r}; supported: {', '.join(sorted(SHAPES))}."
            )
        return build_once(models / f"random-{shape}", build_random(shape), BUILD_VERSION)
    if text.count("/") == 1 and not text.startswith((".", "/", "~")) and not path.exists():
        return _download(text)
    raise FileNotFoundError(
        f"Unknown model {text!r}: not a folder, not 'bard', 'bard-draft' or 'tiny', not "
        f"'random:<shape>' (shapes: {', '.join(sorted(SHAPES))}), and not a Hugging Face repo "
        "id like 'Qwen/Qwen3-0.6B'."
    )
