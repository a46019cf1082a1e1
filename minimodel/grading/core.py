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

    def summary(self) -> str:
        if not self.implemented:
            return f"{self.name}: not implemented yet"
        done, total = self.score
        verdict = "all checks passed" if self.passed else "some checks failed"
        return f"{self.name}: {done}/{total} {verdict}"

    def __str__(self) -> str:
        lines = [self.summary()] + [f"  ! {n}" for n in self.notes]
        for o in self.outcomes:
            lines.append(f"  {o.mark} {o.title}" + (f" — {o.message}" if o.message else ""))
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        color = "#1a7f37" if self.passed else ("#9a6700" if not self.implemented else "#cf222e")
        rows = "".join(
            f"<li><b>{o.mark}</b> {html.escape(o.title)}"
            + (f" — <span>{html.escape(o.message)}</span>" if o.message else "")
            + "</li>"
            for o in self.outcomes
        )
        notes = "".join(f"<div style='color:#9a6700'>! {html.escape(n)}</div>"
                        for n in self.notes)
        return (
            f"<div><b style='color:{color}'>{html.escape(self.summary())}</b>{notes}"
            f"<ul style='margin:0'>{rows}</ul></div>"
        )

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
        raise KeyError(f"No exercise named {name!r}. Known exercises: {known}")
    from minimodel.grading import learner

    result = CheckResult(name, notes=learner.changed_since_loaded(fn))
    if _in_notebook():
        learner.record_checked(name, fn)
    for title, run in _REGISTRY[name]:
        torch.manual_seed(0)  # every check draws the same random cases on every run
        try:
            note = run(fn)
            result.outcomes.append(Outcome(title, "pass", note or ""))
        except NotImplementedError:
            result.outcomes.append(Outcome(title, "todo", "not implemented yet"))
        except CheckFailed as e:
            result.outcomes.append(Outcome(title, "fail", str(e)))
        except Exception as e:  # the learner's code crashed: say where, briefly
            frame = traceback.extract_tb(e.__traceback__)[-1]
            where = f" (line {frame.lineno} of {frame.name})" if frame else ""
            hint = learner.explain(e)
            message = f"raised {type(e).__name__}: {e}{where}" + (f". {hint}" if hint else "")
            result.outcomes.append(Outcome(title, "error", message))
    _LOG.append(result)
    if not _in_notebook():
        print(result)
    return result


# --- helpers for writing checks ------------------------------------------------------------


def expect(condition: bool, message: str) -> None:
    """Fail the check with `message` unless `condition` holds."""
    if not condition:
        raise CheckFailed(message)


def expect_shape(t: object, shape: tuple[int, ...], what: str) -> None:
    """`t` must be a tensor of exactly `shape`."""
    if not isinstance(t, torch.Tensor):
        raise CheckFailed(f"{what} should be a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != tuple(shape):
        raise CheckFailed(f"{what} should have shape {tuple(shape)}, got {tuple(t.shape)}")


def expect_close(
    actual: object, expected: torch.Tensor, what: str, atol: float = 1e-5, rtol: float = 1e-5
) -> None:
    """`actual` must match `expected` in shape and values (max abs diff reported)."""
    expect_shape(actual, tuple(expected.shape), what)
    assert isinstance(actual, torch.Tensor)
    if actual.dtype.is_floating_point != expected.dtype.is_floating_point:
        raise CheckFailed(f"{what} should have dtype {expected.dtype}, got {actual.dtype}")
    if not torch.allclose(actual.to(expected.dtype), expected, atol=atol, rtol=rtol,
                          equal_nan=True):
        diff = (actual.to(expected.dtype) - expected).abs()
        diff = diff[~diff.isnan()] if diff.isnan().any() else diff
        worst = float(diff.max()) if diff.numel() else float("nan")
        raise CheckFailed(f"{what} is off from the expected values: max abs diff {worst:.3g}")
