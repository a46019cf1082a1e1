"""The Chinese edition: chapters/zh/, solutions/zh/ and exercises/zh/, built from the English
notebooks and one translation file per notebook (translations/zh/<folder>/<notebook>.md).

A Chinese notebook is its English notebook with only the markdown replaced: every code cell, its
tags and its stored outputs stay the same, so the two editions cannot drift apart and nbval need
not run both. exercises/zh/ is generated from solutions/zh/ exactly as exercises/ is from
solutions/ (`grading/notebooks.py`).

A translation file is plain markdown, one block per markdown cell, each opened by a marker that
names the cell and fingerprints the English text it translates:

    <!-- cell c01 · en 3f2a9b1c0d4e -->
    第一段……

When an English cell changes, its fingerprint no longer matches: the translation is stale, the
Chinese notebook shows the English cell until it is translated again, and the tests say which
cells (`python -m minimodel translate --check`). `--skeleton` writes a file for a notebook that
has none yet, every block holding the English text to translate.

Links: the Chinese notebooks sit one folder deeper, so a relative link `../book/x.md` is written
`../../book/x.md` (translators copy links as they are in the English text).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from minimodel.grading.notebooks import sync_exercises

LANG = "zh"
FOLDERS = ("chapters", "solutions")  # exercises/zh/ is generated from solutions/zh/
MARKER = re.compile(r"^<!-- cell (\S+) · en ([0-9a-f]{12}) -->[ \t]*$", re.MULTILINE)
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
RELATIVE_LINK = re.compile(r"(\]\(|src=\")\.\./")


# CommonMark's flanking rule: `**粗体，**之后` does not close (punctuation just inside the
# asterisks, a letter just outside), and neither does `之前**（粗体）**` open; Chinese text meets
# this often, since its punctuation is full-width. Such a span shows its asterisks.
_CODE_AND_MATH = re.compile(r"```.*?```|`[^`]*`|\$\$.*?\$\$|\$[^$\n]*\$", re.S)
_EMPHASIS = re.compile(r"(?<![*\\])(\*\*|\*)(?!\s)(?!\*)(.+?)(?<![\s*\\])\1(?!\*)")


def _punct(ch: str) -> bool:
    return bool(ch) and unicodedata.category(ch).startswith("P")


def _word(ch: str) -> bool:
    return bool(ch) and not ch.isspace() and not _punct(ch)


def broken_emphasis(text: str) -> list[str]:
    """The bold or italic spans that will show their asterisks (see above)."""
    text = _CODE_AND_MATH.sub(lambda m: " " * len(m.group(0)), text)
    found = []
    for m in _EMPHASIS.finditer(text):
        inner = m.group(2)
        before = text[m.start() - 1] if m.start() else ""
        after = text[m.end()] if m.end() < len(text) else ""
        if (_punct(inner[0]) and _word(before)) or (_punct(inner[-1]) and _word(after)):
            found.append(m.group(0))
    return found


def fingerprint(source: str) -> str:
    """The first 12 hex digits of the sha256 of a cell's English text."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:12]


def cell_source(cell: dict) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def has_chinese(text: str) -> bool:
    """Whether the text is written in Chinese: at least one CJK character per 20 Latin letters
    of its prose (code, math, link targets and HTML tags left out; names such as PyTorch stay
    in Latin letters in Chinese text, whole English sentences do not)."""
    prose = re.sub(r"```.*?```|`[^`]*`|\$\$.*?\$\$|\$[^$]*\$|\]\([^)]*\)|<[^>]*>", "", text,
                   flags=re.S)
    latin = len(re.findall(r"[A-Za-z]", prose))
    return len(CJK.findall(prose)) * 20 >= latin


@dataclass(frozen=True)
class Block:
    """One translated cell: its id, the fingerprint of the English it translates, the text."""

    cell_id: str
    en: str
    text: str


def read_translations(path: Path) -> dict[str, Block]:
    """The blocks of a translation file, by cell id (a ValueError names a repeated id)."""
    text = path.read_text(encoding="utf-8")
    marks = list(MARKER.finditer(text))
    blocks: dict[str, Block] = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = text[m.end():end].strip("\n")
        if m.group(1) in blocks:
            raise ValueError(f"{path}: cell {m.group(1)} is translated twice")
        blocks[m.group(1)] = Block(m.group(1), m.group(2), body)
    return blocks


def skeleton(notebook: Path) -> str:
    """A translation file for a notebook: every markdown cell's marker and English text."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    parts = [f"# {notebook.parent.name}/{notebook.name}: 中文翻译\n"]
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            src = cell_source(cell)
            parts.append(f"<!-- cell {cell['id']} · en {fingerprint(src)} -->\n{src}\n")
    return "\n".join(parts)


_WIDE = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")


def join_wrapped_lines(text: str) -> str:
    """Join a paragraph's lines where both sides of the break are Chinese: a markdown renderer
    shows a soft line break as a space, which Chinese text does not have. Code and math blocks,
    headings and tables are left as they are."""
    out: list[str] = []
    verbatim = False  # inside a ``` or $$ block
    for line in text.split("\n"):
        stripped = line.strip()
        fence = stripped.startswith("```") or stripped == "$$"
        prev = out[-1] if out else ""
        joins = (not verbatim and not fence and prev and stripped
                 and _WIDE.match(prev[-1]) and _WIDE.match(stripped[0])
                 and not prev.lstrip().startswith(("#", "|")))
        if joins:
            out[-1] = prev + stripped
        else:
            out.append(line)
        verbatim ^= fence
    return "\n".join(out)


def relink(text: str) -> str:
    """Relative links and images one folder deeper: ../x -> ../../x."""
    return RELATIVE_LINK.sub(lambda m: m.group(1) + "../../", text)


@dataclass
class Report:
    """What building one Chinese notebook found."""

    notebook: Path
    stale: list[str] = field(default_factory=list)  # English changed since translated
    missing: list[str] = field(default_factory=list)  # no block for the cell
    english: list[str] = field(default_factory=list)  # a block that is not in Chinese
    unknown: list[str] = field(default_factory=list)  # a block for no markdown cell
    emphasis: list[str] = field(default_factory=list)  # bold/italics that will not render

    @property
    def ok(self) -> bool:
        return not (self.stale or self.missing or self.english or self.unknown or self.emphasis)

    def problems(self) -> list[str]:
        named = (("stale (the English changed)", self.stale), ("not translated", self.missing),
                 ("still in English", self.english), ("no such markdown cell", self.unknown),
                 ("bold or italics that will show their asterisks (move the punctuation "
                  "outside them)", self.emphasis))
        return [f"{self.notebook}: {what}: {', '.join(ids)}" for what, ids in named if ids]


def translate_notebook(nb: dict, blocks: dict[str, Block], report: Report) -> dict:
    """The Chinese notebook: a copy of nb whose markdown cells hold their translations (the
    English cell where a translation is missing or stale, as `report` records)."""
    out = copy.deepcopy(nb)
    seen = set()
    for cell in out["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        src, cid = cell_source(cell), cell["id"]
        seen.add(cid)
        block = blocks.get(cid)
        if block is None:
            report.missing.append(cid)
        elif block.en != fingerprint(src):
            report.stale.append(cid)
        else:
            if not has_chinese(block.text):
                report.english.append(cid)
            report.emphasis += [f"{cid}: {span}" for span in broken_emphasis(block.text)]
            src = join_wrapped_lines(block.text)
        cell["source"] = relink(src).splitlines(keepends=True)
    for cell in out["cells"]:
        for output in cell.get("outputs", []):
            speak_chinese(output)
    report.unknown += [cid for cid in blocks if cid not in seen]
    return out


def speak_chinese(output: dict) -> None:
    """A check result's stored output shows its Chinese: every result keeps both languages'
    renderings in its output's metadata (CheckResult._repr_mimebundle_), and the Chinese
    notebook shows the one in Chinese. Every other output stays as it was."""
    both = output.get("metadata", {}).get("minimodel", {}).get("check")
    if both and "data" in output:
        for mime, text in both[LANG].items():
            output["data"][mime] = text.splitlines(keepends=True)


def _dump(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def translation_file(root: Path, notebook: Path) -> Path:
    return root / "translations" / LANG / notebook.parent.name / f"{notebook.stem}.md"


def build(root: Path, check_only: bool = False) -> tuple[list[Path], list[Report]]:
    """Write every Chinese notebook that has a translation file (and exercises/zh/ from
    solutions/zh/); return the files that were (or would be) changed and a report per
    notebook. Notebooks without a translation file have no Chinese edition yet."""
    changed: list[Path] = []
    reports: list[Report] = []
    for folder in FOLDERS:
        for notebook in sorted((root / folder).glob("*.ipynb")):
            source = translation_file(root, notebook)
            target = root / folder / LANG / notebook.name
            if not source.is_file():
                if target.is_file():  # a Chinese notebook whose translation file went away
                    changed.append(target)
                    if not check_only:
                        target.unlink()
                continue
            report = Report(target)
            nb = json.loads(notebook.read_text(encoding="utf-8"))
            text = _dump(translate_notebook(nb, read_translations(source), report))
            reports.append(report)
            if not target.is_file() or target.read_text(encoding="utf-8") != text:
                changed.append(target)
                if not check_only:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(text, encoding="utf-8")
    zh_solutions = root / "solutions" / LANG
    if zh_solutions.is_dir():
        changed += sync_exercises(zh_solutions, root / "exercises" / LANG, check_only)
    return changed, reports
