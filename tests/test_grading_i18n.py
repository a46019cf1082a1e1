"""Check messages in two languages (minimodel/grading/i18n.py): every message the checks can
say has its Chinese, with the same fields, in its chapter's table; the language follows
MINIMODEL_LANG or the notebook's folder; results keep both languages.

The mutant tests add the runtime half (tests/conftest.py): every title, message and note of
every result they produce, right code and wrong, has no template without Chinese.
"""

from __future__ import annotations

import ast
import importlib
import shutil
import string
from pathlib import Path

import pytest
import torch

from minimodel.grading import check, exercise
from minimodel.grading.core import _REGISTRY, CheckFailed
from minimodel.grading.i18n import Text, fields, join, language, tr
from minimodel.grading.translation import has_chinese

ROOT = Path(__file__).resolve().parents[1]
GRADING = ROOT / "minimodel" / "grading"
CHAPTERS = [f"ch{n:02d}" for n in range(1, 14)]
SHARED = ["core.py", "learner.py", "common.py", "notebooks.py", "oracles.py"]


def sources(part: str) -> list[Path]:
    """The grading modules whose messages `part`'s table holds ("ch05", or "core")."""
    if part == "core":
        return [GRADING / name for name in SHARED]
    single = GRADING / f"{part}.py"
    return [single] if single.exists() else sorted((GRADING / part).glob("*.py"))


def _is_tr(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id == "tr")
        or (isinstance(node.func, ast.Attribute) and node.func.attr == "tr"))


def _is_exercise(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
        node.func.id == "exercise"


def templates(path: Path) -> list[tuple[str, ast.Call]]:
    """Every message template written in `path`: tr("...") calls and @exercise titles."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if _is_tr(node):
            first = node.args[0] if node.args else None
            assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
                f"{path.name}:{node.lineno}: tr() takes a literal template (the table's key), "
                "not a computed string")
            found.append((first.value, node))
        elif _is_exercise(node) and len(node.args) == 2:
            title = node.args[1]
            assert isinstance(title, ast.Constant), f"{path.name}:{node.lineno}: literal title"
            found.append((title.value, node))
    return found


def chapter_table(part: str) -> dict[str, str]:
    return importlib.import_module(f"minimodel.grading.zh.{part}").MESSAGES


def _spec(template: str) -> list[tuple[str, str, str | None]]:
    return sorted((name, spec or "", conv) for _, name, spec, conv in
                  string.Formatter().parse(template) if name is not None)


@pytest.mark.parametrize("part", [*CHAPTERS, "core"])
def test_every_template_has_its_chinese(part):
    shared = chapter_table("core")
    own = chapter_table(part)
    used = set()
    for path in sources(part):
        for template, node in templates(path):
            used.add(template)
            assert template in own or template in shared, (
                f"{path.name}:{node.lineno}: {template!r} is not in "
                f"minimodel/grading/zh/{part}.py")
            if _is_tr(node) and not any(k.arg is None for k in node.keywords):
                given = {k.arg for k in node.keywords}
                assert given == fields(template), (
                    f"{path.name}:{node.lineno}: tr({template!r}) fills {sorted(given)} but the "
                    f"template has {sorted(fields(template))}")
    unused = set(own) - used
    assert not unused, f"zh/{part}.py has entries no check says: {sorted(unused)}"


@pytest.mark.parametrize("part", [*CHAPTERS, "core"])
def test_each_entry_is_chinese_with_the_same_fields(part):
    for en, zh in chapter_table(part).items():
        assert _spec(en) == _spec(zh), f"{en!r} -> {zh!r}: the fields differ"
        bare = "".join(lit for lit, *_ in string.Formatter().parse(zh))
        words = any(ch.isalpha() for lit, *_ in string.Formatter().parse(en) for ch in lit)
        assert has_chinese(bare) and (not words or any("\u4e00" <= ch <= "\u9fff"
                                                       for ch in bare)), (
            f"{en!r} -> {zh!r} is not Chinese")
        assert zh.count("`") == en.count("`"), f"{zh!r}: code spans differ from the English"


def test_a_template_in_two_tables_reads_the_same():
    seen: dict[str, tuple[str, str]] = {}
    for part in [*CHAPTERS, "core"]:
        for en, zh in chapter_table(part).items():
            if en in seen:
                assert seen[en][1] == zh, f"{en!r}: {seen[en][0]} and {part} translate it apart"
            seen[en] = (part, zh)


def test_messages_are_not_written_past_tr():
    """A CheckFailed, an expect(...) message or a check's note written as a string literal or
    an f-string would have no Chinese."""
    for part in [*CHAPTERS, "core"]:
        for path in sources(part):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                msg = None
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    if node.func.id == "CheckFailed" and node.args:
                        msg = node.args[0]
                    elif node.func.id == "expect" and len(node.args) == 2:
                        msg = node.args[1]
                if isinstance(node, ast.FunctionDef) and any(
                        _is_exercise(d) for d in node.decorator_list):
                    for ret in ast.walk(node):
                        if isinstance(ret, ast.Return) and isinstance(
                                ret.value, (ast.JoinedStr, ast.Constant)) and isinstance(
                                getattr(ret.value, "value", ""), str):
                            raise AssertionError(f"{path.name}:{ret.lineno}: a note as a raw "
                                                 "string; return tr(...)")
                assert not isinstance(msg, (ast.JoinedStr, ast.Constant, ast.BinOp)), (
                    f"{path.name}:{node.lineno}: a message written past tr()")


def test_language_follows_the_setting_then_the_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("MINIMODEL_LANG", raising=False)
    (tmp_path / "zh").mkdir()
    monkeypatch.chdir(tmp_path)
    assert language() == "en"
    monkeypatch.chdir(tmp_path / "zh")
    assert language() == "zh"
    monkeypatch.setenv("MINIMODEL_LANG", "en")
    assert language() == "en"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINIMODEL_LANG", "zh_CN")
    assert language() == "zh"


def test_tr_renders_both_languages_and_composes(monkeypatch):
    monkeypatch.setenv("MINIMODEL_LANG", "en")
    inner = tr("not implemented yet")
    outer = tr("{message}. {hint}", message="x", hint=inner)
    assert outer == "x. not implemented yet" and outer.en == outer
    assert outer.zh == "x。尚未实现" and not outer.missing
    monkeypatch.setenv("MINIMODEL_LANG", "zh")
    assert str(tr("{message}. {hint}", message="x", hint=inner)) == "x。尚未实现"
    unknown = tr("a sentence nobody translated {n}", n=3)
    assert unknown.missing and unknown.zh == "a sentence nobody translated 3"
    assert tr("{message}. {hint}", message="x", hint=unknown).missing
    assert join(", ", [inner, "y"]).zh == "尚未实现, y"


def test_a_result_speaks_the_current_language_and_keeps_both(monkeypatch):
    name = "ch05.top_k_filter"

    def wrong(logits, k):
        return logits.clone()  # keeps everything

    monkeypatch.setenv("MINIMODEL_LANG", "zh")
    result = check(name, wrong)
    assert not result.passed
    assert "有检查未通过" in str(result) and has_chinese(result.outcomes[0].title)
    data, meta = result._repr_mimebundle_()
    assert data["text/plain"] == meta["minimodel"]["check"]["zh"]["text/plain"]
    english = meta["minimodel"]["check"]["en"]["text/plain"]
    assert "some checks failed" in english and not any("\u4e00" <= c <= "\u9fff"
                                                      for c in english)
    monkeypatch.setenv("MINIMODEL_LANG", "en")
    assert str(result) == english  # the same result, shown again in English


def test_an_untranslated_message_is_flagged_missing(monkeypatch):
    name = "test_i18n.raw"

    @exercise(name, "not implemented yet")  # a title that has its Chinese
    def raw(fn):
        raise CheckFailed("an English sentence only")

    try:
        result = check(name, lambda: None)
    finally:
        _REGISTRY.pop(name)
    outcome = result.outcomes[0]
    assert isinstance(outcome.message, Text) and outcome.message.missing
    assert outcome.title.zh == "尚未实现"


def test_a_chinese_exercise_notebook_grades_in_chinese(tmp_path, monkeypatch):
    """`minimodel grade` runs a notebook's kernel in the notebook's folder: one in a zh/ folder
    speaks Chinese, the score table too; the same notebook elsewhere speaks English."""
    from minimodel.grading.notebooks import grade, score_table

    monkeypatch.delenv("MINIMODEL_LANG", raising=False)
    source = next((ROOT / "exercises" / "zh").glob("ch05_*.ipynb"))
    for folder in ("zh", "en"):
        (tmp_path / folder).mkdir()
        shutil.copy(source, tmp_path / folder / source.name)
    zh = grade(tmp_path / "zh" / source.name)
    en = grade(tmp_path / "en" / source.name)
    zh_checks = [c for r in next(iter(zh.values())) for c in r["checks"]]
    en_checks = [c for r in next(iter(en.values())) for c in r["checks"]]
    assert zh_checks and len(zh_checks) == len(en_checks)
    assert all(c["message"] == "尚未实现" and has_chinese(c["title"]) for c in zh_checks)
    assert all(c["message"] == "not implemented yet" for c in en_checks)
    table = score_table(zh, "zh")
    assert table.splitlines()[0].split() == ["笔记本", "练习", "得分", "状态"]
    assert "尚未实现" in table


def test_titles_that_state_a_constant_state_its_value():
    """A title is a literal (its table's key), so chapter 13's titles write out the numbers
    their checks use: they must still be those numbers."""
    from minimodel.grading import exercises
    from minimodel.grading.ch13 import common, rejection, step

    titles = [t for name, ts in exercises().items() if name.startswith("ch13.") for t in ts]
    rate = f"false-alarm rate {common.FALSE_ALARM:g}"
    assert sum(rate in t for t in titles) == 3
    assert sum(f"over {rejection.TRIALS} steps" in t for t in titles) == 1
    assert sum(f"temperature {step.TEMPERATURE}" in t and f"over {step.SAMPLED_TRIALS} runs" in t
               and rate in t for t in titles) == 1


def test_an_error_the_graders_raise_keeps_both_languages(monkeypatch):
    """A stand-in model's ValueError (chapter 13), raised while a check runs, is reported in
    both languages like any message."""
    from minimodel.grading.ch13.common import TableLM

    name = "test_i18n.raises"

    @exercise(name, "not implemented yet")
    def extends_nothing(fn):
        TableLM(torch.zeros(3, 3, 3)).extend([])

    monkeypatch.setenv("MINIMODEL_LANG", "en")
    try:
        result = check(name, lambda: None)
    finally:
        _REGISTRY.pop(name)
    message = result.outcomes[0].message
    assert "extend needs at least one token id" in message.en and not message.missing
    assert "extend 至少需要一个 token ID" in message.zh
