"""Notebook tools: exercises generated from solutions, and grading of learners' notebooks."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

from minimodel.grading.i18n import tr

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
_REGION = re.compile(
    rf"^(?P<indent>[ \t]*){re.escape(BEGIN)}[^\n]*\n.*?^[ \t]*{re.escape(END)}[^\n]*$",
    re.DOTALL | re.MULTILINE,
)
STUB = 'raise NotImplementedError("your code here")'
RESULTS_MARK = "MINIMODEL-GRADE-RESULTS:"


class GradingError(RuntimeError):
    """A notebook could not be graded: its kernel died, or it never reached the end."""


def strip_solution(source: str) -> str:
    """Replace every BEGIN/END SOLUTION region with a NotImplementedError stub (same indent)."""
    if source.count(BEGIN) != source.count(END):
        raise ValueError(f"unbalanced {BEGIN!r}/{END!r} markers in a cell:\n{source}")
    return _REGION.sub(lambda m: m.group("indent") + STUB, source)


REVEAL = "reveal"  # a cell tag: shown in solutions/ only (e.g. the package's code of a piece)


def exercise_notebook(solution: dict) -> dict:
    """The learner's copy of a solved notebook: solutions stubbed, outputs cleared, and the
    cells tagged `reveal` (the package's own code of an exercise, shown after it) left out."""
    nb = json.loads(json.dumps(solution))
    nb["cells"] = [c for c in nb["cells"] if REVEAL not in c.get("metadata", {}).get("tags", [])]
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        cell["source"] = strip_solution(source)
        cell["outputs"] = []
        cell["execution_count"] = None
        cell.get("metadata", {}).pop("execution", None)  # timestamps of the solution's last run
    return nb


def _dump(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def sync_exercises(solutions: Path, exercises: Path, check_only: bool = False) -> list[Path]:
    """Write exercises/ from solutions/; return the files that were (or would be) changed."""
    changed = []
    for src in sorted(Path(solutions).glob("*.ipynb")):
        target = Path(exercises) / src.name
        text = _dump(exercise_notebook(json.loads(src.read_text(encoding="utf-8"))))
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            changed.append(target)
            if not check_only:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
    return changed


def grade_notebook(path: Path, timeout: int = 600) -> list[dict]:
    """Execute one notebook and return the results of every check() it ran."""
    import nbformat
    from jupyter_client.kernelspec import NoSuchKernel
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    try:
        nb = nbformat.read(str(path), as_version=4)
    except (OSError, ValueError) as err:  # not there, not JSON, not a notebook
        raise GradingError(str(tr("{path}: cannot read it as a notebook ({error}).", path=path,
                                  error=err))) from None
    nb.cells.append(nbformat.v4.new_code_cell(
        "import json as _json, minimodel.grading as _g\n"
        f"print({RESULTS_MARK!r} + _json.dumps([r.to_dict() for r in _g.results_log()]))"
    ))
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            allow_errors=True, resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except DeadKernelError as err:
        raise GradingError(str(tr(
            "{path}: the notebook's kernel died while it ran ({error}); run it in Jupyter to see "
            "which cell ends the process (memory, os._exit, a crash), fix that cell and grade "
            "again.", path=path, error=err))) from None
    except CellTimeoutError:
        raise GradingError(str(tr(
            "{path}: a cell ran longer than {timeout} s, so grading stopped; run the notebook in "
            "Jupyter to find the slow or stuck cell.", path=path, timeout=timeout))) from None
    except NoSuchKernel:
        raise GradingError(str(tr(
            "{path}: there is no Jupyter kernel named 'python3' to run it; install one with "
            "`pip install ipykernel`.", path=path))) from None
    for output in nb.cells[-1].get("outputs", []):
        for line in output.get("text", "").splitlines():
            if line.startswith(RESULTS_MARK):
                return json.loads(line[len(RESULTS_MARK):])
    raise GradingError(str(tr("{path}: the notebook did not finish, so no results were "
                              "collected", path=path)))


def grade(path: Path) -> dict[str, list[dict]]:
    """Grade one notebook or every notebook in a folder (not its subfolders: exercises/zh/ is
    graded on its own): {notebook path: [exercise results]}."""
    path = Path(path)
    notebooks = sorted(path.glob("*.ipynb")) if path.is_dir() else [path]
    notebooks = [p for p in notebooks if ".ipynb_checkpoints" not in p.parts]
    if not notebooks:
        raise FileNotFoundError(str(tr("No notebooks found at {path}", path=path)))
    return {str(p): grade_notebook(p) for p in notebooks}


def score_table(report: dict[str, list[dict]], lang: str = "en") -> str:
    """A plain-text table: one row per notebook and exercise, with passed/total checks, in
    `lang`."""
    header = (tr("notebook"), tr("exercise"), tr("score"), tr("status"))
    rows = [tuple(h.in_language(lang) for h in header)]
    for nb, results in report.items():
        for r in results:
            todo = any(c["status"] == "todo" for c in r["checks"])
            status = tr("not implemented") if todo else (tr("pass") if r["passed"] else
                                                         tr("fail"))
            rows.append((Path(nb).name, r["exercise"], f"{r['score']}/{r['total']}",
                         status.in_language(lang)))
        if not results:
            rows.append((Path(nb).name, "-", "0/0", tr("no checks ran").in_language(lang)))
    widths = [max(_width(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(c + " " * (w - _width(c)) for c, w in zip(row, widths)).rstrip()
                     for row in rows)


def _width(text: str) -> int:
    """Columns `text` takes in a terminal: a Chinese character takes two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)
