"""The package's arrows (docs/architecture.md): no import circle, and no room imports one it
must not. Every import counts, the ones inside functions too."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "minimodel"

# room -> rooms it may never import (a room is a top-level module or subpackage of minimodel)
FORBIDDEN = {
    "home": "*",
    "ops": "*",
    "sampling": "*",
    "packing": "*",
    "cli_types": "*",
    "config": {"hub", "tokenizer", "checkpoints", "weights", "reference", "engine", "layers",
               "kernels", "serve", "bench", "train", "grading", "viz"},
    "chat_template": "*",
    "bpe": {"hub", "tokenizer", "checkpoints", "config", "engine", "reference"},
    "checkpoints": {"hub", "tokenizer", "engine", "reference", "serve", "train", "grading"},
    "weights": {"hub", "tokenizer", "engine", "reference", "layers", "serve", "grading"},
    "hub": {"tokenizer", "engine", "reference", "serve", "bench", "train", "grading", "viz"},
    "tokenizer": {"engine", "reference", "serve", "bench", "train", "grading", "viz"},
    "reference": {"engine", "kernels", "serve", "bench", "train", "grading", "viz"},
    "layers": {"engine", "reference", "hub", "tokenizer", "serve", "bench", "train", "grading",
               "viz"},
    "kernels": {"engine", "reference", "layers", "serve", "bench", "train", "grading", "viz"},
    "engine": {"reference", "serve", "bench", "train", "grading", "viz"},
    "serve": {"reference", "bench", "train", "grading", "viz"},
    "train": {"engine", "serve", "bench", "grading", "viz"},
    "viz": {"serve", "bench", "train", "grading"},
    "bench": {"serve", "train", "grading", "viz"},
}
ROOMS = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir()
                                                   if (p / "__init__.py").is_file()}


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    base = PACKAGE.parent / name.replace(".", "/")
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _imports(path: Path, top_level_only: bool) -> set[str]:
    """The minimodel modules a file imports (`from pkg import submodule` is the submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("minimodel")}
        elif isinstance(node, ast.ImportFrom) and node.module and (
                node.module.startswith("minimodel")):
            subs = {f"{node.module}.{a.name}" for a in node.names
                    if _is_module(f"{node.module}.{a.name}")}
            found |= subs if subs and len(subs) == len(node.names) else {node.module} | subs
    return found


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "minimodel"


FILES = sorted(PACKAGE.rglob("*.py"))


def test_every_room_has_its_rule_or_is_a_leaf_of_the_tree():
    unruled = ROOMS - set(FORBIDDEN) - {"__init__", "__main__", "grading", "models"}
    assert not unruled, f"add these rooms to FORBIDDEN and docs/architecture.md: {unruled}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_room_imports_one_it_must_not(path):
    room = _room(_module(path))
    forbidden = FORBIDDEN.get(room, set())
    for target in sorted(_imports(path, top_level_only=False)):
        other = _room(target)
        if other in (room, "minimodel"):
            continue
        assert not (forbidden == "*" or other in forbidden), (
            f"{_module(path)} imports {target}: the {room} room must not import {other} "
            "(docs/architecture.md)")


def test_nothing_but_the_command_line_imports_grading():
    for path in FILES:
        if _room(_module(path)) in ("grading", "__main__", "minimodel"):
            continue
        assert not any(_room(t) == "grading" for t in _imports(path, top_level_only=False)), path


def test_there_is_no_import_circle():
    graph = {_module(p): {t for t in _imports(p, top_level_only=True) if t != _module(p)}
             for p in FILES}
    # a package's __init__ re-exports its modules: importing a submodule does not import back
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph or nxt.startswith(node + "."):
                continue  # a package importing its own modules
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_the_checker_sees_a_circle_and_a_wrong_arrow(tmp_path, monkeypatch):
    """The checks above can fail: a forbidden import and a circle are both found."""
    bad = tmp_path / "minimodel" / "engine"
    bad.mkdir(parents=True)
    (tmp_path / "minimodel" / "__init__.py").write_text("")
    (bad / "__init__.py").write_text("")
    (bad / "a.py").write_text("from minimodel.engine import b\ndef f():\n"
                              "    from minimodel.grading import core\n")
    (bad / "b.py").write_text("import minimodel.engine.a\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "minimodel")
    assert "minimodel.grading" in _imports(bad / "a.py", top_level_only=False)
    assert "minimodel.engine.b" in _imports(bad / "a.py", top_level_only=True)
    with pytest.raises(AssertionError, match="must not import grading"):
        test_no_room_imports_one_it_must_not(bad / "a.py")
    monkeypatch.setattr(sys.modules[__name__], "FILES", sorted((tmp_path / "minimodel").rglob(
        "*.py")))
    with pytest.raises(pytest.fail.Exception, match="import circle"):
        test_there_is_no_import_circle()
