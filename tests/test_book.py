"""The book's sources, checked without building it: glossary anchors, chapter links, the toc.

The browser test (tests/test_browser.py) checks the built book as a reader sees it.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
GLOSSARY = ROOT / "book" / "glossary.md"
LINK = re.compile(r"glossary\.md#([A-Za-z0-9_-]+)")
ANCHOR = re.compile(r"\]\{#([A-Za-z0-9_-]+)\}")


def _texts(path: Path) -> list[str]:
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text(encoding="utf-8"))
        return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
    return [path.read_text(encoding="utf-8")]


def _glossary_links() -> dict[str, set[str]]:
    """anchor -> files that link to it, over the course's notebooks and pages."""
    files = [*ROOT.glob("chapters/*.ipynb"), *ROOT.glob("solutions/*.ipynb"),
             *ROOT.glob("exercises/*.ipynb"), *ROOT.glob("docs/*.md"), *ROOT.glob("book/*.md")]
    links: dict[str, set[str]] = {}
    for path in files:
        for text in _texts(path):
            for anchor in LINK.findall(text):
                links.setdefault(anchor, set()).add(path.relative_to(ROOT).as_posix())
    return links


def _glossary_anchors() -> list[str]:
    return ANCHOR.findall(GLOSSARY.read_text(encoding="utf-8"))


def test_every_glossary_link_has_its_term():
    anchors = set(_glossary_anchors())
    missing = {a: sorted(f) for a, f in _glossary_links().items() if a not in anchors}
    assert not missing, (
        "these glossary.md#anchors are linked but book/glossary.md has no such term; add a row "
        "like `| [term]{#anchor} | 中文 | one-line meaning | {chn}`NN` |` (or an alias "
        f"`[]{{#anchor}}` on an existing row): {missing}")


def test_glossary_anchors_are_unique_and_lower_case():
    anchors = _glossary_anchors()
    dupes = sorted({a for a in anchors if anchors.count(a) > 1})
    assert not dupes, f"glossary anchors defined twice: {dupes}"
    bad = [a for a in anchors if a != a.lower() or "_" in a]
    assert not bad, f"glossary anchors should be lower-case-with-hyphens: {bad}"


def test_every_glossary_row_names_english_chinese_and_a_chapter():
    rows = [line for line in GLOSSARY.read_text(encoding="utf-8").splitlines()
            if ANCHOR.search(line)]
    assert len(rows) >= 60, f"the glossary has only {len(rows)} terms"
    for row in rows:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        assert len(cells) == 4, f"a glossary row needs 4 columns: {row}"
        english, chinese, meaning, chapter = cells
        assert re.search(r"[\u4e00-\u9fff]", chinese) or chinese.startswith(("token", "logits")), (
            f"no 中文 for {english}")
        assert len(meaning) > 20, f"no meaning for {english}"
        assert re.fullmatch(r"\{chn?\}`(0\d|1[0-3])`", chapter), (
            f"{english}: chapter cell is {chapter!r}")


def test_toc_lists_the_chapters_present(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import book_toc
    finally:
        sys.path.pop(0)
    (tmp_path / "chapters").mkdir()
    for name in ("03_attention.ipynb", "00_tour.ipynb", "notes.ipynb"):
        (tmp_path / "chapters" / name).write_text(json.dumps({"cells": []}))
    (tmp_path / "chapters" / "05_sampling.ipynb").write_text("{ half written")
    (tmp_path / "chapters" / "zh").mkdir()
    (tmp_path / "chapters" / "zh" / "00_tour.ipynb").write_text(json.dumps({"cells": []}))
    toc = yaml.safe_load(book_toc.toc_yaml(tmp_path))
    assert toc["root"] == "book/intro"
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    assert files == ["book/setup", "chapters/00_tour", "chapters/03_attention",
                     "chapters/zh/00_tour", "book/bard", "book/benchmarks", "book/glossary"]
    assert [part["caption"] for part in toc["parts"]][2] == "中文版 · Chinese edition"
    # with no chapters at all the book still has its pages
    (tmp_path / "empty").mkdir()
    toc = yaml.safe_load(book_toc.toc_yaml(tmp_path / "empty"))
    assert [c["file"] for part in toc["parts"] for c in part["chapters"]] == [
        "book/setup", "book/bard", "book/benchmarks", "book/glossary"]


def test_book_pages_exist():
    for page in ("intro", "setup", "glossary", "bard", "benchmarks"):
        assert (ROOT / "book" / f"{page}.md").is_file(), f"book/{page}.md is missing"
    config = yaml.safe_load((ROOT / "book" / "_config.yml").read_text(encoding="utf-8"))
    assert config["execute"]["execute_notebooks"] == "off", "the book must not run notebooks"



def test_no_link_is_left_as_a_template_placeholder():
    """`[KV cache]({G}kv-cache)` renders as a dead link; it should be `../book/glossary.md#...`."""
    bad = {}
    for path in [*ROOT.glob("chapters/*.ipynb"), *ROOT.glob("solutions/*.ipynb")]:
        for text in _texts(path):
            for target in re.findall(r"\]\((\{[^)]*)\)", text):
                bad.setdefault(path.relative_to(ROOT).as_posix(), []).append(target)
    assert not bad, f"links whose target is an unfilled placeholder: {bad}"
