"""Shared fixtures. `small_checkpoint(**overrides)` writes a small random Qwen3 folder once per
config per session (config.json + model.safetensors, no tokenizer: tests use token ids).

Every test not marked `gpu` runs as on a machine without a GPU, also where one is visible: its
exact-token comparisons with float32 transformers assume the engine's CPU default (CPU +
float32), and a visible GPU would silently switch `LLM()` to CUDA + bfloat16. CUDA is hidden
from torch in the test process and from the processes it starts (the CLI, notebook kernels)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from checkpoints import write_small_checkpoint


@pytest.fixture(autouse=True)
def cpu_unless_marked_gpu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """Hide CUDA from every test that is not marked `gpu` (see the module docstring)."""
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    yield


@pytest.fixture(autouse=True)
def check_messages_in_both_languages(request: pytest.FixtureRequest):
    """In the mutant tests, every check result a test produces (right and wrong code alike) must
    say every title, message and note in Chinese too: each is a `Text` from `tr(...)` whose
    templates all have an entry in the chapter's table (minimodel/grading/zh/)."""
    if not request.module.__name__.startswith("test_mutants_"):
        yield
        return
    from minimodel.grading import results_log
    from minimodel.grading.i18n import Text

    before = len(results_log())
    yield
    for result in results_log()[before:]:
        for text in [*result.notes, *(t for o in result.outcomes for t in (o.title, o.message))]:
            if text == "":
                continue
            assert isinstance(text, Text) and not text.missing, (
                f"{result.name}: {text!r} has no Chinese: write it as tr(template, ...) and add "
                "the template to the chapter's table in minimodel/grading/zh/")


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
