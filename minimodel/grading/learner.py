"""Your own code, from your own notebooks: how a later chapter uses what you wrote earlier.

    from minimodel.grading.learner import learner_module
    ch03 = learner_module("ch03")       # your ch03_*.ipynb, next to this notebook
    ch03.attention(q, k, v, mask)       # the function *you* wrote there

`learner_module` reads the notebook (it does not need to be open or saved as a .py file) and
runs only its definitions: imports, functions, classes, constants and other `learner_module`
calls. Checks, plots and model loading are skipped, so it takes a fraction of a second. The
notebook is looked up in the same folder as the notebook you are running, so `exercises/`
loads your exercises and `solutions/` loads the solutions; `minimodel grade` does the same for
a folder of submissions.

The capstone checks also use `spy_calls` to see which of your functions a composed piece
calls: a forward pass that quietly calls the package's model instead of yours is caught.

Two mistakes are easy to make and hard to see, so the loader looks for both and says so:

- a name your function needs is set by top-level code that is not a definition
  (`NEG_INF = float("-inf")` is a call, not a literal): the NameError, inside a check or in
  a notebook cell, comes with the cell and the line that was skipped and what to do;
- the saved notebook is older than the code you ran: its kernel checked a different version of
  a function after the file was last saved (you edited and did not save), JupyterLab's
  checkpoint is newer than the file, or the file changed after this notebook loaded it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import json
import os
import sys
import sysconfig
import textwrap
import time
import types
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from minimodel.grading.i18n import join, tr
from minimodel.home import minimodel_home

PREFIX = "learner_"
_CACHE: dict[tuple[str, float], types.ModuleType] = {}


def find_notebook(name: str | Path, folder: str | Path | None = None) -> Path:
    """`ch03` or `ch03_attention` or a path -> the notebook file, looked up in `folder` (cwd)."""
    path = Path(name)
    if path.suffix == ".ipynb":
        if path.is_file():
            return path
        raise FileNotFoundError(tr("{path} does not exist.", path=path))
    base = Path(folder) if folder is not None else Path.cwd()
    hits = sorted(p for p in base.glob(f"{name}*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    if not hits:
        raise FileNotFoundError(tr(
            "No notebook {name}*.ipynb in {folder}. Keep your exercise notebooks together in one "
            "folder (as in exercises/) and run this notebook from there.",
            name=name, folder=base.resolve()))
    if len(hits) > 1:
        names = ", ".join(p.name for p in hits)
        raise FileNotFoundError(tr("More than one notebook matches {name!r} in {folder}: "
                                   "{names}.", name=name, folder=base, names=names))
    return hits[0]


def _is_loader_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "learner_module") or (
        isinstance(f, ast.Attribute) and f.attr == "learner_module"
    )


class LearnerWarning(UserWarning):
    """The notebook `learner_module` loads may not be the code you meant it to load."""


def _literal(node: ast.expr) -> bool:
    try:  # a constant: a number, a string, a tuple of them ...
        ast.literal_eval(node)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _keep(node: ast.stmt) -> bool:
    """Definitions only: what a later notebook may import without running this one."""
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef)):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        return _is_loader_call(node.value) or _literal(node.value)
    return False


def _bound_names(node: ast.stmt) -> set[str]:
    """The module-level names a statement binds (not those inside the functions it defines)."""
    names: set[str] = set()
    todo: list[ast.AST] = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
            todo += n.decorator_list
            continue
        if isinstance(n, ast.Lambda):
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in n.names if a.name != "*"}
        todo += ast.iter_child_nodes(n)
    return names


@dataclass(frozen=True)
class Skipped:
    """A top-level statement that binds `name` but is not loaded: where it is and why."""

    name: str
    cell: int
    line: str

    def why(self, notebook: str) -> str:
        return tr("{name} is set in code cell {cell} of {notebook} by `{line}`, which "
                  "learner_module does not run: it loads only imports, def, class and constants "
                  "written as literals (a call or an expression of other names is computed only "
                  "when the cell runs). Move the value into the function that uses it, or write "
                  "it as a literal (e.g. -1e30, 1e-6, (1, 2, 4)), save the notebook and run this "
                  "cell again.", name=self.name, cell=self.cell, notebook=notebook,
                  line=self.line)


def _cell_source(cell: dict) -> str:
    src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    if src.lstrip().startswith("%%"):
        return ""  # a cell magic (%%time, %%writefile ...): not Python
    lines = [("pass  # " + ln) if ln.lstrip().startswith(("%", "!")) else ln
             for ln in src.splitlines()]
    return "\n".join(lines)


def _cells(notebook: Path) -> list[dict]:
    return json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]


def _definitions(notebook: Path) -> tuple[str, dict[str, Skipped], list[ast.stmt]]:
    """(the definitions as one source, the names set by skipped statements, the kept nodes)."""
    parts, skipped, kept_all, bound = [], {}, [], set()
    for i, cell in enumerate(_cells(notebook)):
        if cell["cell_type"] != "code" or "reveal" in cell.get("metadata", {}).get("tags", []):
            continue  # a reveal cell shows the package's code: not the learner's
        try:
            tree = ast.parse(_cell_source(cell))
        except SyntaxError as e:
            raise SyntaxError(tr("{notebook}, code cell {cell}: {error} (line {line})",
                                 notebook=notebook.name, cell=i, error=e.msg,
                                 line=e.lineno)) from e
        kept = []
        for node in tree.body:
            if _keep(node):
                kept.append(node)
                bound |= _bound_names(node)
            else:
                line = ast.unparse(node).splitlines()[0]
                for name in _bound_names(node):
                    skipped.setdefault(name, Skipped(name, i, line))
        if kept:
            kept_all += kept
            parts.append(f"# --- {notebook.name}, cell {i}\n" + ast.unparse(kept))
    skipped = {k: v for k, v in skipped.items() if k not in bound}
    return "\n\n".join(parts) + "\n", skipped, kept_all


def definitions_source(notebook: Path) -> str:
    """The definitions of a notebook's code cells, as one Python source."""
    return _definitions(Path(notebook))[0]


# --- is the saved notebook the code the learner ran? ----------------------------------------


def _fingerprint(node: ast.AST) -> str:
    return hashlib.sha256(ast.unparse(node).encode()).hexdigest()[:16]


def _record_file(folder: Path, chapter: str) -> Path:
    key = hashlib.sha256(str(Path(folder).resolve()).encode()).hexdigest()[:16]
    return minimodel_home() / "learner" / key / f"{chapter}.json"


def record_checked(exercise: str, fn: Callable) -> None:
    """Remember which version of a notebook's function its kernel last checked, so that a later
    notebook loading the saved file can tell when the file is older than that code."""
    fn = inspect.unwrap(fn)
    if not inspect.isfunction(fn) or fn.__module__ != "__main__":
        return
    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
        path = _record_file(Path.cwd(), exercise.split(".")[0])
        record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        record[fn.__name__] = {"fingerprint": _fingerprint(node), "time": time.time()}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError, SyntaxError, IndexError):
        pass  # a source that cannot be read or a cache that cannot be written: nothing to say


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def staleness(path: Path, kept: list[ast.stmt] | None = None) -> list[str]:
    """Why the saved notebook `path` may be older than the learner's code; [] when it is not."""
    path = Path(path)
    saved = path.stat().st_mtime
    found = []
    checkpoint = path.parent / ".ipynb_checkpoints" / f"{path.stem}-checkpoint.ipynb"
    try:
        if checkpoint.stat().st_mtime > saved + 1 and checkpoint.read_bytes() != path.read_bytes():
            found.append(tr(
                "JupyterLab's checkpoint of {notebook} ({checkpoint}) is newer than the file "
                "itself ({saved}): the file may not hold your last version. Open it, save it "
                "(Ctrl-S) and run this cell again.", notebook=path.name,
                checkpoint=_clock(checkpoint.stat().st_mtime), saved=_clock(saved)))
    except OSError:
        pass
    if kept is None:
        kept = _definitions(path)[2]
    defs = {n.name: n for n in kept if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    try:
        record = json.loads(_record_file(path.parent, path.stem.split("_")[0]).read_text("utf-8"))
    except (OSError, ValueError):
        record = {}
    for name, seen in sorted(record.items()):
        if (isinstance(seen, dict) and name in defs and seen.get("time", 0) > saved + 1
                and seen.get("fingerprint") != _fingerprint(defs[name])):
            found.append(tr(
                "{notebook}'s kernel checked a different `{name}` at {checked}, after the file "
                "was last saved ({saved}): you have unsaved edits. Save {notebook} (Ctrl-S in "
                "its tab) and run this cell again.", notebook=path.name, name=name,
                checked=_clock(seen["time"]), saved=_clock(saved)))
    return found


def learner_module(name: str | Path, folder: str | Path | None = None) -> types.ModuleType:
    """The definitions of your notebook `name` (e.g. "ch03"), as a module.

    Reads the saved file and reloads it when the file changes (save it after editing). Warns
    (LearnerWarning) when the saved file looks older than the code you ran in its kernel; a
    NameError from a name that top-level code sets but the loader does not run is explained
    by `explain` (in checks, and in Jupyter under the traceback).
    """
    path = find_notebook(name, folder).resolve()
    mtime = path.stat().st_mtime
    key = (str(path), mtime)
    module = _CACHE.get(key)
    if module is None:
        source, skipped, kept = _definitions(path)
        mod_name = PREFIX + path.stem
        module = types.ModuleType(mod_name, f"Definitions of {path.name}")
        module.__file__ = str(path)
        module.__learner_skipped__ = skipped
        module.__learner_mtime__ = mtime
        module.__learner_kept__ = kept
        sys.modules[mod_name] = module  # dataclasses and pickling look modules up by name
        cwd = os.getcwd()
        try:
            os.chdir(path.parent)  # its own learner_module calls find their notebooks beside it
            exec(compile(source, str(path), "exec"), module.__dict__)
        finally:
            os.chdir(cwd)
        _CACHE[key] = module
    _install_hint_handler()
    for message in staleness(path, module.__learner_kept__):
        warnings.warn(message, LearnerWarning, stacklevel=2)
    return module


def _learner_modules(tb: types.TracebackType | None) -> Iterator[types.ModuleType]:
    while tb is not None:
        mod = sys.modules.get(tb.tb_frame.f_globals.get("__name__", ""))
        if mod is not None and mod.__name__.startswith(PREFIX):
            yield mod
        tb = tb.tb_next


def explain(err: BaseException) -> str:
    """What a learner needs to know about an error raised inside a loaded notebook: the skipped
    statement behind a NameError, or that the notebook changed after it was loaded; "" if
    nothing."""
    hints = []
    for mod in dict.fromkeys(_learner_modules(err.__traceback__)):
        nb = Path(mod.__file__).name
        name = getattr(err, "name", None)
        if isinstance(err, NameError) and name:
            if name in mod.__learner_skipped__:
                hints.append(mod.__learner_skipped__[name].why(nb))
            elif name not in mod.__dict__:
                hints.append(tr("{name} is not defined anywhere in the saved {notebook}: if you "
                                "defined it in that notebook's kernel, save the notebook "
                                "(Ctrl-S) and run this cell again.", name=name, notebook=nb))
        if _changed(vars(mod)):
            hints.append(tr("{notebook} changed on disk after this notebook loaded it: run the "
                            "cell with its learner_module(...) again to load the new version.",
                            notebook=nb))
    return join(" ", list(dict.fromkeys(hints))) if hints else ""


def _changed(ns: dict) -> bool:
    """Has a loaded notebook (its module's namespace) changed on disk since it was read?"""
    try:
        return Path(ns["__file__"]).stat().st_mtime != ns["__learner_mtime__"]
    except (OSError, KeyError):
        return False


def _namespaces(*roots: dict) -> list[dict]:
    """The given namespaces, the learner modules they hold, theirs in turn (each once)."""
    namespaces, todo, seen = [], list(roots), set()
    while todo:
        ns = todo.pop()
        if id(ns) in seen:
            continue
        seen.add(id(ns))
        namespaces.append(ns)
        todo += [vars(v) for v in list(ns.values())
                 if isinstance(v, types.ModuleType) and v.__name__.startswith(PREFIX)]
    return namespaces


def changed_since_loaded(fn: Callable) -> list[str]:
    """The notebooks loaded by `fn`'s notebook (directly or through each other) whose file
    changed after they were loaded: `fn` still runs their old code."""
    fn = inspect.unwrap(fn)
    found = []
    for ns in _namespaces(getattr(fn, "__globals__", {})):
        if ns.get("__name__", "").startswith(PREFIX) and _changed(ns):
            found.append(tr("{notebook} changed on disk after it was loaded, so this check ran "
                            "its old code: run the cell with its learner_module(...) again, then "
                            "this check.", notebook=Path(ns["__file__"]).name))
    return found


def _install_hint_handler() -> None:
    """In Jupyter, an error from a loaded notebook's code is shown with `explain`'s hint."""
    shell = sys.modules.get("IPython")
    ip = shell.get_ipython() if shell and hasattr(shell, "get_ipython") else None
    if ip is None or getattr(ip, "_minimodel_hints", False):
        return

    def handler(self, etype, value, tb, tb_offset=None):
        self.showtraceback((etype, value, tb), tb_offset=tb_offset)
        hint = explain(value)
        if hint:
            print("\n" + hint, file=sys.stderr)

    ip.set_custom_exc((NameError,), handler)
    ip._minimodel_hints = True


# --- which of the learner's functions a composed piece calls ---------------------------------

_LIBRARY_DIRS = tuple(
    str(Path(p).resolve())
    for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
              sysconfig.get_paths()["platlib"], str(Path(__file__).resolve().parents[1])}
)


_PACKAGE = str(Path(__file__).resolve().parents[1])  # minimodel/


def called_by_learner(frame) -> bool:
    """Whether the nearest caller of `frame` outside the standard library and installed
    packages is the learner's code (a notebook, a learner_module, a test file) rather than
    minimodel's."""
    f = frame.f_back
    while f is not None:
        name = str(Path(f.f_code.co_filename).resolve())
        if name.startswith(_PACKAGE):
            return False
        if not name.startswith(_LIBRARY_DIRS):
            return True
        f = f.f_back
    return False


@contextmanager
def learner_calls(named: Callable[[types.CodeType], str | None]) -> Iterator[list[str]]:
    """While the block runs, watch every Python call: the list it yields gets the name
    `named(code)` gives the first called function that has one, when the learner's code (not
    minimodel's) made the call."""
    found: list[str] = []

    def watch(frame, event, arg):
        if event == "call" and not found:
            name = named(frame.f_code)
            if name and called_by_learner(frame):
                found.append(name)

    previous = sys.getprofile()
    sys.setprofile(watch)
    try:
        yield found
    finally:
        sys.setprofile(previous)


def is_learner_function(f: object) -> bool:
    """A plain function written by the learner: not from the standard library, an installed
    package or minimodel itself (notebook functions, `learner_module` functions, test files)."""
    if not inspect.isfunction(f):
        return False
    if f.__module__ == "__main__" or f.__module__.startswith(PREFIX):
        return True
    filename = str(Path(f.__code__.co_filename).resolve())
    return not filename.startswith(_LIBRARY_DIRS)


@contextmanager
def spy_calls(fn: Callable) -> Iterator[Counter]:
    """Count, by name, the calls `fn` makes to the learner's functions while the block runs.

    Every learner function visible from `fn`'s globals is wrapped: names of the notebook, and
    the functions of `learner_module` modules it holds (`ch03.attention`). Restored afterwards.
    """
    fn = inspect.unwrap(fn)  # @torch.no_grad() and other wrappers: the learner's own function
    counts: Counter = Counter()
    patched: list[tuple[dict, str, object]] = []

    def wrap(name: str, f: Callable) -> Callable:
        @functools.wraps(f)
        def counted(*args, **kwargs):
            counts[name] += 1
            return f(*args, **kwargs)

        return counted

    cells = list(fn.__closure__ or ())
    closure = {}
    for i, c in enumerate(cells):
        try:
            if c.cell_contents is not fn:
                closure[f"<cell {i}>"] = c.cell_contents
        except ValueError:  # a variable not bound yet
            pass
    namespaces = _namespaces(fn.__globals__, closure)
    try:
        for ns in namespaces:
            for key, value in list(ns.items()):
                if value is not fn and is_learner_function(value):
                    patched.append((ns, key, value))
                    ns[key] = wrap(value.__name__, value)
        for i, c in enumerate(cells):  # write the wrapped closure variables back
            if f"<cell {i}>" in closure and closure[f"<cell {i}>"] is not c.cell_contents:
                c.cell_contents = closure[f"<cell {i}>"]
        yield counts
    finally:
        for ns, key, value in reversed(patched):
            ns[key] = value
        for i, c in enumerate(cells):
            if f"<cell {i}>" in closure:
                c.cell_contents = closure[f"<cell {i}>"]
