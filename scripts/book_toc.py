"""Write book/_toc.yml from the chapters that exist, so the book builds at every stage.

The book's source folder is the repository root: pages are named by their path from there.
Run by `make book`; run it by hand with `python scripts/book_toc.py` (prints what it wrote).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = re.compile(r"^(\d\d)_[A-Za-z0-9_]+\.ipynb$")


def chapters(root: Path = ROOT, folder: str = "chapters") -> list[Path]:
    """<folder>/NN_name.ipynb that exist and are readable notebooks, in chapter order."""
    found = []
    for path in sorted((root / folder).glob("*.ipynb")):
        if not CHAPTER.match(path.name):
            continue
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:  # a notebook being written right now
            print(f"book_toc: skipping {path.relative_to(root)}: {err}", file=sys.stderr)
            continue
        found.append(path)
    return found


def toc_yaml(root: Path = ROOT) -> str:
    """The text of book/_toc.yml for the chapters present under `root`."""
    lines = [
        "# Written by scripts/book_toc.py from the chapters present; do not edit by hand.",
        "format: jb-book",
        "root: book/intro",
        "parts:",
        "  - caption: Start here",
        "    chapters:",
        "      - file: book/setup",
    ]
    nbs = chapters(root)
    if nbs:
        lines += ["  - caption: Chapters", "    chapters:"]
        lines += [f"      - file: chapters/{p.stem}" for p in nbs]
    zh = chapters(root, "chapters/zh")  # the Chinese edition (minimodel/grading/translation.py)
    if zh:
        lines += ["  - caption: 中文版 · Chinese edition", "    chapters:"]
        lines += [f"      - file: chapters/zh/{p.stem}" for p in zh]
    lines += [
        "  - caption: Reference",
        "    chapters:",
        "      - file: book/bard",
        "      - file: book/benchmarks",
        "      - file: book/glossary",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    toc = ROOT / "book" / "_toc.yml"
    text = toc_yaml()
    if not toc.is_file() or toc.read_text(encoding="utf-8") != text:
        toc.write_text(text, encoding="utf-8")
    print(f"book_toc: {len(chapters())} chapter(s) -> {toc.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
