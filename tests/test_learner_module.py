"""learner_module reads a learner's notebook and runs only its definitions; spy_calls counts."""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import pytest
import torch

from minimodel.grading import check
from minimodel.grading.learner import (
    LearnerWarning,
    explain,
    is_learner_function,
    learner_module,
    record_checked,
    spy_calls,
)


def write_notebook(path: Path, cells: list[str]) -> Path:
    nb = {"cells": [{"cell_type": "code", "source": c, "metadata": {}, "outputs": [],
                     "execution_count": None} for c in cells]
          + [{"cell_type": "markdown", "source": "text", "metadata": {}}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_notebook(tmp_path / "ch01_first.ipynb", [
        "import torch\nSCALE = 2\n",
        "def double(x):\n    return SCALE * x\n",
        "raise RuntimeError('a check cell that must not run on import')\n",
        "%timeit double(1)\n!ls\nresult = double(3)\n",
        "class Box:\n    def __init__(self, v):\n        self.v = v\n",
    ])
    write_notebook(tmp_path / "ch02_second.ipynb", [
        "from minimodel.grading.learner import learner_module\nch01 = learner_module('ch01')\n",
        "def quadruple(x):\n    return ch01.double(ch01.double(x))\n",
        "big = torch.zeros(10**12)  # never run: not a definition\n",
    ])
    return tmp_path


def test_loads_definitions_only(folder):
    ch01 = learner_module("ch01")
    assert ch01.double(5) == 10 and ch01.SCALE == 2 and ch01.Box(3).v == 3
    assert not hasattr(ch01, "result")  # an assignment that computes is skipped


def test_nested_modules_and_lookup_beside_the_running_notebook(folder, tmp_path):
    ch02 = learner_module("ch02_second")
    assert ch02.quadruple(1) == 4
    other = tmp_path / "elsewhere"
    other.mkdir()
    os.chdir(other)
    with pytest.raises(FileNotFoundError, match="No notebook ch01"):
        learner_module("ch01")
    assert learner_module("ch02", folder=tmp_path).quadruple(2) == 8


def test_reloads_after_the_notebook_changes(folder):
    assert learner_module("ch01").double(1) == 2
    time.sleep(0.01)
    path = folder / "ch01_first.ipynb"
    write_notebook(path, ["def double(x):\n    return 3 * x\n"])
    os.utime(path, (time.time() + 5, time.time() + 5))
    assert learner_module("ch01").double(1) == 3


def test_syntax_error_names_the_cell(folder):
    write_notebook(folder / "ch03_bad.ipynb", ["x = 1\n", "def f(:\n    pass\n"])
    with pytest.raises(SyntaxError, match="ch03_bad.ipynb, code cell 1"):
        learner_module("ch03")


def test_spy_counts_the_learners_calls_and_restores(folder):
    ch02 = learner_module("ch02")

    def forward(x):
        return ch02.quadruple(x) + local_helper(x) + torch.ones(1).item()

    def local_helper(x):
        return x

    globals()["local_helper"] = local_helper
    try:
        before = ch02.ch01.double
        with spy_calls(forward) as calls:
            assert forward(1) == 6
        assert calls == {"quadruple": 1, "double": 2, "local_helper": 1}
        assert ch02.ch01.double is before
    finally:
        del globals()["local_helper"]


def test_library_functions_are_not_the_learners():
    assert not is_learner_function(torch.nn.functional.silu)
    assert not is_learner_function(json.dumps)
    assert not is_learner_function(learner_module)
    assert is_learner_function(write_notebook)


def test_reveal_cells_are_not_the_learners(folder):
    path = write_notebook(folder / "ch05_reveal.ipynb", [
        "def apply(x):\n    return x + 1\n",
        "def apply(x, y):  # the package's version, shown after the exercise\n    return x\n",
    ])
    nb = json.loads(path.read_text())
    nb["cells"][1]["metadata"]["tags"] = ["reveal"]
    path.write_text(json.dumps(nb))
    assert learner_module("ch05").apply(1) == 2


def test_spy_sees_through_a_decorator(folder):
    ch01 = learner_module("ch01")

    @torch.no_grad()
    def forward(x):
        return ch01.double(x)

    globals()["ch01"] = ch01
    try:
        with spy_calls(forward) as calls:
            forward(2)
        assert calls == {"double": 1}
    finally:
        del globals()["ch01"]


# --- what the learner is told when the loader cannot see their code --------------------------


def test_a_skipped_constant_is_named_with_its_cell_in_the_error(folder):
    write_notebook(folder / "ch03_consts.ipynb", [
        "import torch\nLIMIT = 4\n",
        'NEG_INF = float("-inf")\n',
        "def masked(x, mask):\n    return x.masked_fill(~mask, NEG_INF)\n",
        "def fine(x):\n    return x + LIMIT\n",
    ])
    ch03 = learner_module("ch03")
    assert ch03.fine(1) == 5  # a literal constant is loaded
    with pytest.raises(NameError) as err:
        ch03.masked(torch.zeros(2), torch.tensor([True, False]))
    hint = explain(err.value)
    assert "NEG_INF is set in code cell 1" in hint and "literal" in hint
    assert explain(ValueError("not from a loaded notebook")) == ""

    def capstone(T):  # a later notebook's piece calling the loaded code inside a check
        return ch03.masked(torch.zeros(T, T), torch.ones(T, T, dtype=torch.bool))

    result = check("ch03.causal_mask", capstone)
    errors = [o.message for o in result.outcomes if o.status == "error"]
    assert errors and all("NEG_INF is set in code cell 1" in m for m in errors)


def test_a_name_defined_only_in_the_kernel_says_to_save(folder):
    write_notebook(folder / "ch04_unsaved.ipynb", ["def f(x):\n    return helper(x)\n"])
    ch04 = learner_module("ch04")
    with pytest.raises(NameError) as err:
        ch04.f(1)
    assert "not defined anywhere in the saved ch04_unsaved.ipynb" in explain(err.value)


def _checked_in_kernel(tmp_path, source: str, exercise: str):
    """A function as a notebook kernel holds it (module __main__, source readable), checked."""
    file = tmp_path / f"kernel_{abs(hash(source))}.py"
    file.write_text(source, encoding="utf-8")
    ns = {"__name__": "__main__"}
    exec(compile(source, str(file), "exec"), ns)
    fn = next(v for k, v in ns.items() if callable(v) and not k.startswith("__"))
    record_checked(exercise, fn)


def test_unsaved_edits_in_the_notebooks_kernel_are_reported(folder, tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMODEL_HOME", str(tmp_path / "home"))
    path = folder / "ch01_first.ipynb"
    past = time.time() - 60
    os.utime(path, (past, past))
    # the kernel checked the saved version: nothing to say
    _checked_in_kernel(tmp_path, "def double(x):\n    return SCALE * x\n", "ch01.double")
    with warnings.catch_warnings():
        warnings.simplefilter("error", LearnerWarning)
        learner_module("ch01")
    # the kernel checked an edited version the file does not hold: unsaved edits
    _checked_in_kernel(tmp_path, "def double(x):\n    return x + x\n", "ch01.double")
    with pytest.warns(LearnerWarning, match=r"checked a different `double`.*unsaved edits"):
        learner_module("ch01")
    # saved afterwards: the file is newer than what the kernel checked
    os.utime(path, (time.time() + 5, time.time() + 5))
    with warnings.catch_warnings():
        warnings.simplefilter("error", LearnerWarning)
        learner_module("ch01")


def test_a_checkpoint_newer_than_the_notebook_is_reported(folder):
    path = folder / "ch01_first.ipynb"
    checkpoints = folder / ".ipynb_checkpoints"
    checkpoints.mkdir()
    copy = checkpoints / "ch01_first-checkpoint.ipynb"
    write_notebook(copy, ["def double(x):\n    return 2 * x\n"])
    past = time.time() - 60
    os.utime(path, (past, past))
    with pytest.warns(LearnerWarning, match=r"checkpoint of ch01_first.ipynb .* is newer"):
        learner_module("ch01")
    os.utime(copy, (past - 60, past - 60))
    with warnings.catch_warnings():
        warnings.simplefilter("error", LearnerWarning)
        learner_module("ch01")


def test_a_check_says_when_a_loaded_notebook_changed_after_loading(folder):
    ch01 = learner_module("ch01")
    ns = {"ch01": ch01, "torch": torch}
    exec("def mask(T):\n    ch01.double(1)\n    return torch.ones(T, T).tril().bool()\n", ns)
    assert check("ch03.causal_mask", ns["mask"]).notes == []
    path = folder / "ch01_first.ipynb"
    os.utime(path, (time.time() + 5, time.time() + 5))
    result = check("ch03.causal_mask", ns["mask"])
    assert result.passed  # the notes do not change the score ...
    assert any("ch01_first.ipynb changed on disk after it was loaded" in n for n in result.notes)
    assert "changed on disk" in str(result)  # ... but are shown
