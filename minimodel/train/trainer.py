"""Training `bard`: its shape, the exact small softmax over the seen ids, and the training loop.

The corpus uses about 24 k of the 151,936 ids. Ids the model never reads or predicts keep one
shared embedding row, so their logits are all equal, and the softmax over the whole vocabulary
is exactly the softmax over the seen ids plus *one* class whose logit is that shared logit +
log(number of unseen ids). Training computes that small softmax: next-token cross-entropy,
AdamW with linear warm-up and cosine decay, checkpoints that resume, a JSON-lines loss log.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from minimodel.config import Qwen3Config
from minimodel.reference.model import Qwen3Model

# The shape: hidden 256, 6 layers, 4 query heads sharing 2 KV heads of 64 dims (GQA ratio 2,
# as in Qwen3-0.6B), SwiGLU width 768. Measured on a 2-core CPU (docs/bard.md): a wider or
# deeper body buys little while the LM head over the ~24 k seen ids costs as much as the body.
BARD = Qwen3Config(
    vocab_size=151936,
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=4096,
    rope_theta=10_000.0,
    tie_word_embeddings=True,
    torch_dtype="bfloat16",
)

# `bard-draft`, the drafter of speculative decoding (chapter 13): bard's recipe at a shape whose
# decode step costs a fraction of bard's. Its checkpoint keeps the compact vocabulary (the seen
# ids and the shared class, docs/bard.md): a head over 151,936 ids would cost a draft token as
# much as a bard token. hidden 128, 2 layers, 4 query heads sharing 2 KV heads of 32 dims.
BARD_DRAFT = Qwen3Config(
    vocab_size=151936,
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=4096,
    rope_theta=10_000.0,
    tie_word_embeddings=True,
    torch_dtype="bfloat16",
)
SHAPES = {"bard": BARD, "bard-draft": BARD_DRAFT}


class BardTrainer(torch.nn.Module):
    """The reference Qwen3 body over a compact vocabulary: the S seen ids plus one shared row.

    Row S of the compact table is the shared row of every unseen id. The loss is the exact
    full-vocabulary cross-entropy: the unseen class gets + log(V - S) on its logit.
    """

    def __init__(self, cfg: Qwen3Config, seen: list[int]) -> None:
        super().__init__()
        self.cfg = cfg
        self.S = len(seen)
        self.register_buffer("seen", torch.tensor(seen, dtype=torch.long), persistent=False)
        compact = dataclasses.replace(cfg, vocab_size=self.S + 1)
        self.body = Qwen3Model(compact)
        self.log_unseen = math.log(cfg.vocab_size - self.S)
        self._init_weights()

    def _init_weights(self) -> None:
        L = self.cfg.num_hidden_layers
        for name, p in self.body.named_parameters():
            if "norm" in name:
                torch.nn.init.ones_(p)
            elif name.endswith(("o_proj.weight", "down_proj.weight")):
                torch.nn.init.normal_(p, std=0.02 / math.sqrt(2 * L))
            else:
                torch.nn.init.normal_(p, std=0.02)

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """Compact ids [B, T] -> logits over S + 1 classes [B, T, S + 1]."""
        h = self.body(ids)
        logits = h @ self.body.embed_tokens.weight.T
        logits[..., -1] += self.log_unseen  # in place: a copy of [B, T, S + 1] costs seconds
        return logits

    def loss(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy in nats per token, equal to the full-vocabulary loss."""
        logits = self.logits(ids).float()
        # An unseen target is one of V - S equally likely ids: its share of the class's mass.
        ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
        ce = ce + (targets.flatten() == self.S).float() * self.log_unseen
        return ce.mean()

    def state_dict_full(self) -> dict[str, torch.Tensor]:
        """The Hugging Face checkpoint: the full [V, C] table, unseen rows all the shared row."""
        out = {}
        for name, p in self.body.named_parameters():
            out[f"model.{name}"] = p.detach().clone()
        compact = out.pop("model.embed_tokens.weight")
        full = compact[-1:].expand(self.cfg.vocab_size, -1).clone()
        full[self.seen] = compact[:-1]
        out["model.embed_tokens.weight"] = full
        return {k: v.to(self.cfg.dtype).contiguous() for k, v in out.items()}


def load_teacher(name: str, seen: list[int]) -> BardTrainer:
    """A trained model (by name or folder) as a BardTrainer over the same compact vocabulary:
    its rows of the seen ids, and the shared row of the unseen ones."""
    from safetensors.torch import load_file

    from minimodel.hub import resolve_model

    folder = resolve_model(name)
    cfg = Qwen3Config.from_pretrained(folder)
    weights = load_file(str(folder / "model.safetensors"))
    table = weights.pop("model.embed_tokens.weight").float()
    compact = folder / "draft_vocab.json"  # bard-draft's table: already the compact rows
    if compact.is_file():
        rows = json.loads(compact.read_text())
        if rows["ids"] != list(seen):
            raise ValueError(f"{name}'s compact vocabulary is not this corpus's seen ids.")
        cfg = dataclasses.replace(cfg, vocab_size=rows["target_vocab_size"])
    else:
        seen_set = set(seen)
        unseen = next(i for i in range(cfg.vocab_size) if i not in seen_set)
        table = torch.cat([table[seen], table[unseen][None]])
    teacher = BardTrainer(cfg, seen)
    state = {k.removeprefix("model."): v.float() for k, v in weights.items()
             if k.startswith("model.")}
    state["embed_tokens.weight"] = table
    teacher.body.load_state_dict(state)
    return teacher.eval().requires_grad_(False)


def distill_loss(model: BardTrainer, teacher: BardTrainer, ids: torch.Tensor,
                 targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(KL(teacher || model) per token, in nats; the model's cross-entropy on the corpus)."""
    logits = model.logits(ids).float()
    with torch.no_grad():
        target = teacher.logits(ids).float().log_softmax(-1)
    logp = logits.log_softmax(-1)
    kl = (target.exp() * (target - logp)).sum(-1).mean()
    with torch.no_grad():
        ce = F.nll_loss(logp.flatten(0, 1), targets.flatten(), reduction="none")
        ce = (ce + (targets.flatten() == model.S).float() * model.log_unseen).mean()
    return kl, ce


def compact_ids(seen: list[int], vocab_size: int) -> torch.Tensor:
    """A lookup [V] from full ids to compact ids; unseen ids map to the shared class S."""
    lut = torch.full((vocab_size,), len(seen), dtype=torch.long)
    lut[torch.tensor(seen)] = torch.arange(len(seen))
    return lut


@dataclass
class TrainConfig:
    """The settings of one training run (`python -m minimodel.train train` sets most of them)."""

    seq_len: int = 256
    batch_size: int = 8
    steps: int = 1700
    warmup: int = 100
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    mix: tuple[float, ...] = (0.72, 0.16, 0.12)  # one share per stream of the corpus
    corpus: str = "corpus.pt"
    cycle_start: int = 0  # the step where this warm-up + cosine cycle begins (phase 2: 1050)
    eval_every: int = 150
    eval_batches: int = 4
    ckpt_every: int = 50
    seed: int = 0
    shape: str = "bard"  # a key of SHAPES
    # Distillation (bard-draft): learn a teacher's whole next-token distribution on the same
    # windows (KL divergence over the seen ids and the shared class), not only the corpus token.
    teacher: str | None = None
    # Phase 3: start from a published model's weights (by name or folder) at step cycle_start,
    # with a fresh optimizer, instead of from random weights at step 0.
    init: str | None = None
    # Streams whose windows begin at a document's start (phase 3's recitation: the first
    # half-line of a poem at position 0, as a prompt puts it).
    aligned: tuple[str, ...] = ("recite",)


PHASE2_STEP = 1050  # where the published run switched to corpus2.pt (docs/bard.md)


def lr_at(step: int, tc: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to min_lr_ratio * lr, from step tc.cycle_start."""
    step -= tc.cycle_start
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    length = tc.steps - tc.cycle_start - tc.warmup
    progress = min(1.0, (step - tc.warmup) / max(1, length))
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return tc.lr * (tc.min_lr_ratio + (1 - tc.min_lr_ratio) * cosine)


def sample_batch(streams: list[torch.Tensor], mix: tuple[float, ...], tc: TrainConfig,
                 gen: torch.Generator, starts: list[torch.Tensor | None] | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of seq_len + 1 tokens, each from a source drawn by the mix. A stream
    with `starts` begins its windows only there (a document's first token at position 0, as
    in a prompt)."""
    which = torch.multinomial(torch.tensor(mix), tc.batch_size, replacement=True, generator=gen)
    rows = []
    for w in which.tolist():
        s = streams[w]
        if starts is not None and starts[w] is not None:
            begin = starts[w]
            start = int(begin[torch.randint(0, len(begin), (1,), generator=gen)])
        else:
            start = int(torch.randint(0, len(s) - tc.seq_len - 1, (1,), generator=gen))
        rows.append(s[start: start + tc.seq_len + 1])
    batch = torch.stack(rows)
    return batch[:, :-1], batch[:, 1:]


def document_starts(stream: torch.Tensor, eot: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Where the documents of a stream begin (after each EOT, and at 0), keeping only the
    starts with a whole window after them; windows may run into the next documents."""
    begin = torch.cat([torch.zeros(1, dtype=torch.long), (stream == eot).nonzero()[:, 0] + 1])
    return begin[begin < len(stream) - seq_len - 1]


def train(out: Path, tc: TrainConfig, minutes: float | None = None) -> None:
    """Train (or resume) into `out`: ckpt.pt, log.jsonl. Stops at tc.steps or after `minutes`."""
    corpus = torch.load(out / tc.corpus)
    seen = corpus["seen"]
    if tc.shape not in SHAPES:
        raise ValueError(f"shape must be one of {sorted(SHAPES)}, got {tc.shape!r}.")
    cfg = SHAPES[tc.shape]
    lut = compact_ids(seen, cfg.vocab_size)
    names = tuple(corpus["streams"])
    if len(tc.mix) != len(names):
        raise ValueError(f"--mix needs one share per stream {names}, got {len(tc.mix)}.")
    data = {split: [lut[torch.tensor(corpus["streams"][n][split])] for n in names]
            for split in ("train", "val")}
    starts = {split: [document_starts(s, lut[corpus["eot"]], tc.seq_len) if n in tc.aligned
                      else None for n, s in zip(names, data[split], strict=True)]
              for split in data} if "eot" in corpus else {"train": None, "val": None}
    torch.manual_seed(tc.seed)
    model = BardTrainer(cfg, seen)
    teacher = load_teacher(tc.teacher, seen) if tc.teacher else None
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                             {"params": other, "weight_decay": 0.0}],
                            lr=tc.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(tc.seed)
    step, tokens, wall = 0, 0, 0.0
    ckpt = out / "ckpt.pt"
    if tc.init and not ckpt.is_file():
        start = load_teacher(tc.init, seen)
        if start.cfg.hidden_size != cfg.hidden_size or start.S != model.S:
            raise ValueError(f"--init {tc.init} is not a {tc.shape} over this corpus's ids.")
        model.load_state_dict(start.state_dict())
        step = tc.cycle_start
        print(f"initialised from {tc.init} at step {step}", flush=True)
    if ckpt.is_file():
        state = torch.load(ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        gen.set_state(state["gen"])
        step, tokens, wall = state["step"], state["tokens"], state["wall"]
        print(f"resumed at step {step} ({tokens:,} tokens, {wall / 60:.1f} min)", flush=True)
    log = (out / "log.jsonl").open("a")
    (out / "train_config.json").write_text(json.dumps(asdict(tc), indent=2) + "\n")
    t0 = time.time()
    wall0 = wall

    def save() -> None:
        tmp = out / "ckpt.pt.tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(),
                    "step": step, "tokens": tokens, "wall": wall}, tmp)
        tmp.replace(ckpt)

    @torch.no_grad()
    def evaluate() -> dict[str, float]:
        model.eval()
        egen = torch.Generator().manual_seed(1234)
        res = {}
        for i, n in enumerate(names):
            one = tuple(1.0 if j == i else 0.0 for j in range(len(names)))
            losses = [model.loss(*sample_batch(data["val"], one, tc, egen, starts["val"])).item()
                      for _ in range(tc.eval_batches)]
            res[f"val_{n}"] = sum(losses) / len(losses)
        model.train()
        return res

    model.train()
    while step < tc.steps:
        if minutes is not None and (time.time() - t0) / 60 > minutes:
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, tc)
        x, y = sample_batch(data["train"], tc.mix, tc, gen, starts["train"])
        if teacher is not None:
            loss, ce = distill_loss(model, teacher, x, y)
        else:
            loss = ce = model.loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += x.numel()
        wall = wall0 + time.time() - t0
        row = {"step": step, "tokens": tokens, "wall_s": round(wall, 1), "lr": lr_at(step - 1, tc),
               "train": round(ce.item(), 4)}
        if teacher is not None:
            row["kl"] = round(loss.item(), 4)
        if step % tc.eval_every == 0 or step == tc.steps:
            row.update({k: round(v, 4) for k, v in evaluate().items()})
            print(json.dumps(row), flush=True)
        log.write(json.dumps(row) + "\n")
        log.flush()
        if step % tc.ckpt_every == 0 or step == tc.steps:
            save()
    save()
