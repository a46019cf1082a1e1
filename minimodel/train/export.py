"""Export: the trained `bard` written as the weights of a Hugging Face folder.

The compact embedding table of training becomes the full [V, C] table, every unseen id holding
the shared row, so the full-vocabulary model gives the training probabilities exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from minimodel.checkpoints import GENERATION_CONFIG, weights_checksum
from minimodel.train.trainer import BARD, BARD_DRAFT, BardTrainer

# bard-draft's compact rows -> the tokenizer's ids (the engine reads it: engine/speculative.py)
DRAFT_VOCAB = "draft_vocab.json"


def export(out: Path, to: Path) -> str:
    """Write the trained model as a Hugging Face folder's weights; returns their sha256."""
    corpus = torch.load(out / "corpus.pt")
    model = BardTrainer(BARD, corpus["seen"])
    model.load_state_dict(torch.load(out / "ckpt.pt", weights_only=False)["model"])
    sd = model.state_dict_full()
    to.mkdir(parents=True, exist_ok=True)
    BARD.save(to)
    save_file(sd, str(to / "model.safetensors"), metadata={"format": "pt"})
    # Qwen3's EOS ids; the sampling defaults at which docs/bard.md measures the model.
    generation = {**GENERATION_CONFIG, "temperature": 0.8, "top_k": 0, "top_p": 0.95}
    (to / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    (to / "model.safetensors").chmod(0o644)
    return weights_checksum(sd)


def export_draft(out: Path, to: Path) -> str:
    """Write `bard-draft` as a Hugging Face folder over its compact vocabulary: a Qwen3 whose
    vocab_size is the S seen ids + the shared class, and `draft_vocab.json`, the tokenizer's id
    of each compact row (the shared class S has none). Returns the weights' sha256."""
    corpus = torch.load(out / "corpus.pt")
    seen = list(corpus["seen"])
    model = BardTrainer(BARD_DRAFT, seen)
    model.load_state_dict(torch.load(out / "ckpt.pt", weights_only=False)["model"])
    sd = {f"model.{name}": p.detach().to(BARD_DRAFT.dtype).contiguous()
          for name, p in model.body.named_parameters()}
    to.mkdir(parents=True, exist_ok=True)
    model.body.cfg.save(to)
    save_file(sd, str(to / "model.safetensors"), metadata={"format": "pt"})
    (to / DRAFT_VOCAB).write_text(json.dumps(
        {"target_vocab_size": BARD_DRAFT.vocab_size, "ids": seen}) + "\n")
    (to / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2) + "\n")
    (to / "model.safetensors").chmod(0o644)
    return weights_checksum(sd)
