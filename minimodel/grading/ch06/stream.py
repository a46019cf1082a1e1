"""Checks of ch06.stream_text: one text delta per token, "" while a character is still
incomplete, deltas that join up to exactly tokenizer.decode(ids).

The tokenizer is the real Qwen3 one; the texts are random Chinese, emoji, rare characters and
mixed text, some of which split a character over several tokens.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from minimodel.grading.ch06.common import _pick
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import Text, tr

if TYPE_CHECKING:
    from minimodel.tokenizer import Tokenizer

REPLACEMENT = "\ufffd"  # what a decoder writes for bytes that are not (yet) a whole character
ENGLISH = ["Hello", " world", ",", " the", " model", " Qwen3", " 42", ".", "\n", " is", " fast"]
CHINESE = list("你好世界，模型推理。注意力缓存生成采样温度中文字符！")
EMOJI = ["🙂", "👍🏽", "🇨🇳", "👨‍👩‍👧", "🦀", "🧪", "🫠", "🥲", "🪐", "🎉"]
OTHER = ["é", "ñ", "ü", "ß", "ø", "ça", "日本語", "한국어", "Ω", "∑"]


@functools.lru_cache(maxsize=1)
def _tokenizer() -> Tokenizer:
    """Qwen3's tokenizer (the "tiny" model's), loaded once."""
    import minimodel as mm

    return mm.load_tokenizer(mm.resolve_model("tiny"))


def _rare() -> str:
    """A character that byte-level BPE usually splits over several tokens."""
    kind = int(torch.randint(0, 4, ()))
    if kind == 0:
        return chr(0x20000 + int(torch.randint(0, 0xA6D0, ())))  # CJK extension B: 4 bytes
    if kind == 1:
        return chr(0x4E00 + int(torch.randint(0, 0x51A5, ())))  # any CJK ideograph: 3 bytes
    if kind == 2:
        return chr(0xAC00 + int(torch.randint(0, 11172, ())))  # a Hangul syllable: 3 bytes
    return chr(0x1F300 + int(torch.randint(0, 0x2FF, ())))  # a symbol or emoji: 4 bytes


def _random_text(n: int) -> str:
    """n random pieces: English words, Chinese characters, emoji, accented letters, rare ones."""
    parts = []
    for _ in range(n):
        kind = int(torch.randint(0, 5, ()))
        parts.append([_pick(ENGLISH), _pick(CHINESE), _pick(EMOJI), _pick(OTHER), _rare()][kind])
    return "".join(parts)


@functools.lru_cache(maxsize=1)
def _stream_cases_cached(seed: int) -> tuple[tuple[int, ...], ...]:
    """The token ids of _stream_cases, drawn once with their own seed (the global generator is
    left as it was)."""
    tok = _tokenizer()
    g = torch.random.get_rng_state()
    torch.manual_seed(seed)
    cases: list[list[int]] = []
    try:
        cases.append(tok.encode("你好，世界！"))
        cases.append(tok.encode("🙂 emoji 👍🏽 and 𠀀𪚥 rare characters"))
        cases.append(tok.encode("Plain English text, nothing held back.\n"))
        for n in (3, 8, 15, 25, 40):
            cases.append(tok.encode(_random_text(n)))
        cases.append(tok.encode(_random_text(10)) + [151645])  # ends with <|im_end|>
        split = tok.encode("答案是𪚥" + _random_text(6))
        cut = next(k for k in range(1, len(split))
                   if tok.decode(split[:k]).endswith(REPLACEMENT))
        cases.append(split[:cut])  # stops in the middle of a character
        cases.append([])
    finally:
        torch.random.set_rng_state(g)
    return tuple(tuple(c) for c in cases)


def _stream_cases() -> list[list[int]]:
    """Token ids of texts in several scripts; some split characters over tokens, one ends in
    the middle of a character, one ends with a special token, one is empty."""
    return [list(c) for c in _stream_cases_cached(6)]


def _deltas(fn: Callable, ids: list[int]) -> list[str]:
    """fn(tokenizer, ids), checked to be a list of str."""
    out = fn(_tokenizer(), list(ids))
    what = tr("stream_text(tokenizer, {n} ids)", n=len(ids))
    expect(isinstance(out, list), tr("{what} should return a list of str, got {got}", what=what,
                                     got=type(out).__name__))
    kinds = {type(d).__name__ for d in out if not isinstance(d, str)}
    expect(not kinds, tr("{what} should return a list of str, got items of type {kinds}",
                         what=what, kinds=", ".join(sorted(kinds))))
    return out


def _text_of(ids: list[int]) -> str:
    """What the tokenizer decodes `ids` to."""
    return _tokenizer().decode(ids)


@exercise("ch06.stream_text", "returns one text delta (a str) per token")
def _stream_count(fn: Callable) -> str:
    cases = _stream_cases()
    for ids in cases:
        out = _deltas(fn, ids)
        expect(len(out) == len(ids),
               tr("for {n} tokens ({text!r}...) stream_text returned {got} deltas; there is one "
                  "per token (\"\" while a character is pending)", n=len(ids),
                  text=_text_of(ids)[:20], got=len(out)))
    return tr("{n} texts: Chinese, emoji, rare characters, mixed", n=len(cases))


@exercise("ch06.stream_text", "the deltas join up to exactly tokenizer.decode(ids)")
def _stream_concat(fn: Callable) -> None:
    for ids in _stream_cases():
        out = _deltas(fn, ids)
        got, want = "".join(out), _text_of(ids)
        if got != want:
            hint: Text | str = ""
            if want.endswith(REPLACEMENT) and got == want.rstrip(REPLACEMENT):
                hint = tr(": the text ends inside a character, and those last bytes never came "
                          "out; after the last token, emit whatever is still held back")
            elif REPLACEMENT in got:
                hint = tr(": a broken character leaked into a delta")
            raise CheckFailed(tr(
                "the deltas joined give {got!r} (last 30 chars) but tokenizer.decode(ids) is "
                "{want!r}{hint}", got=got[-30:], want=want[-30:], hint=hint))


@exercise("ch06.stream_text", "no delta holds a broken character (U+FFFD)")
def _stream_no_broken(fn: Callable) -> None:
    for ids in _stream_cases():
        if REPLACEMENT in _text_of(ids):
            continue
        out = _deltas(fn, ids)
        for i, d in enumerate(out):
            if REPLACEMENT in d:
                raise CheckFailed(tr(
                    "delta {i} is {d!r}: token {token} ends in the middle of a character, and "
                    "decoding it then gives U+FFFD. Hold those bytes back (emit \"\") until the "
                    "following token completes the character", i=i, d=d, token=ids[i]))


@exercise("ch06.stream_text", "emits text as soon as the tokens so far form whole characters")
def _stream_prompt(fn: Callable) -> None:
    for ids in _stream_cases():
        out = _deltas(fn, ids)
        for i in range(len(ids)):
            so_far = _text_of(ids[: i + 1])
            if so_far.endswith(REPLACEMENT):
                continue  # a character is pending: holding back is right
            got = "".join(out[: i + 1])
            if got != so_far:
                raise CheckFailed(tr(
                    "after token {i} the text so far is {so_far!r} (last 20 chars, all whole "
                    "characters) but the deltas so far give {got!r}: a streaming user should see "
                    "text as soon as it is complete, not at the end", i=i, so_far=so_far[-20:],
                    got=got[-20:]))

