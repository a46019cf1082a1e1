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
"""

from __future__ import annotations

import ast
import functools
import inspect
import json
import os
import sys
import sysconfig
import types
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

PREFIX = "learner_"
_CACHE: dict[tuple[str, float], types.ModuleType] = {}


def find_notebook(name: str | Path, folder: str | Path | None = None) -> Path:
    """`ch03` or `ch03_attention` or a path -> the notebook file, looked up in `folder` (cwd)."""
    path = Path(name)
    if path.suffix == ".ipynb":
        if path.is_file():
            return path
        raise FileNotFoundError(f"{path} does not exist.")
    base = Path(folder) if folder is not None else Path.cwd()
    hits = sorted(p for p in base.glob(f"{name}*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    if not hits:
        raise FileNotFoundError(
            f"No notebook {name}*.ipynb in {base.resolve()}. Keep your exercise notebooks "
            "together in one folder (as in exercises/) and run this notebook from there."
        )
    if len(hits) > 1:
        names = ", ".join(p.name for p in hits)
        raise FileNotFoundError(f"More than one notebook matches {name!r} in {base}: {names}.")
    return hits[0]


def _is_loader_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "learner_module") or (
        isinstance(f, ast.Attribute) and f.attr == "learner_module"
    )


def _keep(node: ast.stmt) -> bool:
    """Definitions only: what a later notebook may import without running this one."""
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef)):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        if _is_loader_call(node.value):
            return True
        try:  # a constant: a number, a string, a tuple of them ...
            ast.literal_eval(node.value)
            return True
        except ValueError:
            return False
    return False


def _cell_source(cell: dict) -> str:
    src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    if src.lstrip().startswith("%%"):
        return ""  # a cell magic (%%time, %%writefile ...): not Python
    lines = [("pass  # " + ln) if ln.lstrip().startswith(("%", "!")) else ln
             for ln in src.splitlines()]
    return "\n".join(lines)


def definitions_source(notebook: Path) -> str:
    """The definitions of a notebook's code cells, as one Python source."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    parts = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or "reveal" in cell.get("metadata", {}).get("tags", []):
            continue  # a reveal cell shows the package's code: not the learner's
        try:
            tree = ast.parse(_cell_source(cell))
        except SyntaxError as e:
            raise SyntaxError(f"{notebook.name}, code cell {i}: {e.msg} (line {e.lineno})") from e
        kept = [n for n in tree.body if _keep(n)]
        if kept:
            parts.append(f"# --- {notebook.name}, cell {i}\n" + ast.unparse(kept))
    return "\n\n".join(parts) + "\n"


def learner_module(name: str | Path, folder: str | Path | None = None) -> types.ModuleType:
    """The definitions of your notebook `name` (e.g. "ch03"), as a module.

    Reloaded when the notebook file changes (save it after editing).
    """
    path = find_notebook(name, folder).resolve()
    key = (str(path), path.stat().st_mtime)
    if key in _CACHE:
        return _CACHE[key]
    source = definitions_source(path)
    mod_name = PREFIX + path.stem
    module = types.ModuleType(mod_name, f"Definitions of {path.name}")
    module.__file__ = str(path)
    sys.modules[mod_name] = module  # dataclasses and pickling look modules up by name
    cwd = os.getcwd()
    try:
        os.chdir(path.parent)  # its own learner_module calls find their notebooks beside it
        exec(compile(source, str(path), "exec"), module.__dict__)
    finally:
        os.chdir(cwd)
    _CACHE[key] = module
    return module


# --- which of the learner's functions a composed piece calls ---------------------------------

_LIBRARY_DIRS = tuple(
    str(Path(p).resolve())
    for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
              sysconfig.get_paths()["platlib"], str(Path(__file__).resolve().parents[1])}
)


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
    namespaces, todo, seen = [], [fn.__globals__, closure], set()
    while todo:  # the notebook's globals, the learner modules they hold, theirs in turn
        ns = todo.pop()
        if id(ns) in seen:
            continue
        seen.add(id(ns))
        namespaces.append(ns)
        todo += [vars(v) for v in list(ns.values())
                 if isinstance(v, types.ModuleType) and v.__name__.startswith(PREFIX)]
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
