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


HEAD_ROWS = 4096  # bard's own greedy text: 7,046 distinct ids, the 4,096 commonest 98.4% of it


def head_rows(corpus: dict, num_rows: int, k: int = HEAD_ROWS) -> list[int]:
    """The compact rows of the k ids that occur most in the teacher's own text (the `greedy`
    and `recite` streams of corpus4.pt), most frequent first: the engine's drafter scores
    only these, a head k rows tall instead of the whole table (drafts are guesses; the target
    decides every token)."""
    from collections import Counter

    lut = {t: i for i, t in enumerate(corpus["seen"])}
    counts = Counter(t for name in ("greedy", "recite") for t in corpus["streams"][name]["train"])
    rows = [lut[t] for t, _ in counts.most_common() if t in lut]
    return rows[:min(k, num_rows)]


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
    spec: dict = {"target_vocab_size": BARD_DRAFT.vocab_size, "ids": seen}
    if (out / "corpus4.pt").is_file():  # the rows of the ids bard writes most often
        spec["head_rows"] = head_rows(torch.load(out / "corpus4.pt"), len(seen))
    (to / DRAFT_VOCAB).write_text(json.dumps(spec) + "\n")
    (to / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2) + "\n")
    (to / "model.safetensors").chmod(0o644)
    return weights_checksum(sd)
