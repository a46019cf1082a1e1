"""Checks for chapter 06, the generation loop: generate, stream_text, apply_stop.

`generate` is graded with fake models: deterministic functions from a prefix to the next token,
dressed up as `forward_all(ids [1, T]) -> logits [1, T, V]`. `stream_text` is graded with the
real Qwen3 tokenizer on random Chinese, emoji and mixed text.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from minimodel.grading.core import CheckFailed, exercise, expect

# --- ch06.generate -------------------------------------------------------------------------


class FakeModel:
    """A stand-in for a model: `forward_all(ids [1, T]) -> logits [1, T, V]`, float32.

    The token after a prefix is a hash of the whole prefix (every id and its position), so a
    loop that shows the model anything but the whole sequence gets other tokens. Each position
    predicts its own next token, so reading the wrong position shows too. Every call is kept.
    """

    def __init__(self, vocab_size: int, salt: int, offset: int = 0) -> None:
        self.V = vocab_size
        self.salt = salt
        self.offset = offset  # shifts every prediction: lets a check choose the first token
        self.calls: list[list[int]] = []

    def hash(self, prefix: list[int]) -> int:
        h = self.salt
        for i, t in enumerate(prefix):
            h = (h * 1_000_003 + t * 7919 + i) % (2**61 - 1)
        return h

    def next_token(self, prefix: list[int]) -> int:
        """The token the model predicts after `prefix` (the argmax of its logits)."""
        return (self.hash(prefix) + self.offset) % self.V

    def __call__(self, ids: object) -> torch.Tensor:
        if not isinstance(ids, torch.Tensor):
            raise CheckFailed(f"forward_all was called with a {type(ids).__name__}; it takes a "
                              "LongTensor of ids [1, T]")
        if ids.dim() != 2 or ids.shape[0] != 1:
            raise CheckFailed(f"forward_all was called with shape {tuple(ids.shape)}; it takes "
                              "ids [1, T] (one sequence: keep the batch dimension)")
        if ids.dtype != torch.long:
            raise CheckFailed(f"forward_all was called with {ids.dtype} ids; token ids are "
                              "torch.long")
        seq = [int(t) for t in ids[0]]
        self.calls.append(seq)
        T = len(seq)
        gen = torch.Generator().manual_seed(self.salt * 131 + T)
        logits = torch.rand(1, T, self.V, generator=gen)  # [1, T, V], values in [0, 1)
        for t in range(T):
            logits[0, t, self.next_token(seq[: t + 1])] += 2.0  # a clear argmax per position
        return logits

    def greedy(self, prompt: list[int], max_new_tokens: int, eos_id: int | None) -> list[int]:
        """What a correct loop returns."""
        seq, out = list(prompt), []
        for _ in range(max_new_tokens):
            token = self.next_token(seq)
            out.append(token)
            seq.append(token)
            if token == eos_id:
                break
        return out


def _case(V: int, T: int) -> tuple[FakeModel, list[int]]:
    salt = int(torch.randint(1, 2**30, ()))
    return FakeModel(V, salt), torch.randint(0, V, (T,)).tolist()


def _run(fn: Callable, model: FakeModel, prompt: list[int], n: int,
         eos_id: int | None) -> list[int]:
    tokens = torch.tensor([prompt], dtype=torch.long)  # [1, T]
    model.calls.clear()
    out = fn(model, tokens.clone(), n, eos_id)
    what = f"generate(prompt of {len(prompt)} tokens, max_new_tokens={n}, eos_id={eos_id})"
    expect(isinstance(out, list), f"{what} should return a list of ints, got "
                                  f"{type(out).__name__}")
    kinds = {type(t).__name__ for t in out if not isinstance(t, int) or isinstance(t, bool)}
    expect(not kinds, f"{what} should return a list of Python ints, got items of type "
                      f"{', '.join(sorted(kinds))} (use int(token))")
    return out


def _short(xs: list[int], n: int = 10) -> str:
    return f"{xs[:n]}{'...' if len(xs) > n else ''}"


# (V, prompt length, max_new_tokens)
GEN_CASES = [(50, 1, 1), (100, 4, 6), (1000, 7, 12), (151936, 3, 5), (20, 9, 15)]


@exercise("ch06.generate", "returns max_new_tokens new token ids (a list of ints) without EOS")
def _gen_length(fn: Callable) -> None:
    for V, T, n in GEN_CASES:
        model, prompt = _case(V, T)
        out = _run(fn, model, prompt, n, None)
        if len(out) == T + n and out[:T] == prompt:
            raise CheckFailed("generate returned the prompt too; return only the new tokens")
        expect(len(out) == n, f"with max_new_tokens={n} and no EOS, generate should return {n} "
                              f"tokens, got {len(out)}")


@exercise("ch06.generate", "each new token is the argmax of the last position's logits")
def _gen_greedy(fn: Callable) -> None:
    for V, T, n in GEN_CASES:
        model, prompt = _case(V, T)
        out = _run(fn, model, prompt, n, None)
        want = model.greedy(prompt, n, None)
        if out != want:
            k = next((i for i, (a, b) in enumerate(zip(out, want)) if a != b), min(len(out), n))
            raise CheckFailed(
                f"with a prompt of {T} tokens (V={V}), the greedy tokens are {_short(want)}, got "
                f"{_short(out)} (first difference at new token {k}): take logits[0, -1] (the "
                "last position predicts the next token) and its argmax over the vocabulary"
            )


@exercise("ch06.generate", "every call shows the model the whole sequence so far")
def _gen_whole_sequence(fn: Callable) -> None:
    for V, T, n in GEN_CASES[1:]:
        model, prompt = _case(V, T)
        out = _run(fn, model, prompt, n, None)
        seq = prompt + out
        for i, seen in enumerate(model.calls[: len(out)]):
            want = seq[: T + i]
            if seen != want:
                raise CheckFailed(
                    f"call {i} of the model got {len(seen)} token(s) {_short(seen, 6)}; it "
                    f"should get the prompt and the {i} token(s) generated so far ({len(want)} "
                    "tokens): without a cache the model needs the whole sequence every step"
                )


@exercise("ch06.generate", "calls the model once per new token, never more")
def _gen_calls(fn: Callable) -> None:
    for V, T, n in GEN_CASES:
        model, prompt = _case(V, T)
        out = _run(fn, model, prompt, n, None)
        expect(len(model.calls) == len(out),
               f"generate made {len(model.calls)} model calls for {len(out)} new tokens "
               f"(max_new_tokens={n}); one call per token: no extra call after the last one")


@exercise("ch06.generate", "max_new_tokens=0 returns [] and never calls the model")
def _gen_zero(fn: Callable) -> None:
    for V, T in [(50, 1), (1000, 6)]:
        model, prompt = _case(V, T)
        out = _run(fn, model, prompt, 0, None)
        expect(not model.calls, f"generate(max_new_tokens=0) called the model "
                                f"{len(model.calls)} time(s); with nothing to generate it "
                                "should not run the model at all")
        expect(out == [], f"generate(max_new_tokens=0) should return [], got {_short(out)}")


@exercise("ch06.generate", "stops right after EOS, and EOS is part of the output")
def _gen_eos(fn: Callable) -> None:
    for V, T, n, j in [(100, 3, 10, 0), (1000, 5, 12, 3), (151936, 2, 9, 6), (500, 4, 8, 7)]:
        model, prompt = _case(V, T)
        eos = model.greedy(prompt, n, None)[j]
        want = model.greedy(prompt, n, eos)
        out = _run(fn, model, prompt, n, eos)
        if out == want[:-1]:
            raise CheckFailed(f"generate stopped at EOS but left it out: expected {_short(want)} "
                              f"ending with EOS {eos}, got {_short(out)}; EOS is a generated "
                              "token and belongs to the output")
        expect(out == want, f"with eos_id={eos}, generate should return {_short(want)} (stop "
                            f"right after EOS, EOS included), got {_short(out)}")
        expect(len(model.calls) == len(want),
               f"generate called the model {len(model.calls)} times for {len(want)} tokens "
               "ending with EOS; after EOS there is nothing more to compute")


@exercise("ch06.generate", "eos_id=0 is a token like any other; EOS in the prompt is not a stop")
def _gen_eos_edge(fn: Callable) -> None:
    model, prompt = _case(300, 4)
    model.offset = -model.hash(prompt) % model.V  # the first new token is 0
    out = _run(fn, model, prompt, 5, 0)
    expect(out == [0], f"with eos_id=0 and the model's first token 0, generate should return "
                       f"[0], got {_short(out)}: test `token == eos_id`, not `if eos_id`")
    for V, T, n in [(50, 5, 6), (1000, 3, 8)]:
        model, prompt = _case(V, T)
        for eos in range(V):  # an EOS in the prompt that the loop then never produces
            prompt[1] = eos
            want = model.greedy(prompt, n, None)
            if eos not in want:
                break
        out = _run(fn, model, prompt, n, eos)
        expect(out == want, f"the prompt holds EOS ({eos}) at position 1; only a generated EOS "
                            f"stops the loop, so generate should return {_short(want)}, got "
                            f"{_short(out)}")


# --- ch06.stream_text ----------------------------------------------------------------------

REPLACEMENT = "\ufffd"  # what a decoder writes for bytes that are not (yet) a whole character
ENGLISH = ["Hello", " world", ",", " the", " model", " Qwen3", " 42", ".", "\n", " is", " fast"]
CHINESE = list("你好世界，模型推理。注意力缓存生成采样温度中文字符！")
EMOJI = ["🙂", "👍🏽", "🇨🇳", "👨‍👩‍👧", "🦀", "🧪", "🫠", "🥲", "🪐", "🎉"]
OTHER = ["é", "ñ", "ü", "ß", "ø", "ça", "日本語", "한국어", "Ω", "∑"]


@functools.lru_cache(maxsize=1)
def _tokenizer():
    import minimodel as mm

    return mm.load_tokenizer(mm.resolve_model("tiny"))


def _pick(pool: list[str]) -> str:
    return pool[int(torch.randint(0, len(pool), ()))]


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
    parts = []
    for _ in range(n):
        kind = int(torch.randint(0, 5, ()))
        parts.append([_pick(ENGLISH), _pick(CHINESE), _pick(EMOJI), _pick(OTHER), _rare()][kind])
    return "".join(parts)


@functools.lru_cache(maxsize=1)
def _stream_cases_cached(seed: int) -> tuple[tuple[int, ...], ...]:
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
    out = fn(_tokenizer(), list(ids))
    what = f"stream_text(tokenizer, {len(ids)} ids)"
    expect(isinstance(out, list), f"{what} should return a list of str, got {type(out).__name__}")
    kinds = {type(d).__name__ for d in out if not isinstance(d, str)}
    expect(not kinds, f"{what} should return a list of str, got items of type "
                      f"{', '.join(sorted(kinds))}")
    return out


def _text_of(ids: list[int]) -> str:
    return _tokenizer().decode(ids)


@exercise("ch06.stream_text", "returns one text delta (a str) per token")
def _stream_count(fn: Callable) -> str:
    cases = _stream_cases()
    for ids in cases:
        out = _deltas(fn, ids)
        expect(len(out) == len(ids),
               f"for {len(ids)} tokens ({_text_of(ids)[:20]!r}...) stream_text returned "
               f"{len(out)} deltas; there is one per token (\"\" while a character is pending)")
    return f"{len(cases)} texts: Chinese, emoji, rare characters, mixed"


@exercise("ch06.stream_text", "the deltas join up to exactly tokenizer.decode(ids)")
def _stream_concat(fn: Callable) -> None:
    for ids in _stream_cases():
        out = _deltas(fn, ids)
        got, want = "".join(out), _text_of(ids)
        if got != want:
            hint = ""
            if want.endswith(REPLACEMENT) and got == want.rstrip(REPLACEMENT):
                hint = (": the text ends inside a character, and those last bytes never came "
                        "out; after the last token, emit whatever is still held back")
            elif REPLACEMENT in got:
                hint = ": a broken character leaked into a delta"
            raise CheckFailed(
                f"the deltas joined give {got[-30:]!r} (last 30 chars) but tokenizer.decode(ids) "
                f"is {want[-30:]!r}{hint}"
            )


@exercise("ch06.stream_text", "no delta holds a broken character (U+FFFD)")
def _stream_no_broken(fn: Callable) -> None:
    for ids in _stream_cases():
        if REPLACEMENT in _text_of(ids):
            continue
        out = _deltas(fn, ids)
        for i, d in enumerate(out):
            if REPLACEMENT in d:
                raise CheckFailed(
                    f"delta {i} is {d!r}: token {ids[i]} ends in the middle of a character, and "
                    "decoding it then gives U+FFFD. Hold those bytes back (emit \"\") until the "
                    "following token completes the character"
                )


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
                raise CheckFailed(
                    f"after token {i} the text so far is {so_far[-20:]!r} (last 20 chars, all "
                    f"whole characters) but the deltas so far give {got[-20:]!r}: a streaming "
                    "user should see text as soon as it is complete, not at the end"
                )


# --- ch06.apply_stop -----------------------------------------------------------------------

STOP_ALPHABET = list("abcxyz ,.!\n") + ["你", "好", "。", "🙂"]


def _stop_text(n: int) -> str:
    return "".join(_pick(STOP_ALPHABET) for _ in range(n))


def _expected_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    hits = [i for i in (text.find(s) for s in stop) if i >= 0]
    return (text[: min(hits)], True) if hits else (text, False)


def _stop_call(fn: Callable, text: str, stop: list[str]) -> tuple[str, bool]:
    out = fn(text, list(stop))
    what = f"apply_stop({text!r}, {stop!r})"
    expect(isinstance(out, tuple) and len(out) == 2,
           f"{what} should return a tuple (text, stopped), got {out!r}")
    cut, stopped = out
    expect(isinstance(cut, str) and isinstance(stopped, bool),
           f"{what} should return (str, bool), got ({type(cut).__name__}, "
           f"{type(stopped).__name__})")
    return cut, stopped


def _stop_compare(fn: Callable, text: str, stop: list[str]) -> None:
    want = _expected_stop(text, stop)
    got = _stop_call(fn, text, stop)
    if got == want:
        return
    hint = ""
    found = [s for s in stop if s in text]
    if found and got[1] and any(got[0] == text[: text.find(s) + len(s)] for s in found):
        hint = ": the stop string itself is not part of the output"
    elif found and got == (text, False):
        hint = (": the stop string is there but not at the very end; a token can carry the stop "
                "string and more (\".\\n\" is one token), so search the whole text")
    elif found and got[1] and got[0] == want[0].strip():
        hint = ": keep the text before the stop string as it is (no stripping of spaces)"
    elif found and got[1]:
        hint = (": cut at the stop string that starts first in the text, whatever its place in "
                "the list, and at its first occurrence")
    raise CheckFailed(f"apply_stop({text!r}, {stop!r}) should return {want!r}, got {got!r}{hint}")


@exercise("ch06.apply_stop", "no stop string in the text: (text, False)")
def _stop_none(fn: Callable) -> None:
    for n in (0, 5, 20):
        text = _stop_text(n)
        stop = [s for s in ["###", "END", "🙂🙂🙂", "好好好"] if s not in text]
        _stop_compare(fn, text, stop)
        _stop_compare(fn, text, [])


@exercise("ch06.apply_stop", "cuts just before the stop string, wherever it is in the text")
def _stop_cut(fn: Callable) -> str:
    count = 0
    for n in (4, 10, 25, 40):
        for length in (1, 2, 3):
            text = _stop_text(n)
            start = int(torch.randint(0, n - length + 1, ()))
            stop = [text[start : start + length]]
            _stop_compare(fn, text, stop)  # at the start, in the middle or at the end
            count += 1
    for text, stop in [("The end.\n\nMore", ["."]), ("答案是四十二。后面", ["。"]),
                       ("stop here", ["stop"]), ("abc###", ["###"]),
                       ("Answer: 42 \n\nUser:", ["User:"])]:  # the spaces before it stay
        _stop_compare(fn, text, stop)
        count += 1
    return f"{count} texts"


@exercise("ch06.apply_stop", "the stop string that starts first wins, at its first occurrence")
def _stop_earliest(fn: Callable) -> None:
    cases = [
        ("one. two! three.", ["!", "."]),  # the list order is not the text order
        ("xab", ["b", "ab"]),  # overlapping stop strings: "ab" starts first
        ("a.b.c.", ["."]),  # repeated: the first one counts
        ("你好。你好！", ["！", "。"]),
    ]
    for _ in range(6):
        text = _stop_text(30)
        stop = [text[int(torch.randint(0, 28, ())):][:2] for _ in range(3)]
        cases.append((text, stop))
    for text, stop in cases:
        _stop_compare(fn, text, stop)
