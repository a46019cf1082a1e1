"""The Chinese edition (minimodel/grading/translation.py): every Chinese notebook is its English
notebook with only the markdown translated, no translation is stale or missing, no markdown cell
is left in English, and the builder says so when one is."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from minimodel.__main__ import main as cli
from minimodel.grading.translation import (
    LANG,
    Report,
    broken_emphasis,
    build,
    fingerprint,
    has_chinese,
    join_wrapped_lines,
    read_translations,
    skeleton,
    speak_chinese,
    translate_notebook,
    translation_file,
)

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("chapters", "solutions", "exercises")
ZH_NOTEBOOKS = sorted(p for f in FOLDERS for p in (ROOT / f / LANG).glob("*.ipynb"))


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def test_the_chinese_edition_is_built_from_its_translations():
    changed, reports = build(ROOT, check_only=True)
    assert not changed, ("run `python -m minimodel translate`: out of date: "
                         f"{[str(p.relative_to(ROOT)) for p in changed]}")
    problems = [line for r in reports for line in r.problems()]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("zh", ZH_NOTEBOOKS, ids=[f"{p.parent.parent.name}/{p.name}"
                                                   for p in ZH_NOTEBOOKS])
def test_a_chinese_notebook_differs_from_the_english_one_in_its_markdown_only(zh):
    en = zh.parent.parent / zh.name
    assert en.is_file(), f"{zh.relative_to(ROOT)} has no English notebook {en.relative_to(ROOT)}"
    ours, theirs = _cells(zh), _cells(en)
    assert [(c["id"], c["cell_type"]) for c in ours] == [(c["id"], c["cell_type"])
                                                         for c in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert a.get("metadata") == b.get("metadata"), f"cell {a['id']}: tags or metadata differ"
        if a["cell_type"] == "markdown":
            assert has_chinese(_source(a)), f"cell {a['id']} is still in English"
            continue
        assert _source(a) == _source(b), f"cell {a['id']}: code differs"
        english = copy.deepcopy(b.get("outputs"))
        for output in english or []:
            speak_chinese(output)  # a check result shows its Chinese rendering, stored with it
        assert a.get("outputs") == english, f"cell {a['id']}: stored outputs differ"
        for output in a.get("outputs", []):
            shown = "".join(output.get("data", {}).get("text/plain", []))
            assert "checks passed" not in shown and "checks failed" not in shown, (
                f"cell {a['id']}: a check result in English: run the English notebook again "
                "(scripts/execute_notebook.py) so its output keeps the Chinese too")
        assert a.get("execution_count") == b.get("execution_count")


def test_chinese_is_told_from_english():
    assert has_chinese("KV 缓存（KV cache）让解码每步只算一个新 token 的 `q, k, v`。")
    assert not has_chinese("The KV cache keeps every past token's keys and values.")
    assert not has_chinese("The cache, 缓存, keeps every past token's keys and values for later.")
    assert has_chinese("$$\\mathrm{softmax}(x)_i = e^{x_i} / \\sum_j e^{x_j}$$")  # nothing to say
    assert has_chinese("见[术语表](../book/glossary.md#kv-cache-and-a-long-english-anchor)。")


def test_bold_that_would_show_its_asterisks_is_found():
    # CommonMark: a closing ** after punctuation must be followed by a space or punctuation,
    # an opening ** before punctuation preceded by one; full-width punctuation counts
    assert broken_emphasis("**注意，**后面") == ["**注意，**"]
    assert broken_emphasis("见**（粗体）**和") == ["**（粗体）**"]
    assert broken_emphasis("*进程序号（rank）*之后") == ["*进程序号（rank）*"]
    for fine in ("**注意**，后面", "（**粗体**）", "**练习**：", "a **bold** word",
                 "**注意：** 后面", "，**键**（key）", "`**a，**b`", "$a*b*c$ 中"):
        assert broken_emphasis(fine) == [], fine


def test_a_line_break_inside_chinese_text_is_joined_without_a_space():
    text = ("## 1. 标题\n正文第一行，\n接着第二行。\n\n- 列表项很长，\n  续行。\n- 第二项\n\n"
            "```\n代码\n代码\n```\n用 PyTorch\n写。\n| 表 | 格 |\n| 中 | 文 |\n$$\n中\n文\n$$")
    assert join_wrapped_lines(text) == (
        "## 1. 标题\n正文第一行，接着第二行。\n\n- 列表项很长，续行。\n- 第二项\n\n"
        "```\n代码\n代码\n```\n用 PyTorch\n写。\n| 表 | 格 |\n| 中 | 文 |\n$$\n中\n文\n$$")


def _course(tmp_path: Path) -> Path:
    """A course folder with one chapter and one solution notebook of three cells each."""
    root = tmp_path / "course"

    def notebook(folder: str, name: str, code: str) -> None:
        cells = [
            {"cell_type": "markdown", "id": "m1", "metadata": {},
             "source": ["# 01 · Tokens\n", "\n", "See the [glossary](../book/glossary.md#token)."]},
            {"cell_type": "code", "id": "k1", "metadata": {"tags": ["keep"]},
             "execution_count": 1, "source": [code],
             "outputs": [{"output_type": "stream", "name": "stdout", "text": ["3\n"]}]},
            {"cell_type": "markdown", "id": "m2", "metadata": {}, "source": ["Two more words."]},
        ]
        nb = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
        path = root / folder / name
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(nb, indent=1) + "\n", encoding="utf-8")

    notebook("chapters", "01_tokens.ipynb", "print(1 + 2)")
    notebook("solutions", "ch01_tokens.ipynb", "def f():\n    ### BEGIN SOLUTION\n"
             "    return 3\n    ### END SOLUTION\n")
    return root


def _translate(root: Path, notebook: str, blocks: dict[str, str]) -> Path:
    """Write the translation file of root/notebook with these blocks (by cell id)."""
    nb = root / notebook
    path = translation_file(root, nb)
    text = skeleton(nb)
    for cid, zh in blocks.items():
        src = next(_source(c) for c in _cells(nb) if c["id"] == cid)
        text = text.replace(src, zh)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_the_builder_replaces_the_markdown_and_keeps_the_rest(tmp_path):
    root = _course(tmp_path)
    _translate(root, "chapters/01_tokens.ipynb",
               {"m1": "# 01 · 词元\n\n参见[术语表](../book/glossary.md#token)。",
                "m2": "再说两个词。"})
    changed, reports = build(root)
    zh = root / "chapters" / LANG / "01_tokens.ipynb"
    assert changed == [zh] and all(r.ok for r in reports)
    cells, en = _cells(zh), _cells(root / "chapters" / "01_tokens.ipynb")
    assert _source(cells[0]) == "# 01 · 词元\n\n参见[术语表](../../book/glossary.md#token)。"
    assert cells[1] == en[1]  # the code cell, its tags and outputs, untouched
    assert _source(cells[2]) == "再说两个词。"
    assert build(root, check_only=True) == ([], reports)
    # the solutions have no translation file yet: no Chinese solutions, no Chinese exercises
    assert not (root / "solutions" / LANG).exists() and not (root / "exercises" / LANG).exists()


def test_stale_missing_english_and_unknown_blocks_are_named(tmp_path):
    root = _course(tmp_path)
    path = _translate(root, "chapters/01_tokens.ipynb", {"m1": "# 01 · 词元\n\n参见术语表。"})
    # m2 is still the English skeleton text
    _, (report,) = build(root, check_only=True)
    assert report.english == ["m2"] and not (report.stale or report.missing or report.unknown)
    # the English cell m1 changes after it was translated: stale, and the English is shown
    nb_path = root / "chapters" / "01_tokens.ipynb"
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    nb["cells"][0]["source"] = ["# 01 · Tokens and ids\n"]
    nb_path.write_text(json.dumps(nb), encoding="utf-8")
    path.write_text(path.read_text(encoding="utf-8").replace(
        "<!-- cell m2 ", "<!-- cell gone · en 000000000000 -->\n多余的一块。\n\n<!-- cell m2 "),
        encoding="utf-8")
    _, (report,) = build(root)
    assert report.stale == ["m1"] and report.unknown == ["gone"] and not report.ok
    assert _source(_cells(root / "chapters" / LANG / "01_tokens.ipynb")[0]) == (
        "# 01 · Tokens and ids\n")
    assert any("stale" in line and "m1" in line for line in report.problems())
    # a block removed from the file: missing
    text = path.read_text(encoding="utf-8")
    path.write_text(text[:text.index("<!-- cell m2 ")], encoding="utf-8")
    _, (report,) = build(root, check_only=True)
    assert report.missing == ["m2"]


def test_chinese_exercises_are_made_from_the_chinese_solutions(tmp_path):
    root = _course(tmp_path)
    _translate(root, "solutions/ch01_tokens.ipynb",
               {"m1": "# 01 · 词元\n\n参见术语表。", "m2": "再说两个词。"})
    changed, _ = build(root)
    exercise = root / "exercises" / LANG / "ch01_tokens.ipynb"
    assert exercise in changed and root / "solutions" / LANG / "ch01_tokens.ipynb" in changed
    cells = _cells(exercise)
    assert _source(cells[2]) == "再说两个词。"
    assert "return 3" not in _source(cells[1])  # the solution is stripped, as in exercises/
    # a translation file that goes away takes its Chinese notebook with it
    translation_file(root, root / "solutions" / "ch01_tokens.ipynb").unlink()
    changed, _ = build(root)
    assert root / "solutions" / LANG / "ch01_tokens.ipynb" in changed
    assert not (root / "solutions" / LANG / "ch01_tokens.ipynb").exists()


def test_a_cell_translated_twice_is_an_error(tmp_path):
    root = _course(tmp_path)
    path = _translate(root, "chapters/01_tokens.ipynb", {"m1": "# 一", "m2": "二"})
    en = _source(_cells(root / "chapters" / "01_tokens.ipynb")[2])
    marker = f"<!-- cell m2 · en {fingerprint(en)} -->"
    path.write_text(path.read_text(encoding="utf-8") + f"\n{marker}\n又一遍。\n", encoding="utf-8")
    with pytest.raises(ValueError, match="m2 is translated twice"):
        read_translations(path)


def test_the_command_checks_builds_and_starts_files(tmp_path, capsys):
    root = _course(tmp_path)
    nb = root / "chapters" / "01_tokens.ipynb"
    assert cli(["translate", "--root", str(root), "--skeleton", str(nb)]) == 0
    assert translation_file(root, nb).is_file()
    assert cli(["translate", "--root", str(root), "--skeleton", str(nb)]) == 2
    assert "exists already" in capsys.readouterr().err
    assert cli(["translate", "--root", str(root), "--check"]) == 1  # the skeleton is English
    assert "still in English: m1, m2" in capsys.readouterr().out
    shutil.rmtree(root / "translations")
    _translate(root, "chapters/01_tokens.ipynb", {"m1": "# 01 · 词元", "m2": "再说两个词。"})
    assert cli(["translate", "--root", str(root)]) == 0
    assert cli(["translate", "--root", str(root), "--check"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert cli(["translate", "--root", str(tmp_path)]) == 2
    assert "no chapters/ folder" in capsys.readouterr().err


def test_grading_a_folder_leaves_its_chinese_subfolder_to_itself(tmp_path, monkeypatch):
    from minimodel.grading import notebooks

    graded = []
    monkeypatch.setattr(notebooks, "grade_notebook", lambda p: graded.append(p.name) or [])
    for path in ("ch01_a.ipynb", "ch02_b.ipynb", f"{LANG}/ch01_a.ipynb"):
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text("{}")
    assert list(notebooks.grade(tmp_path)) == [str(tmp_path / "ch01_a.ipynb"),
                                               str(tmp_path / "ch02_b.ipynb")]
    assert list(notebooks.grade(tmp_path / LANG)) == [str(tmp_path / LANG / "ch01_a.ipynb")]


def test_a_check_result_shows_its_chinese_in_the_chinese_notebook(monkeypatch):
    """A stored check result keeps both renderings in its metadata; the builder shows the
    Chinese one and leaves every other output alone."""
    from IPython.core.interactiveshell import InteractiveShell

    from minimodel.grading.core import CheckResult, Outcome
    from minimodel.grading.i18n import tr

    monkeypatch.setenv("MINIMODEL_LANG", "en")
    result = CheckResult("ch05.top_k_filter", [Outcome(tr("not implemented yet"), "todo")])
    data, metadata = InteractiveShell.instance().display_formatter.format(result)
    assert "not implemented yet" in data["text/plain"]
    check_output = {"output_type": "execute_result", "execution_count": 1, "metadata": metadata,
                    "data": {k: v.splitlines(keepends=True) for k, v in data.items()}}
    other = {"output_type": "stream", "name": "stdout", "text": ["not implemented yet\n"]}
    nb = {"cells": [{"cell_type": "code", "id": "c", "metadata": {}, "execution_count": 1,
                     "source": "check(...)", "outputs": [check_output, other]}]}
    out = translate_notebook(nb, {}, Report("x"))
    shown = out["cells"][0]["outputs"]
    assert "".join(shown[0]["data"]["text/plain"]) == "ch05.top_k_filter：尚未实现\n  … 尚未实现"
    assert "尚未实现" in "".join(shown[0]["data"]["text/html"])
    assert shown[1] == other and nb["cells"][0]["outputs"][0] == check_output
