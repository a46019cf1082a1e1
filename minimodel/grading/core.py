"""The machinery of self-grading: a registry of checks, `check()`, and readable results.

A check is a function that receives the learner's function, tries it on random inputs, and
raises CheckFailed with a sentence a learner understands when something is wrong. Checks never
use one fixed example: they draw sizes, dtypes and configs, so a hard-coded answer fails.
"""

from __future__ import annotations

import html
import importlib
import pkgutil
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from minimodel.grading.i18n import LANGUAGES, Text, in_language, language, tr, tr_title

CheckFn = Callable[[Callable], "str | None"]

_REGISTRY: dict[str, list[tuple[str, CheckFn]]] = {}
_LOG: list[CheckResult] = []


class CheckFailed(AssertionError):
    """Raised by a check: the message says what was expected and what came back."""


def exercise(name: str, title: str) -> Callable[[CheckFn], CheckFn]:
    """Register a check for exercise `name` ("ch03.causal_mask"), shown as `title`."""

    def register(fn: CheckFn) -> CheckFn:
        _REGISTRY.setdefault(name, []).append((title, fn))
        return fn

    return register


def _load_chapter_checks() -> None:
    package = sys.modules[__name__.rsplit(".", 1)[0]]
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("ch"):
            importlib.import_module(f"{package.__name__}.{info.name}")


def exercises() -> dict[str, list[str]]:
    """Every registered exercise with the titles of its checks."""
    _load_chapter_checks()
    return {name: [title for title, _ in checks] for name, checks in sorted(_REGISTRY.items())}


# --- results -------------------------------------------------------------------------------


@dataclass
class Outcome:
    """The result of one check: status is "pass", "fail", "error" or "todo"."""

    title: str
    status: str
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def mark(self) -> str:
        return {"pass": "✓", "todo": "…"}.get(self.status, "✗")


@dataclass
class CheckResult:
    """All checks of one exercise. `passed` is True only when every check passed."""

    name: str
    outcomes: list[Outcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # about the code checked, not a check

    @property
    def passed(self) -> bool:
        return bool(self.outcomes) and all(o.passed for o in self.outcomes)

    @property
    def implemented(self) -> bool:
        return not any(o.status == "todo" for o in self.outcomes)

    @property
    def score(self) -> tuple[int, int]:
        """(checks passed, checks in all)."""
        return sum(o.passed for o in self.outcomes), len(self.outcomes)

    def summary(self, lang: str | None = None) -> str:
        """One line: the exercise and its score, in `lang` (default: the current language)."""
        if not self.implemented:
            text = tr("{name}: not implemented yet", name=self.name)
        else:
            done, total = self.score
            text = (tr("{name}: {done}/{total} all checks passed", name=self.name, done=done,
                       total=total) if self.passed else
                    tr("{name}: {done}/{total} some checks failed", name=self.name, done=done,
                       total=total))
        return text.in_language(lang) if lang else str(text)

    def text(self, lang: str | None = None) -> str:
        """The result as plain text, in `lang` (default: the current language)."""
        lang = lang or language()
        lines = [self.summary(lang)] + [f"  ! {in_language(n, lang)}" for n in self.notes]
        for o in self.outcomes:
            lines.append(f"  {o.mark} {in_language(o.title, lang)}"
                         + (f" — {in_language(o.message, lang)}" if o.message else ""))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    __repr__ = __str__

    def html(self, lang: str | None = None) -> str:
        """The result as HTML, in `lang` (default: the current language)."""
        lang = lang or language()
        color = "#1a7f37" if self.passed else ("#9a6700" if not self.implemented else "#cf222e")
        rows = "".join(
            f"<li><b>{o.mark}</b> {html.escape(in_language(o.title, lang))}"
            + (f" — <span>{html.escape(in_language(o.message, lang))}</span>" if o.message else "")
            + "</li>"
            for o in self.outcomes
        )
        notes = "".join(f"<div style='color:#9a6700'>! {html.escape(in_language(n, lang))}</div>"
                        for n in self.notes)
        return (
            f"<div><b style='color:{color}'>{html.escape(self.summary(lang))}</b>{notes}"
            f"<ul style='margin:0'>{rows}</ul></div>"
        )

    def _repr_html_(self) -> str:
        return self.html()

    def _repr_mimebundle_(self, include=None, exclude=None):
        """Text and HTML in the current language; the output's metadata keeps both languages'
        renderings, from which the Chinese edition's notebooks take theirs."""
        both = {lang: {"text/plain": self.text(lang), "text/html": self.html(lang)}
                for lang in LANGUAGES}
        return both[language()], {"minimodel": {"check": both}}

    def to_dict(self) -> dict:
        done, total = self.score
        return {
            "exercise": self.name,
            "passed": self.passed,
            "score": done,
            "total": total,
            "checks": [vars(o) for o in self.outcomes],
            "notes": list(self.notes),
        }


def results_log() -> list[CheckResult]:
    """Every CheckResult produced in this process, in order (used by `minimodel grade`)."""
    return list(_LOG)


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    ip = shell.get_ipython() if shell and hasattr(shell, "get_ipython") else None
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def check(name: str, fn: Callable) -> CheckResult:
    """Run every check of exercise `name` on `fn` and return (and show) the results.

    A stub that raises NotImplementedError is reported as "not implemented yet" and does not
    raise, so a notebook keeps running.
    """
    _load_chapter_checks()
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY))
        raise KeyError(str(tr("No exercise named {name!r}. Known exercises: {known}", name=name,
                              known=known)))
    from minimodel.grading import learner

    result = CheckResult(name, notes=learner.changed_since_loaded(fn))
    if _in_notebook():
        learner.record_checked(name, fn)
    for title, run in _REGISTRY[name]:
        torch.manual_seed(0)  # every check draws the same random cases on every run
        shown = tr_title(title)
        try:
            note = run(fn)
            result.outcomes.append(Outcome(shown, "pass", note or ""))
        except NotImplementedError:
            result.outcomes.append(Outcome(shown, "todo", tr("not implemented yet")))
        except CheckFailed as e:
            result.outcomes.append(Outcome(shown, "fail", _message(e)))
        except Exception as e:  # the learner's code crashed: say where, briefly
            frame = traceback.extract_tb(e.__traceback__)[-1]
            where = (tr(" (line {line} of {function})", line=frame.lineno, function=frame.name)
                     if frame else "")
            hint = learner.explain(e)
            message = tr("raised {error}: {text}{where}", error=type(e).__name__, text=_said(e),
                         where=where)
            if hint:
                message = tr("{message}. {hint}", message=message, hint=hint)
            result.outcomes.append(Outcome(shown, "error", message))
    _LOG.append(result)
    if not _in_notebook():
        print(result)
    return result


def _said(e: BaseException) -> str:
    """An exception's message: the Text itself when it was raised with `tr(...)` (both
    languages), else its str."""
    return e.args[0] if len(e.args) == 1 and isinstance(e.args[0], Text) else str(e)


def _message(e: CheckFailed) -> str:
    """A CheckFailed's message, keeping both languages when it was made by `tr`."""
    text = _said(e)
    if isinstance(text, Text) or not text:
        return text
    return Text(text, text, missing=True)  # not written with tr: no Chinese


# --- helpers for writing checks ------------------------------------------------------------


def expect(condition: bool, message: str) -> None:
    """Fail the check with `message` unless `condition` holds."""
    if not condition:
        raise CheckFailed(message)


def expect_shape(t: object, shape: tuple[int, ...], what: str) -> None:
    """`t` must be a tensor of exactly `shape`."""
    if not isinstance(t, torch.Tensor):
        raise CheckFailed(tr("{what} should be a torch.Tensor, got {got}", what=what,
                             got=type(t).__name__))
    if tuple(t.shape) != tuple(shape):
        raise CheckFailed(tr("{what} should have shape {want}, got {got}", what=what,
                             want=tuple(shape), got=tuple(t.shape)))


def expect_close(
    actual: object, expected: torch.Tensor, what: str, atol: float = 1e-5, rtol: float = 1e-5
) -> None:
    """`actual` must match `expected` in shape and values (max abs diff reported)."""
    expect_shape(actual, tuple(expected.shape), what)
    assert isinstance(actual, torch.Tensor)
    if actual.dtype.is_floating_point != expected.dtype.is_floating_point:
        raise CheckFailed(tr("{what} should have dtype {want}, got {got}", what=what,
                             want=expected.dtype, got=actual.dtype))
    if not torch.allclose(actual.to(expected.dtype), expected, atol=atol, rtol=rtol,
                          equal_nan=True):
        diff = (actual.to(expected.dtype) - expected).abs()
        diff = diff[~diff.isnan()] if diff.isnan().any() else diff
        worst = float(diff.max()) if diff.numel() else float("nan")
        raise CheckFailed(tr("{what} is off from the expected values: max abs diff {worst:.3g}",
                             what=what, worst=worst))
