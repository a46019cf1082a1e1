"""Running the learner's tp_decoder_layer on two real processes.

The two ranks are started with multiprocessing's forkserver (a clean server process that imports
torch once and forks each rank from itself, so no rank inherits the caller's threads, and a
second check starts in seconds), joined in a gloo process group, each loading the learner's
function (from the saved notebook, with `learner_module`, or from its module). Every
torch.distributed all_reduce is recorded there (shape and the summed result), and the matmul
FLOPs and the calls of the learner's three pieces are counted. The ranks and the server are
always stopped when a run ends.
"""

from __future__ import annotations

import ast
import datetime
import importlib
import inspect
import queue
import shutil
import sys
import tempfile
import textwrap
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from minimodel.grading.ch10.reference import _call_layer, _tp_cases, _tp_one_rank
from minimodel.grading.core import CheckFailed, _message, expect
from minimodel.grading.i18n import tr

_TP_WORLD = 2
_STARTUP_S = 300.0  # start the server (imports torch), load the notebook: generous under load
_STRAGGLER_S = 90.0  # a rank still running this long after another finished is stuck
_COLLECTIVE_S = 120  # gloo's own limit on one collective
_PIECES = ("column_parallel_linear", "row_parallel_linear", "shard_qkv")


def _function_ref(fn: Callable) -> tuple[str, str, str]:
    """How a rank process finds fn: ("notebook", path, name) or ("module", module, name)."""
    from minimodel.grading.learner import PREFIX, find_notebook

    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__name__", "")
    if module == "__main__":
        try:
            path = find_notebook("ch10")
        except FileNotFoundError as e:
            raise CheckFailed(tr(
                "The two ranks run in new processes, which cannot see this one's memory: each "
                "loads tp_decoder_layer from your saved ch10 notebook, and none was found here. "
                "{error}", error=str(e))) from None
        return "notebook", str(path.resolve()), name
    if module.startswith(PREFIX):
        return "notebook", str(sys.modules[module].__file__), name
    if "<locals>" in getattr(fn, "__qualname__", "<locals>"):
        raise CheckFailed(tr("Define tp_decoder_layer at the top level: the two ranks run in "
                             "new processes, which look it up by name."))
    return "module", module, fn.__qualname__


def _unsaved(fn: Callable, notebook: Path) -> list[str]:
    """The functions (tp_decoder_layer and its pieces) whose saved definition in the notebook
    differs from the one this process runs."""
    from minimodel.grading.learner import definitions_source, is_learner_function

    saved = {}
    for node in ast.parse(definitions_source(notebook)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            saved[node.name] = ast.dump(node)  # a later definition replaces an earlier one
    differ = []
    for name in (fn.__name__, *_PIECES):
        live = fn if name == fn.__name__ else fn.__globals__.get(name)
        if not is_learner_function(live):
            continue
        try:
            live_src = textwrap.dedent(inspect.getsource(live))
        except (OSError, TypeError):
            continue
        tree = ast.parse(live_src).body
        if tree and ast.dump(tree[0]) != saved.get(name):
            differ.append(name)
    return differ


def _resolve(ref: tuple[str, str, str]) -> Callable:
    kind, where, name = ref
    if kind == "notebook":
        from minimodel.grading.learner import learner_module

        obj: object = learner_module(Path(where))
    else:
        obj = importlib.import_module(where)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


def _rank_main(rank: int, world: int, init_method: str, ref: tuple[str, str, str],
               results) -> None:
    """One rank, in its own process: join the group, run every case, report to the parent."""
    import torch.distributed as dist
    from torch.utils.flop_counter import FlopCounterMode

    from minimodel.grading.learner import spy_calls

    torch.set_num_threads(1)
    try:
        original = dist.all_reduce
        seen: list[tuple[tuple[int, ...], torch.Tensor]] = []

        def recorded(tensor, *args, **kwargs):
            work = original(tensor, *args, **kwargs)
            seen.append((tuple(tensor.shape), tensor.detach().clone()))
            return work

        dist.all_reduce = recorded  # before the notebook loads: `from ... import` sees it too
        fn = _resolve(ref)
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=_COLLECTIVE_S))
        report = []
        for i in range(len(_tp_cases())):
            seen.clear()
            with spy_calls(inspect.unwrap(fn)) as calls, FlopCounterMode(display=False) as fl:
                out, k, v = _call_layer(fn, i, rank, world)
            report.append({"out": out.numpy(), "k": k.numpy(), "v": v.numpy(),
                           "reduces": [(s, t.numpy()) for s, t in seen],
                           "flops": fl.get_total_flops(), "calls": dict(calls)})
        results.put(("ok", rank, report))
        dist.destroy_process_group()
    except NotImplementedError:
        results.put(("todo", rank, ""))
    except CheckFailed as e:
        results.put(("fail", rank, _message(e)))  # a Text: both languages reach the parent
    except BaseException:
        results.put(("error", rank, traceback.format_exc(limit=-6)))


def _stop(procs: list) -> None:
    for p in procs:
        if p.pid is not None:
            p.join(5 if p.exitcode is None else 0)
    for p in procs:
        if p.pid is not None and p.is_alive():
            p.terminate()
            p.join(5)
        if p.pid is not None and p.is_alive():
            p.kill()
            p.join(5)


def _stop_forkserver() -> None:
    """End the forkserver the ranks came from, so that a check leaves no process behind (the
    next check starts a new one). `_stop` is the standard library's own way to end it."""
    from multiprocessing import forkserver

    stop = getattr(forkserver._forkserver, "_stop", None)
    if stop is not None:
        stop()


def _two_ranks(fn: Callable) -> list[list[dict]]:
    """Run the learner's layer on every case in _TP_WORLD processes -> each rank's report."""
    import multiprocessing as mp

    try:  # a stub is "not implemented yet" and a wrong layer fails here, cheaply
        _tp_one_rank(fn)
    except CheckFailed:
        raise CheckFailed(tr("Not run on two processes: it must first pass with one rank (the "
                             "first check).")) from None
    ref = _function_ref(fn)
    if ref[0] == "notebook" and fn.__module__ == "__main__":
        differ = _unsaved(fn, Path(ref[1]))
        names, notebook = ", ".join(differ), Path(ref[1]).name
        head = (tr("{names} in {notebook}, as saved, is not what this kernel runs.",
                   names=names, notebook=notebook) if len(differ) == 1 else
                tr("{names} in {notebook}, as saved, are not what this kernel runs.",
                   names=names, notebook=notebook))
        expect(not differ, tr(
            "{head} The two ranks are new processes: each loads your functions from the saved "
            "notebook. Save the notebook (Ctrl-S) and run this check again.", head=head))
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])  # the server imports torch once; ranks fork from it
    results = ctx.Queue()
    folder = tempfile.mkdtemp(prefix="minimodel-ch10-")
    init_method = f"file://{folder}/rendezvous"
    procs = [ctx.Process(target=_rank_main, args=(r, _TP_WORLD, init_method, ref, results),
                         name=f"ch10-rank{r}", daemon=True) for r in range(_TP_WORLD)]
    reports: dict[int, list[dict]] = {}
    try:
        for p in procs:
            p.start()
        deadline, first_done = time.monotonic() + _STARTUP_S, None
        while len(reports) < _TP_WORLD:
            try:
                kind, rank, payload = results.get(timeout=0.5)
            except queue.Empty:
                now = time.monotonic()
                gone = [p for r, p in enumerate(procs) if r not in reports
                        and p.exitcode is not None]
                if gone:
                    raise CheckFailed(tr("Rank process {name} exited with code {code} before "
                                         "it reported.", name=gone[0].name,
                                         code=gone[0].exitcode)) from None
                if first_done is not None and now - first_done > _STRAGGLER_S:
                    waiting = [r for r in range(_TP_WORLD) if r not in reports]
                    raise CheckFailed(tr(
                        "Rank(s) {waiting} were still running {after:.0f} s after rank {done} "
                        "had finished: most likely waiting in an all-reduce that the other rank "
                        "never made. Every rank must call all_reduce the same number of times, "
                        "in the same order.", waiting=waiting, after=_STRAGGLER_S,
                        done=sorted(reports)[0])) from None
                if now > deadline:
                    raise CheckFailed(tr("The {world} ranks did not finish within "
                                         "{limit:.0f} s.", world=_TP_WORLD,
                                         limit=_STARTUP_S)) from None
                continue
            if kind == "todo":
                raise NotImplementedError
            if kind == "fail":
                raise CheckFailed(payload)
            if kind == "error":
                raise CheckFailed(tr("On rank {rank} of {world} your layer raised:\n{payload}",
                                     rank=rank, world=_TP_WORLD, payload=payload))
            reports[rank] = payload
            first_done = first_done or time.monotonic()
    finally:
        _stop(procs)
        results.close()
        shutil.rmtree(folder, ignore_errors=True)
        _stop_forkserver()
    return [reports[r] for r in range(_TP_WORLD)]
