"""Shared fixtures. `small_checkpoint(**overrides)` writes a small random Qwen3 folder once per
config per session (config.json + model.safetensors, no tokenizer: tests use token ids)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from checkpoints import write_small_checkpoint


@pytest.fixture(scope="session")
def small_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Factory: small_checkpoint(seed=0, num_key_value_heads=1, ...) -> a checkpoint folder."""
    built: dict[tuple, Path] = {}

    def make(seed: int = 0, **overrides: object) -> Path:
        key = (seed, tuple(sorted(overrides.items())))
        if key not in built:
            built[key] = write_small_checkpoint(
                tmp_path_factory.mktemp("ckpt"), seed=seed, **overrides
            )
        return built[key]

    return make
