"""The command line of the recipe: `python -m minimodel.train corpus|train|export|eval|plot`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from minimodel.checkpoints import BARD_DIR, DRAFT_DIR
from minimodel.train.corpus import build_corpus, build_greedy_corpus, build_recite_corpus
from minimodel.train.evaluate import evaluate_samples, plot_losses
from minimodel.train.export import export, export_draft
from minimodel.train.trainer import SHAPES, TrainConfig, train

DESCRIPTION = "`bard`: the course's own small Qwen3, trained here on public-domain plays and poems."


def main(argv: list[str] | None = None) -> int:
    """Run one step of the recipe; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m minimodel.train", description=DESCRIPTION)
    p.add_argument("command", choices=["corpus", "train", "export", "eval", "plot"])
    p.add_argument("--out", type=Path, default=Path("runs/bard"))
    p.add_argument("--to", type=Path, default=BARD_DIR)
    p.add_argument("--model", default="bard", help="the model to evaluate")
    p.add_argument("--png", type=Path, default=Path("docs/img/bard-loss.png"))
    p.add_argument("--minutes", type=float, default=None, help="stop training after this long")
    p.add_argument("--steps", type=int, default=TrainConfig.steps)
    p.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
    p.add_argument("--seq-len", type=int, default=TrainConfig.seq_len)
    p.add_argument("--mix", type=float, nargs="+", default=TrainConfig.mix,
                   help="share of windows from each stream of the corpus, in its order")
    p.add_argument("--passages", action="store_true",
                   help="corpus: phase 2 (plays cut into passages, sonnets a stream)")
    p.add_argument("--corpus", default=TrainConfig.corpus, help="train: the token streams")
    p.add_argument("--lr", type=float, default=TrainConfig.lr)
    p.add_argument("--warmup", type=int, default=TrainConfig.warmup)
    p.add_argument("--shape", default=TrainConfig.shape, choices=sorted(SHAPES),
                   help="train/export: the model's shape (bard-draft: chapter 13's drafter)")
    p.add_argument("--teacher", default=None,
                   help="train: distil this model's next-token distributions (bard-draft: bard)")
    p.add_argument("--init", default=None,
                   help="train: start from this model's weights at --cycle-start (phase 3: bard)")
    p.add_argument("--recite", action="store_true",
                   help="corpus: phase 3 (corpus3.pt: phase 2's streams and every poem's lines)")
    p.add_argument("--greedy-from", default=None,
                   help="corpus: corpus4.pt, corpus3.pt and this model's own greedy text "
                        "(bard-draft's distillation)")
    p.add_argument("--cycle-start", type=int, default=0,
                   help="train: begin a new warm-up + cosine cycle at this step")
    args = p.parse_args(argv)
    if args.shape == "bard-draft" and args.to == BARD_DIR:
        args.to = DRAFT_DIR
    if args.command == "corpus":
        if args.greedy_from:
            stats = build_greedy_corpus(args.out, args.greedy_from)
        elif args.recite:
            stats = build_recite_corpus(args.out)
        else:
            stats = build_corpus(args.out, passages=args.passages)
        print(json.dumps(stats, indent=2))
    elif args.command == "train":
        tc = TrainConfig(steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len,
                         mix=tuple(args.mix), corpus=args.corpus, lr=args.lr,
                         warmup=args.warmup, cycle_start=args.cycle_start,
                         shape=args.shape, teacher=args.teacher, init=args.init)
        train(args.out, tc, args.minutes)
    elif args.command == "export":
        if args.shape == "bard-draft":
            print("sha256", export_draft(args.out, args.to))
        else:
            print("sha256", export(args.out, args.to))
    elif args.command == "eval":
        res = evaluate_samples(args.model, args.out)
        text = json.dumps(res, indent=2, ensure_ascii=False)
        (args.out / "eval.json").write_text(text + "\n", encoding="utf-8")
        print(text)
    else:
        plot_losses(args.out, args.png)
    return 0
