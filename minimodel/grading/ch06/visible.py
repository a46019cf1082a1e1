"""Checks of ch06.visible_text, the stop-string rule of a stream: cut just before the stop
string that starts first, and until the stream ends hold back the longest end of the text that
could still grow into a stop string, so that shown text is never taken back.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.ch06.common import _pick
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import Text, tr

STOP_ALPHABET = list("abcxyz ,.!\n") + ["你", "好", "。", "🙂"]


def _stop_text(n: int, alphabet: list[str] = STOP_ALPHABET) -> str:
    """n random characters of `alphabet`."""
    return "".join(_pick(alphabet) for _ in range(n))


def _expected_visible(text: str, stop: list[str], final: bool = False) -> tuple[str, bool]:
    """The grader's own visible_text: (the text a reader may see, whether a stop string hit)."""
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
    """fn(text, stop, final), checked to be a tuple (str, bool)."""
    out = fn(text, list(stop), final)
    what = f"visible_text({text!r}, {stop!r}, final={final})"
    expect(isinstance(out, tuple) and len(out) == 2,
           tr("{what} should return a tuple (text, stopped), got {got!r}", what=what, got=out))
    shown, stopped = out
    expect(isinstance(shown, str) and isinstance(stopped, bool),
           tr("{what} should return (str, bool), got ({text}, {flag})", what=what,
              text=type(shown).__name__, flag=type(stopped).__name__))
    return shown, stopped


def _visible_compare(fn: Callable, text: str, stop: list[str], final: bool = False) -> None:
    """Fail, with the likely mistake, unless fn gives what _expected_visible gives."""
    want = _expected_visible(text, stop, final)
    got = _visible_call(fn, text, stop, final)
    if got == want:
        return
    hint: Text | str = ""
    found = [s for s in stop if s in text]
    if found:
        if got[1] and any(got[0] == text[: text.find(s) + len(s)] for s in found):
            hint = tr(": the stop string itself is not part of the output")
        elif not got[1]:
            hint = tr(": a stop string is in the text (maybe not at its very end: one token can "
                      "carry a stop string and more), so the text stops there")
        elif got[0] == want[0].strip():
            hint = tr(": keep the text before the stop string as it is (no stripping of spaces)")
        else:
            hint = tr(": cut at the stop string that starts first in the text, whatever its place "
                      "in the list, and at its first occurrence")
    elif final and got[0] != text:
        hint = tr(": with final=True no more text will come, so nothing can complete a stop "
                  "string: show everything")
    elif got[0] == text and want[0] != text:
        hint = tr(": the end {end!r} could be the start of a stop string, so a stream must not "
                  "show it yet", end=text[len(want[0]):])
    elif len(got[0]) < len(want[0]) and text.startswith(got[0]):
        held = text[len(got[0]):]
        hint = tr(": it held back {held!r}, but only {end!r} could still become a stop string; "
                  "text that cannot start one should reach the reader now", held=held,
                  end=text[len(want[0]):])
    elif len(got[0]) > len(want[0]) and text.startswith(got[0]):
        hint = tr(": it showed {shown!r}, which could be the start of a stop string; hold back "
                  "the longest end of the text that begins a stop string",
                  shown=got[0][len(want[0]):])
    raise CheckFailed(tr("visible_text({text!r}, {stop!r}, final={final}) should return "
                         "{want!r}, got {got!r}{hint}", text=text, stop=stop, final=final,
                         want=want, got=got, hint=hint))


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
    return tr("{n} texts", n=len(cases))


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
    return tr("{n} texts", n=len(cases))


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
                    raise CheckFailed(tr(
                        "streaming {text!r} with stop {stop!r}: the reader had seen {shown!r}, "
                        "then visible_text({part!r}) gave {now!r}, which takes some of it back; "
                        "text that might start a stop string must not be shown early",
                        text=text, stop=stop, shown=shown, part=text[:end], now=now))
                shown = now
                if stopped:
                    break
            streams += 1
    return tr("{n} streams", n=streams)

