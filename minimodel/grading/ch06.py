"""Checks for chapter 06, the generation loop: generate, stream_text, visible_text, my_writer.

`generate` is graded with fake models: deterministic functions from a prefix to the next token,
dressed up as `forward_all(ids [1, T]) -> logits [1, T, V]`. `stream_text` is graded with the
real Qwen3 tokenizer on random Chinese, emoji and mixed text. `visible_text` is the stop-string
rule of a stream that never shows the start of a stop string. The capstone `my_writer` runs the
learner's own loop, model (chapter 04) and sampler (chapter 05) on the course's model `bard`
and compares its tokens with the engine's, `mm.LLM(...).generate`.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.learner import PREFIX, is_learner_function, spy_calls

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
                f"{_short(out)} (first difference at new token {k}): the next token is the argmax, "
                "over the vocabulary, of the logits at the last position (the only position "
                "that has read the whole sequence)"
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
                       f"[0], got {_short(out)}: 0 is a real token id, even though Python treats "
                       "it as false")
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


# --- ch06.visible_text --------------------------------------------------------------------

STOP_ALPHABET = list("abcxyz ,.!\n") + ["你", "好", "。", "🙂"]


def _stop_text(n: int, alphabet: list[str] = STOP_ALPHABET) -> str:
    return "".join(_pick(alphabet) for _ in range(n))


def _expected_visible(text: str, stop: list[str], final: bool = False) -> tuple[str, bool]:
    hits = [i for i in (text.find(s) for s in stop) if i >= 0]
    if hits:
        return text[: min(hits)], True
    if final:
        return text, False
    for start in range(len(text)):  # the first start is the longest end that could grow
        if any(s.startswith(text[start:]) for s in stop):
            return text[:start], False
    return text, False


def _visible_call(fn: Callable, text: str, stop: list[str], final: bool) -> tuple[str, bool]:
    out = fn(text, list(stop), final)
    what = f"visible_text({text!r}, {stop!r}, final={final})"
    expect(isinstance(out, tuple) and len(out) == 2,
           f"{what} should return a tuple (text, stopped), got {out!r}")
    shown, stopped = out
    expect(isinstance(shown, str) and isinstance(stopped, bool),
           f"{what} should return (str, bool), got ({type(shown).__name__}, "
           f"{type(stopped).__name__})")
    return shown, stopped


def _visible_compare(fn: Callable, text: str, stop: list[str], final: bool = False) -> None:
    want = _expected_visible(text, stop, final)
    got = _visible_call(fn, text, stop, final)
    if got == want:
        return
    hint = ""
    found = [s for s in stop if s in text]
    if found:
        if got[1] and any(got[0] == text[: text.find(s) + len(s)] for s in found):
            hint = ": the stop string itself is not part of the output"
        elif not got[1]:
            hint = (": a stop string is in the text (maybe not at its very end: one token can "
                    "carry a stop string and more), so the text stops there")
        elif got[0] == want[0].strip():
            hint = ": keep the text before the stop string as it is (no stripping of spaces)"
        else:
            hint = (": cut at the stop string that starts first in the text, whatever its place "
                    "in the list, and at its first occurrence")
    elif final and got[0] != text:
        hint = (": with final=True no more text will come, so nothing can complete a stop "
                "string: show everything")
    elif got[0] == text and want[0] != text:
        hint = (f": the end {text[len(want[0]):]!r} could be the start of a stop string, so a "
                "stream must not show it yet")
    elif len(got[0]) < len(want[0]) and text.startswith(got[0]):
        held = text[len(got[0]):]
        hint = (f": it held back {held!r}, but only {text[len(want[0]):]!r} could still become a "
                "stop string; text that cannot start one should reach the reader now")
    elif len(got[0]) > len(want[0]) and text.startswith(got[0]):
        hint = (f": it showed {got[0][len(want[0]):]!r}, which could be the start of a stop "
                f"string; hold back the longest end of the text that begins a stop string")
    raise CheckFailed(f"visible_text({text!r}, {stop!r}, final={final}) should return {want!r}, "
                      f"got {got!r}{hint}")


@exercise("ch06.visible_text", "no stop string can start in the text: all of it is shown")
def _visible_none(fn: Callable) -> None:
    for n in (0, 1, 5, 20, 60):
        text = _stop_text(n, list("abcxyz ,.!"))
        for stop in (["###", "END", "\n\nUser:"], ["好好好", "🙂🙂"], []):
            for final in (False, True):
                _visible_compare(fn, text, stop, final)


@exercise("ch06.visible_text", "cuts just before the stop string that starts first")
def _visible_cut(fn: Callable) -> str:
    cases = [("The end.\n\nMore", ["."]), ("答案是四十二。后面", ["。"]), ("stop here", ["stop"]),
             ("abc###", ["###"]), ("Answer: 42 \n\nUser:", ["User:"]),
             ("one. two! three.", ["!", "."]), ("xab", ["b", "ab"]), ("a.b.c.", ["."]),
             ("你好。你好！", ["！", "。"])]
    for n in (4, 10, 25, 40):
        for length in (1, 2, 3):
            text = _stop_text(n)
            start = int(torch.randint(0, n - length + 1, ()))
            cases.append((text, [text[start : start + length], "###"]))
    for _ in range(6):
        text = _stop_text(30)
        cases.append((text, [text[int(torch.randint(0, 28, ())):][:2] for _ in range(3)]))
    for text, stop in cases:
        for final in (False, True):
            _visible_compare(fn, text, stop, final)
    return f"{len(cases)} texts"


@exercise("ch06.visible_text", "holds back only the longest end that could start a stop string")
def _visible_hold(fn: Callable) -> str:
    cases = [("Hello\n", ["\n\nUser:"]), ("Hello\n\nUs", ["\n\nUser:"]),
             ("Hello there", ["\n\nUser:"]), ("xaa", ["aab"]), ("xabca", ["abcab"]),
             ("你好。", ["。\n", "END"]), ("ab", ["abc", "x"]), ("wait for it", ["it!", "t."]),
             ("abab", ["babc"])]
    for _ in range(20):  # a tiny alphabet: prefixes of stop strings overlap and recur
        stop = [_stop_text(int(torch.randint(2, 6, ())), list("ab")) for _ in range(2)]
        text = _stop_text(int(torch.randint(0, 8, ())), list("abx"))
        text += stop[0][: int(torch.randint(0, len(stop[0]), ()))]
        cases.append((text, stop))
    for text, stop in cases:
        _visible_compare(fn, text, stop)
    return f"{len(cases)} texts"


@exercise("ch06.visible_text", "final=True: the stream has ended, so nothing is held back")
def _visible_final(fn: Callable) -> None:
    for text, stop in [("Hello\n", ["\n\nUser:"]), ("xaa", ["aab"]), ("Hello\n\n", ["\n\nU"]),
                       ("done.", [".\n", "!"])]:
        _visible_compare(fn, text, stop, final=True)


@exercise("ch06.visible_text", "over a stream, shown text is never taken back")
def _visible_stream(fn: Callable) -> str:
    streams = 0
    for stop in (["\n\nUser:"], ["aab", "ba"], ["。\n", "END"], ["abcab"]):
        for _ in range(4):
            alphabet = sorted(set("".join(stop)) | set("xy "))
            text = _stop_text(int(torch.randint(10, 30, ())), alphabet)
            cuts = sorted(set(torch.randint(1, len(text), (6,)).tolist())) + [len(text)]
            shown = ""
            for end in cuts:
                now, stopped = _visible_call(fn, text[:end], stop, end == len(text))
                if not now.startswith(shown):
                    raise CheckFailed(
                        f"streaming {text!r} with stop {stop!r}: the reader had seen {shown!r}, "
                        f"then visible_text({text[:end]!r}) gave {now!r}, which takes some of "
                        "it back; text that might start a stop string must not be shown early"
                    )
                shown = now
                if stopped:
                    break
            streams += 1
    return f"{streams} streams"


# --- ch06.my_writer: the capstone ----------------------------------------------------------

WRITER_PROMPTS = [
    "ROMEO.\n", "Shall I compare thee to a summer's", "《静夜思》\n作者：李白\n",
    "HAMLET.\nTo be, or not to be", "《春晓》\n作者：",
]
WRITER_NEW = 12  # greedy tokens per prompt: enough to catch a wrong step, cheap without a cache


@functools.lru_cache(maxsize=1)
def _bard() -> tuple:
    """(float32 weights by Hugging Face name, config, tokenizer, reference model) of bard."""
    from safetensors.torch import load_file

    import minimodel as mm

    path = mm.resolve_model("bard")
    weights = {k: v.float() for k, v in load_file(str(path / "model.safetensors")).items()}
    model = mm.reference.Qwen3ForCausalLM.from_pretrained(path)  # float32
    return weights, mm.Qwen3Config.from_pretrained(path), mm.load_tokenizer(path), model


@functools.lru_cache(maxsize=1)
def _engine_greedy() -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """(prompt ids, greedy new ids) from mm.LLM for each prompt whose greedy path is clear.

    A step where the two best logits are within 1e-3 could go either way in another float32
    computation of the same model; such prompts are left out.
    """
    import minimodel as mm

    _, _, tok, model = _bard()
    prompts = [tok.encode(p) for p in WRITER_PROMPTS]
    llm = mm.LLM("bard", device="cpu", dtype=torch.float32, kv_cache_bytes=1 << 25)
    params = mm.SamplingParams(temperature=0.0, max_new_tokens=WRITER_NEW, ignore_eos=True)
    outs = llm.generate(prompts, params, use_tqdm=False)
    del llm
    clear = []
    with torch.inference_mode():
        for ids, out in zip(prompts, outs):
            new = list(out.token_ids)
            logits = model(torch.tensor([ids + new]))[0, len(ids) - 1 : -1]  # [n, V]
            top2 = logits.topk(2, dim=-1).values
            chosen = logits.gather(-1, torch.tensor(new)[:, None])[:, 0]
            if bool(((chosen == top2[:, 0]) & (top2[:, 0] - top2[:, 1] > 1e-3)).all()):
                clear.append((tuple(ids), tuple(new)))
    assert len(clear) >= 3, "too few prompts with a clear greedy path"
    return tuple(clear)


def _write(fn: Callable, ids: tuple[int, ...], n: int, eos_id: int | None = None,
           **sampling) -> list[int]:
    weights, cfg, _, _ = _bard()
    out = fn(dict(weights), cfg, torch.tensor([ids]), n, eos_id, **sampling)
    what = f"my_writer(..., max_new_tokens={n}, eos_id={eos_id})"
    expect(isinstance(out, list), f"{what} should return a list of ints (the new token ids), "
                                  f"got {type(out).__name__}")
    kinds = {type(t).__name__ for t in out if not isinstance(t, int) or isinstance(t, bool)}
    expect(not kinds, f"{what} should return a list of Python ints, got items of type "
                      f"{', '.join(sorted(kinds))}")
    return out


def _pick_prompts(n: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    clear = _engine_greedy()
    return [clear[int(i)] for i in torch.randperm(len(clear))[:n]]


@exercise("ch06.my_writer", "greedy: token for token what mm.LLM(...).generate writes on bard")
def _writer_greedy(fn: Callable) -> str:
    tok = _bard()[2]
    cases = 0
    for ids, want in _pick_prompts(3):
        n = int(torch.randint(WRITER_NEW - 4, WRITER_NEW + 1, ()))
        out = _write(fn, ids, n)
        want = list(want[:n])
        if out == want:
            cases += 1
            continue
        prompt = tok.decode(list(ids))
        if out == want[:-1]:
            raise CheckFailed(f"for {prompt!r} with max_new_tokens={n}, my_writer returned "
                              f"{n - 1} tokens, one short of the engine's {n}: the last new "
                              "token is missing from the result")
        if len(out) != n:
            raise CheckFailed(f"for {prompt!r} with max_new_tokens={n} and no EOS, my_writer "
                              f"returned {len(out)} tokens instead of {n}")
        k = next(i for i, (a, b) in enumerate(zip(out, want)) if a != b)
        raise CheckFailed(
            f"for {prompt!r} the engine writes {tok.decode(want)!r}, your code "
            f"{tok.decode(out)!r} (first different token: new token {k}, {out[k]} instead of "
            f"{want[k]}). The loop's own check passes on fake models, so look at the model: "
            "does my_qwen3_forward of chapter 04 pass its check, is it given the whole "
            "sequence, and is the greedy path (temperature 0) the plain argmax?"
        )
    return f"{cases} prompts of bard, {WRITER_NEW - 4} to {WRITER_NEW} new tokens each"


@exercise("ch06.my_writer", "stops right after EOS, and EOS is part of the result")
def _writer_eos(fn: Callable) -> None:
    ids, path = _pick_prompts(1)[0]
    j = int(torch.randint(2, WRITER_NEW - 3, ()))
    eos = path[j]
    want = list(path[: path.index(eos) + 1])
    out = _write(fn, ids, WRITER_NEW, eos_id=eos)
    if out == want[:-1]:
        raise CheckFailed(f"with eos_id={eos} my_writer stopped before the EOS token: it is a "
                          "generated token and belongs to the result")
    went_on = len(out) > len(want) and out[: len(want)] == want
    expect(out == want, f"with eos_id={eos}, which the model writes as new token "
                        f"{len(want) - 1}, my_writer should return {_short(want, 12)}, got "
                        f"{_short(out, 12)}"
                        + (": it went on after EOS (does eos_id reach your generate?)"
                           if went_on else ""))


@exercise("ch06.my_writer", "runs your generate and your my_qwen3_forward, once per token")
def _writer_spy(fn: Callable) -> None:
    ids, _ = _pick_prompts(1)[0]
    with spy_calls(fn) as calls:
        out = _write(fn, ids, 3)
    expect(calls["generate"] >= 1,
           "my_writer never called generate, the loop you wrote in this notebook: the capstone "
           "is your own loop driving your own model")
    expect(calls["my_qwen3_forward"] >= len(out) > 0,
           f"my_writer made {calls['my_qwen3_forward']} call(s) of my_qwen3_forward (from your "
           f"chapter 04 notebook) for {len(out)} new tokens: the logits must come from your "
           "model, run on the whole sequence at every step, not from the package's")


@contextmanager
def _draws(fn: Callable) -> Iterator[list[int] | None]:
    """The token ids the learner's `sample` returns while the block runs, in order (None when
    no `sample` of theirs is in reach: a name of `fn`'s notebook or of a learner module it holds).
    Use it inside spy_calls, so that the spy still counts the calls."""
    scope = inspect.unwrap(fn).__globals__
    spaces = [scope] + [vars(m) for m in list(scope.values())
                        if isinstance(m, types.ModuleType) and m.__name__.startswith(PREFIX)]
    found = [(ns, ns["sample"]) for ns in spaces
             if callable(ns.get("sample")) and is_learner_function(inspect.unwrap(ns["sample"]))]
    drawn: list[int] = []

    def recorder(f: Callable) -> Callable:
        @functools.wraps(f)
        def sample(*args, **kwargs):
            out = f(*args, **kwargs)
            if isinstance(out, torch.Tensor):
                drawn.extend(int(x) for x in out.reshape(-1).tolist())
            return out

        return sample

    for ns, f in found:
        ns["sample"] = recorder(f)
    try:
        yield drawn if found else None
    finally:
        for ns, f in reversed(found):
            ns["sample"] = f


def _not_drawn(out: list[int], drawn: list[int]) -> int | None:
    """The first new token that is not the token sample drew for it, or None. One draw per
    token: they must be equal; with more draws, out must come out of them in order."""
    if len(drawn) == len(out):
        return next((i for i, (a, b) in enumerate(zip(out, drawn)) if a != b), None)
    j = 0
    for i, token in enumerate(out):
        while j < len(drawn) and drawn[j] != token:
            j += 1
        if j == len(drawn):
            return i
        j += 1
    return None


@exercise("ch06.my_writer", "sampling: your generate keeps the tokens your sample draws, from "
                            "the top-k, seeded")
def _writer_sampling(fn: Callable) -> str:
    _, _, tok, model = _bard()
    ids, path = _pick_prompts(1)[0]
    n, t, k = 6, 1.5, 5
    seeds = [int(s) for s in torch.randint(0, 2**31, (2,))]
    runs = []
    for seed in seeds:
        with spy_calls(fn) as calls, _draws(fn) as drawn:
            a = _write(fn, ids, n, None, temperature=t, top_k=k, top_p=1.0,
                       generator=torch.Generator().manual_seed(seed))
        expect(len(a) == n, f"sampling with max_new_tokens={n} and no EOS should give {n} "
                            f"tokens, got {len(a)}")
        expect(calls["sample"] >= n,
               f"my_writer made {calls['sample']} call(s) of sample (from your chapter 05 "
               f"notebook) for {n} sampled tokens: with temperature > 0 each token is drawn by "
               "your sampler")
        expect(calls["generate"] >= 1,
               "with temperature > 0 my_writer never called generate: sampled text, too, comes "
               "out of the loop you wrote in exercise 1, not out of a second loop")
        wrong = _not_drawn(a, drawn) if drawn is not None else None
        if wrong is not None:
            raise CheckFailed(
                f"with temperature={t}, new token {wrong} of my_writer is {a[wrong]} "
                f"({tok.decode([a[wrong]])!r}), which is not the token your sample drew for "
                "that step: the token the loop keeps must be the one sample returned")
        runs.append(a)
        with torch.inference_mode():
            logits = model(torch.tensor([list(ids) + a]))[0, len(ids) - 1 : -1]  # [n, V]
        kth = logits.topk(k, dim=-1).values[:, -1]
        drawn = logits.gather(-1, torch.tensor(a)[:, None])[:, 0]
        bad = (drawn < kth - 1e-3).nonzero()
        if len(bad):
            i = int(bad[0])
            raise CheckFailed(f"with top_k={k}, new token {i} ({tok.decode([a[i]])!r}) is not "
                              f"among the model's {k} most likely tokens at that step: hand "
                              "temperature, top_k and top_p to your sample")
    again = _write(fn, ids, n, None, temperature=t, top_k=k, top_p=1.0,
                   generator=torch.Generator().manual_seed(seeds[0]))
    expect(again == runs[0], "two runs with generators seeded alike gave different tokens: hand "
                             "the generator to your sample")
    greedy = [list(path[:n])] * 2
    expect(runs != greedy, f"with temperature={t} and top_k={k} every token of two seeded runs "
                           "was the greedy one: the sampling settings do not reach the draw")
    return f"2 seeds x {n} tokens at temperature {t}, top-k {k}"
