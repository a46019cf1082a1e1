"""Notebooks show the package's real code, and exercises/ is generated from solutions/."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from minimodel.grading.notebooks import exercise_notebook, strip_solution, sync_exercises

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(
    p for folder in ("chapters", "solutions", "exercises") for p in (ROOT / folder).glob("*.ipynb")
)
HEADER = re.compile(r"^#\s*(minimodel/[\w/]+\.py)\s*$")


def _source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def code_cells_showing_package():
    for nb in NOTEBOOKS:
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        for i, cell in enumerate(cells):
            if cell["cell_type"] != "code":
                continue
            src = _source(cell)
            m = HEADER.match(src.splitlines()[0] if src else "")
            if m:
                yield pytest.param(nb, i, m.group(1), src, id=f"{nb.parent.name}/{nb.name}#{i}")


def _definitions(tree: ast.Module) -> dict[str, ast.AST]:
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    out[t.id] = node
    return out


@pytest.mark.parametrize("nb, index, module, source", list(code_cells_showing_package()))
def test_cell_is_identical_to_module(nb, index, module, source):
    module_path = ROOT / module
    assert module_path.is_file(), f"{nb.name} cell {index} names {module}, which does not exist"
    ours = _definitions(ast.parse(source))
    theirs = _definitions(ast.parse(module_path.read_text(encoding="utf-8")))
    assert ours, f"{nb.name} cell {index} shows {module} but defines nothing"
    for name, node in ours.items():
        assert name in theirs, f"{nb.name} cell {index}: {name} is not defined in {module}"
        assert ast.dump(node) == ast.dump(theirs[name]), (
            f"{nb.name} cell {index}: {name} differs from {module}; copy the module's code "
            "into the cell (the package is the source of truth)"
        )


def test_exercises_are_generated_from_solutions():
    stale = sync_exercises(ROOT / "solutions", ROOT / "exercises", check_only=True)
    assert not stale, f"run `python -m minimodel exercises`: out of date: {stale}"


def test_every_solution_notebook_has_an_exercise_twin():
    solutions = {p.name for p in (ROOT / "solutions").glob("*.ipynb")}
    exercises = {p.name for p in (ROOT / "exercises").glob("*.ipynb")}
    assert solutions == exercises


def test_strip_solution_keeps_indent_and_code_around():
    src = ("def f(x):\n    y = 1\n    ### BEGIN SOLUTION\n    return x + y\n"
           "    ### END SOLUTION\n\nprint(f)\n")
    out = strip_solution(src)
    stub = '    raise NotImplementedError("your code here")\n'
    assert out == "def f(x):\n    y = 1\n" + stub + "\nprint(f)\n"
    two = src + "def g():\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION\n"
    assert strip_solution(two).count("NotImplementedError") == 2
    with pytest.raises(ValueError, match="unbalanced"):
        strip_solution("### BEGIN SOLUTION\nx = 1\n")


def test_exercise_notebook_clears_outputs():
    nb = {"cells": [{"cell_type": "code", "source": "### BEGIN SOLUTION\nx=1\n### END SOLUTION",
                     "outputs": [{"output_type": "stream", "text": "hi"}],
                     "execution_count": 3, "metadata": {}}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    nb["cells"][0]["metadata"]["execution"] = {"iopub.execute_input": "2026-12-01T14:07:28Z"}
    out = exercise_notebook(nb)
    assert out["cells"][0]["outputs"] == [] and out["cells"][0]["execution_count"] is None
    assert out["cells"][0]["metadata"] == {}  # re-running a solution leaves its exercise as is
    assert nb["cells"][0]["outputs"]  # the solution is left untouched


def test_reveal_cells_stay_in_the_solution():
    cell = {"cell_type": "code", "source": "# minimodel/ops.py\n", "outputs": [],
            "execution_count": 1, "metadata": {"tags": ["reveal"]}}
    keep = {"cell_type": "markdown", "source": "text", "metadata": {}}
    nb = {"cells": [keep, cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    assert exercise_notebook(nb)["cells"] == [keep]
    assert len(nb["cells"]) == 2
