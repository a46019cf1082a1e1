"""Measuring `bard`: sampled text scored against the corpus, and the loss curve (docs/bard.md).

The figures of docs/bard.md's "Quality" come from `evaluate_samples`, its loss figure from
`plot_losses`.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import torch

import minimodel as mm
from minimodel.train.corpus import (
    TANG300,
    chinese_poems,
    half_line,
    is_sonnet,
    shakespeare_documents,
    shakespeare_texts,
)
from minimodel.train.trainer import PHASE2_STEP

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
    """The English words of a text, lower-cased (an apostrophe inside a word is kept)."""
    return [w.lower() for w in _WORD.findall(text)]


def evaluate_samples(model: str | Path, out: Path, n: int = 4, seed: int = 0) -> dict:
    """Sample continuations at temperature 0.8, top-p 0.95 and measure them against the corpus.

    - real words: share of the words that are in Debian's wamerican word list or in the corpus;
    - known pairs: share of adjacent word pairs (inside the continuation) found in the corpus;
    - EOS: share of generations that end by themselves (finish_reason "stop") within 400 tokens;
    - Chinese: share of adjacent character pairs found in the poems.
    """
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
    sonnets = [d for d in en_docs if is_sonnet(d)]
    picked = rng.sample(sonnets, 40)
    lines = [d.split("\n")[2:4] for d in picked]
    outs = llm.generate([a + "\n" for a, _ in lines],
                        mm.SamplingParams(temperature=0.0, max_new_tokens=30))
    hits = [llm.tokenizer.decode(o.token_ids).split("\n")[0].strip() == b.strip()
            for o, (_, b) in zip(outs, lines)]
    results["sonnet_greedy_next_line"] = sum(hits) / len(hits)
    results["recite_tang"] = recite(llm, [p for p in zh_poems[:TANG300] if "，" in p.lines[0]])
    return results


# Famous Tang poems, by their first half-line: the recitation docs/bard.md reports first.
FAMOUS = ["床前明月光，", "白日依山尽，", "春眠不觉晓，", "红豆生南国，", "月落乌啼霜满天，",
          "千山鸟飞绝，", "慈母手中线，", "故人西辞黄鹤楼，"]


def recite(llm, poems: list) -> dict:
    """Greedy from each poem's first half-line: how many poems come back whole, how many
    continue into their real second half-line, and the famous ones' continuations."""
    prompts = [half_line(p) for p in poems]
    wants = ["\n".join(p.lines)[len(q):] for p, q in zip(poems, prompts)]
    params = [mm.SamplingParams(temperature=0.0, ignore_eos=False,
                                max_new_tokens=len(llm.tokenizer.encode(w)) + 4) for w in wants]
    outs = llm.generate(prompts, params)
    texts = [llm.tokenizer.decode(o.token_ids, skip_special_tokens=True) for o in outs]
    whole = [t.startswith(w) for t, w in zip(texts, wants)]
    half = [t.startswith(w.split("。")[0]) for t, w in zip(texts, wants)]
    famous = {q: t.split("\n\n")[0].strip() for q, t in zip(prompts, texts) if q in FAMOUS}
    return {"poems": len(poems), "whole_poem": sum(whole) / len(poems),
            "second_half_line": sum(half) / len(poems), "famous": famous,
            "famous_whole": sum(w for q, w in zip(prompts, whole) if q in FAMOUS)}


def plot_losses(out: Path, png: Path) -> None:
    """Train and validation loss against tokens seen."""
    import matplotlib  # in the course and dev extras, not a dependency of minimodel itself

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
