"""Own work: the learner's functions may not hand their job to the engine or the grader.

Every call of the learner's functions runs under `own_work`: a function that hands the decision
to the engine's Scheduler, ModelRunner, LLM or Sampler, to `build_metadata`, or to a grader's
own answers (`engine_admit` and the like) fails, however it is wrapped. The classes a learner's
step is handed (`EngineState` and what it holds) are marked with `learner_interface` and may be
called freely.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from minimodel.engine.attention import build_metadata
from minimodel.engine.scheduler import Scheduler
from minimodel.grading.core import CheckFailed
from minimodel.grading.i18n import tr
from minimodel.grading.learner import learner_calls
from minimodel.sampling import Sampler

# a grader: minimodel/grading/chNN.py, or any file of a package minimodel/grading/chNN/
_GRADERS = re.compile(re.escape(str(Path(__file__).resolve().parents[1]))
                      + r"[/\\](ch\d\d)(?:\.py|[/\\][^/\\]+\.py)$")


def _codes(*owners: object) -> dict:
    """code object -> readable name, for functions and for every method of classes."""
    out = {}
    for owner in owners:
        members = list(vars(owner).values()) if inspect.isclass(owner) else [owner]
        for m in members:
            m = m.fget if isinstance(m, property) else getattr(m, "__func__", m)
            m = inspect.unwrap(m) if callable(m) else m
            if inspect.isfunction(m):
                out[m.__code__] = f"{m.__module__}.{m.__qualname__}"
    return out


@functools.cache
def _engine_decisions() -> dict:
    """What the exercises ask the learner to write, as the engine writes it."""
    from minimodel.engine.llm import LLM
    from minimodel.engine.runner import ModelRunner

    return _codes(Scheduler, ModelRunner, LLM, Sampler, build_metadata)


_INTERFACE: dict = {}  # code object -> name: the grader's code a learner's step is meant to call

_Class = TypeVar("_Class", bound=type)


def learner_interface(cls: _Class) -> _Class:
    """Mark a grader's class as one the learner's step is handed (the EngineState and what it
    holds): its methods are not the grader's answers, so own_work lets the learner call them."""
    _INTERFACE.update(_codes(cls))
    return cls


_VERDICT: dict = {}  # code object -> the name of the job it does for the learner, or None


def _forbidden(code) -> str | None:
    if code not in _VERDICT:
        name = _engine_decisions().get(code)
        grader = _GRADERS.search(str(Path(code.co_filename).resolve()))
        if name is None and grader and code not in _INTERFACE:
            name = tr("the grader's {name}", name=f"{grader.group(1)}.{code.co_name}")
        _VERDICT[code] = name
    return _VERDICT[code]


@contextmanager
def own_work(fn: Callable, what: str) -> Iterator[None]:
    """Run the block (a call of the learner's `fn`) and fail if the learner's code called the
    engine's own decisions or the grader's answers, directly or through a wrapper."""
    target = fn
    while isinstance(target, functools.partial):
        target = target.func
    target = inspect.unwrap(target)
    if not inspect.isfunction(target):  # a callable object: its __call__
        target = inspect.unwrap(type(target).__call__) if callable(target) else target
    found = [_forbidden(target.__code__)] if inspect.isfunction(target) else []
    found = [f for f in found if f]  # the learner's function *is* one of the engine's or ours

    with learner_calls(_forbidden) as seen:
        yield
    found += seen
    if found:
        raise CheckFailed(tr("{what} hands its work to {found}: the exercise is to write that "
                             "decision yourself, from the rules of chapter 08, not to call the "
                             "engine's (or this grader's) own answer", what=what, found=found[0]))
