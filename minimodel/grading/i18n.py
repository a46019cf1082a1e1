"""Check messages in the learner's language: English, or Chinese in a Chinese notebook.

A message is written in English where it is raised, as a `str.format` template with named
fields, and passed through `tr`:

    raise CheckFailed(tr("{what} should have shape {want}, got {got}",
                         what=what, want=tuple(shape), got=tuple(t.shape)))

Each chapter's table (`minimodel/grading/zh/ch05.py`, and `zh/core.py` for the messages every
chapter shares) maps the English template to its Chinese, with the same fields, in whatever
order a Chinese sentence wants them. `tr` renders both languages at once and returns a `Text`:
a string in the current language that also carries `.en` and `.zh`. A field whose value is
itself a `Text` (a hint inside a message) is rendered in each language in turn, so messages
compose without losing either language.

The language is Chinese when `MINIMODEL_LANG` says `zh` (or starts with it), English when it
says `en`; unset, it is Chinese when the notebook runs from a folder named `zh`
(`exercises/zh/`, `solutions/zh/`, `chapters/zh/`: Jupyter starts a kernel in its notebook's
folder), English otherwise. `tests/test_grading_i18n.py` checks that every template has a
Chinese entry with the same fields and that every entry is used.
"""

from __future__ import annotations

import functools
import importlib
import os
import pkgutil
import re
import string
from pathlib import Path

LANGUAGES = ("en", "zh")


def language(folder: str | Path | None = None) -> str:
    """"zh" or "en": `MINIMODEL_LANG` if set, else "zh" when `folder` (default: the current
    one, a notebook's own) is named zh."""
    chosen = os.environ.get("MINIMODEL_LANG", "").strip().lower()
    if chosen.startswith("zh"):
        return "zh"
    if chosen.startswith("en"):
        return "en"
    try:
        return "zh" if Path(folder if folder is not None else Path.cwd()).name == "zh" else "en"
    except OSError:  # the folder was removed under the process
        return "en"


class Text(str):
    """A message: the string in the current language, with `.en` and `.zh` both kept.

    `missing` is True when some part of it had no Chinese entry (its `.zh` then shows that
    part in English).
    """

    en: str
    zh: str
    missing: bool

    def __new__(cls, en: str, zh: str, missing: bool = False) -> Text:
        obj = super().__new__(cls, zh if language() == "zh" else en)
        obj.en, obj.zh, obj.missing = en, zh, missing
        return obj

    def __reduce__(self):  # pickles (a result sent between processes) as what it says
        return (Text, (self.en, self.zh, self.missing))

    def in_language(self, lang: str) -> str:
        """The message in `lang` ("en" or "zh")."""
        return self.zh if lang == "zh" else self.en


def in_language(value: object, lang: str) -> object:
    """`value` in `lang` if it is a Text, else `value` itself (a number keeps its format)."""
    return value.in_language(lang) if isinstance(value, Text) else value


@functools.cache
def table() -> dict[str, str]:
    """Every chapter's English template -> Chinese template, merged."""
    from minimodel.grading import zh

    merged: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(zh.__path__), key=lambda i: i.name):
        merged.update(importlib.import_module(f"{zh.__name__}.{info.name}").MESSAGES)
    return merged


def fields(template: str) -> set[str]:
    """The named fields of a format template ("{what} got {got:.3g}" -> {"what", "got"})."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def tr(template: str, /, **values: object) -> Text:
    """The message `template` (English, str.format fields) filled with `values`, in both
    languages; see the module's docstring."""
    zh_template = table().get(template)
    missing = zh_template is None or any(
        isinstance(v, Text) and v.missing for v in values.values())
    en = template.format(**{k: in_language(v, "en") for k, v in values.items()})
    zh = _CJK_SPACE.sub("", (zh_template or template).format(
        **{k: in_language(v, "zh") for k, v in values.items()}))
    return Text(en, zh, missing)


# A space between two Chinese characters (or full-width punctuation) is never wanted: it appears
# where a template's "{what} 的形状" meets a `what` that itself ends in Chinese.
_CJK_SPACE = re.compile(r"(?<=[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]) +"
                        r"(?=[\u3000-\u303f\u3400-\u9fff\uff00-\uffef])")


def tr_title(title: str) -> Text:
    """An exercise's title (registered with `@exercise(name, title)`), in both languages: a title
    has no fields, so braces in it are text."""
    zh = table().get(title)
    return Text(title, title if zh is None else zh, zh is None)


def join(sep: str, parts: list) -> Text:
    """`sep.join(parts)` for messages: each language joined from its own parts (and its own
    separator, when `sep` is a Text)."""
    en = str(in_language(sep, "en")).join(str(in_language(p, "en")) for p in parts)
    zh = str(in_language(sep, "zh")).join(str(in_language(p, "zh")) for p in parts)
    return Text(en, zh, any(isinstance(p, Text) and p.missing for p in [sep, *parts]))


def plain(text: str) -> Text:
    """A message that reads the same in both languages (code, a value, the learner's own
    error text)."""
    return Text(text, text)
