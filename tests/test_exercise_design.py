"""Exercises ask for what a chapter taught, not for code it showed; each states goal and difficulty.

- A solution's code (per function, normalised AST: no docstring, no annotations, any name) must
  not equal a definition that a chapter cell shows, prints, or quotes in its text.
- Each exercise's heading gives a difficulty (★ to ★★★) and a one-line **Goal:**; at least a
  third of the exercises are ★★ or ★★★.
- Capstones load the learner's own earlier notebooks with `learner_module`.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import textwrap
from pathlib import Path

import pytest

from minimodel.grading.notebooks import BEGIN

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
CHECK = re.compile(r"""check\(\s*["'](ch\d\d\.\w+)["']""")
STARS = re.compile(r"(?<!★)(★{1,3})(?!★)")


def _src(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _cells(nb: Path) -> list[dict]:
    return json.loads(nb.read_text(encoding="utf-8"))["cells"]


class _Normalise(ast.NodeTransformer):
    """Drop what does not change behaviour: docstrings, annotations, the names of the function,
    its arguments and its local variables (renamed in order of first appearance)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def visit_Name(self, node):
        return ast.Name(id=self.names.get(node.id, node.id), ctx=node.ctx)

    def visit_arg(self, node):
        return ast.arg(arg=self.names.get(node.arg, node.arg))

    def visit_FunctionDef(self, node):
        node = copy.deepcopy(node)
        local = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
        local += [a.arg for a in (node.args.vararg, node.args.kwarg) if a is not None]
        local += [n.id for n in ast.walk(node) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, ast.Store)]
        for name in local:
            self.names.setdefault(name, f"v{len(self.names)}")
        node.name = "_"
        node.returns = None
        node.decorator_list = []
        for a in node.args.args + node.args.kwonlyargs + node.args.posonlyargs:
            a.annotation = None
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]
        node.body = [self.visit(n) for n in body] or [ast.Pass()]
        node.args = self.visit(node.args)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node):
        if node.value is None:
            return None
        return ast.Assign(targets=[node.target], value=node.value, lineno=0)


def normalised(fn: ast.AST) -> str:
    return ast.dump(_Normalise().visit(fn), annotate_fields=False)


def functions_in(text: str) -> list[ast.AST]:
    """Every function definition found in a piece of text: whole, or from each `def` onwards."""
    text = textwrap.dedent(text)
    found = []
    starts = [m.start() for m in re.finditer(r"^[ \t]*(?:async )?def ", text, re.M)]
    for chunk in [text] + [text[s:] for s in starts]:
        lines = chunk.splitlines()
        for end in range(len(lines), 0, -1):  # the longest prefix that parses
            try:
                tree = ast.parse(textwrap.dedent("\n".join(lines[:end])))
            except SyntaxError:
                continue
            found += [n for n in ast.walk(tree)
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            break
    return found


def shown_in_chapters() -> dict[str, str]:
    """normalised definition -> where a chapter shows it (cell source, output or markdown)."""
    shown: dict[str, str] = {}
    for nb in CHAPTERS:
        for i, cell in enumerate(_cells(nb)):
            texts = [_src(cell)]
            if cell["cell_type"] == "markdown":
                texts = re.findall(r"```(?:python)?\n(.*?)```", _src(cell), re.S)
            for out in cell.get("outputs", []):
                texts.append("".join(out.get("text", "")))
                texts.append("".join(out.get("data", {}).get("text/plain", "")))
            for text in texts:
                if "def " in text:
                    for fn in functions_in(text):
                        shown.setdefault(normalised(fn), f"{nb.name} cell {i} ({fn.name})")
    return shown


def solution_functions() -> list[tuple[str, str, ast.AST]]:
    """(notebook, function name, node) for every function holding a solution region."""
    out = []
    for nb in SOLUTIONS:
        for cell in _cells(nb):
            src = _src(cell)
            if cell["cell_type"] != "code" or BEGIN not in src:
                continue
            lines = src.splitlines()
            marks = {i + 1 for i, ln in enumerate(lines) if BEGIN in ln}
            for node in ast.walk(ast.parse(src)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                        node.lineno <= m <= node.end_lineno for m in marks):
                    out.append((nb.name, node.name, node))
    return out


SHOWN = shown_in_chapters()


@pytest.mark.parametrize("nb, name, node", solution_functions(),
                         ids=lambda x: x if isinstance(x, str) else "")
def test_solution_is_not_shown_in_a_chapter(nb, name, node):
    where = SHOWN.get(normalised(node))
    assert where is None, (
        f"{nb}: the solution of {name} is the definition {where} shows: the chapter gives the "
        "answer away. Teach the idea there and reveal the code after the exercise."
    )


def test_normalisation_sees_through_names_docstrings_and_annotations():
    b = functions_in("def g(y):\n    z = y + 1\n    return z\n")[0]
    c = functions_in("def g(y):\n    z = y + 2\n    return z\n")[0]
    a = functions_in('def f(x: int) -> int:\n    """doc"""\n'
                     '    t = x + 1  # one\n    return t\n')[0]
    assert normalised(a) == normalised(b) != normalised(c)
    printed = "Some text first\n    def h(a):\n        b = a + 1\n        return b\nmore text"
    assert normalised(b) in {normalised(f) for f in functions_in(printed)}


def exercise_headings() -> list[tuple[str, str, str]]:
    """(notebook, exercise, the markdown cell before its first check) for each exercise."""
    out, seen = [], set()
    for nb in SOLUTIONS:
        last_md = ""
        for cell in _cells(nb):
            if cell["cell_type"] == "markdown":
                last_md = _src(cell)
                continue
            for name in CHECK.findall(_src(cell)):
                if name not in seen:
                    seen.add(name)
                    out.append((nb.name, name, last_md))
    return out


HEADINGS = exercise_headings()


@pytest.mark.parametrize("nb, name, markdown", HEADINGS, ids=[h[1] for h in HEADINGS])
def test_exercise_states_goal_and_difficulty(nb, name, markdown):
    heading = next((ln for ln in markdown.splitlines() if ln.startswith("#")), "")
    assert STARS.search(heading), f"{nb}: the heading of {name} gives no difficulty (★ to ★★★)"
    goals = [ln for ln in markdown.splitlines() if ln.startswith("**Goal:**")]
    assert len(goals) == 1 and len(goals[0]) > len("**Goal:**") + 10, (
        f"{nb}: {name} needs one line '**Goal:** ...' saying what it achieves")


def test_a_third_of_the_exercises_are_design_not_typing():
    stars = [len(STARS.search(next((ln for ln in md.splitlines() if ln.startswith("#")), ""))
                 .group(1)) for _, _, md in HEADINGS
             if STARS.search(next((ln for ln in md.splitlines() if ln.startswith("#")), ""))]
    assert stars and sum(s >= 2 for s in stars) * 3 >= len(HEADINGS), stars


def test_every_registered_exercise_is_in_a_solution_notebook():
    from minimodel.grading import exercises

    assert set(exercises()) == {name for _, name, _ in HEADINGS}


# What a notebook may take from the graders: the check itself, the loader, and the harness a
# capstone builds on. Anything else in minimodel/grading/chNN/ is an oracle (the grader's own
# answer, with the exercise's signature): a notebook that imports it hands the answer out.
NOTEBOOK_API = {"minimodel.grading.ch08": {"EngineState"}}


def grader_imports() -> list[tuple[str, int, str, str]]:
    out = []
    for nb in CHAPTERS + SOLUTIONS + sorted((ROOT / "exercises").glob("*.ipynb")):
        for i, cell in enumerate(_cells(nb)):
            if cell["cell_type"] != "code":
                continue
            src = "\n".join("pass" if ln.lstrip().startswith(("%", "!")) else ln
                            for ln in _src(cell).splitlines())
            for node in ast.walk(ast.parse(src)):
                if isinstance(node, ast.ImportFrom) and re.fullmatch(
                        r"minimodel\.grading\.ch\d\d(\.\w+)?", node.module or ""):
                    out += [(f"{nb.parent.name}/{nb.name}", i, node.module, a.name)
                            for a in node.names]
                elif isinstance(node, ast.Import):
                    out += [(f"{nb.parent.name}/{nb.name}", i, a.name, "*") for a in node.names
                            if re.fullmatch(r"minimodel\.grading\.ch\d\d(\.\w+)?", a.name)]
    return out


def test_no_notebook_imports_a_graders_oracle():
    bad = [f"{nb} cell {i}: {name} from {mod}" for nb, i, mod, name in grader_imports()
           if name not in NOTEBOOK_API.get(mod, set())]
    assert not bad, ("these cells import a grader's own functions, which answer an exercise; "
                     "show the behaviour through the package's public API instead: "
                     + "; ".join(bad))


def test_every_chapter_after_the_tour_has_an_exercise_notebook():
    numbers = [nb.name[:2] for nb in CHAPTERS if nb.name[:2] != "00"]
    missing = [n for n in numbers if not list((ROOT / "solutions").glob(f"ch{n}_*.ipynb"))
               or not list((ROOT / "exercises").glob(f"ch{n}_*.ipynb"))]
    assert numbers and not missing, f"chapters without an exercise notebook: {missing}"
