"""What learners read speaks about the course and the engine, never about how it was made.

Scans the chapters, exercises and solutions (sources and stored outputs), the book's pages, the
docs, the README and the grading messages for words that belong to a project's internal record
(tickets, work sessions, colleagues, the material a course was planned from).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Each pattern is a phrase that only an internal record would use.
INTERNAL = [
    r"\bthe seed'?s?\b(?! ?(?:=|value|of the generator|\d))",  # the seed material, the seed's table
    r"\bseed material\b",
    r"\bthe issues?\b",
    r"\bissue #?\d+",
    r"\bsessions?\b",
    r"\bengineers'",
    r"\bother engineers?\b",
    r"\btickets?\b",
    r"\bcolleagues?\b",
    r"\bstill to do\b",
    r"\btarget (?:\d+(?:\.\d+)?x)?:? ?(?:met|missed)\b",
]
# A real use of one of the words above, written out in full (none so far).
ALLOWED: list[str] = []

PATTERN = re.compile("|".join(f"(?:{p})" for p in INTERNAL), re.IGNORECASE)


def _notebook_texts(path: Path) -> list[tuple[str, str]]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for i, cell in enumerate(nb["cells"]):
        out.append((f"cell {i} source", "".join(cell["source"])))
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                out.append((f"cell {i} output", "".join(o["text"])))
            for key in ("text/plain", "text/markdown", "text/html"):
                if key in o.get("data", {}):
                    out.append((f"cell {i} output", "".join(o["data"][key])))
    return out


def learner_files() -> list[Path]:
    files = sorted(ROOT.glob("chapters/*.ipynb")) + sorted(ROOT.glob("exercises/*.ipynb"))
    files += sorted(ROOT.glob("solutions/*.ipynb")) + sorted(ROOT.glob("book/*.md"))
    files += sorted(ROOT.glob("docs/*.md")) + [ROOT / "README.md", ROOT / "README.zh.md"]
    files += sorted(ROOT.glob("translations/*/*/*.md"))
    files += sorted(ROOT.glob("minimodel/grading/*.py"))
    return files


def internal_words(text: str) -> list[str]:
    for allowed in ALLOWED:
        text = text.replace(allowed, "")
    return [m.group(0) for m in PATTERN.finditer(text)]


def test_the_scan_covers_every_kind_of_file():
    kinds = {p.parent.name if p.parent != ROOT else p.name for p in learner_files()}
    assert {"chapters", "exercises", "solutions", "book", "docs", "README.md"} <= kinds


@pytest.mark.parametrize(
    "text",
    ["(From the seed material) Describe", "The seed's table", "as the issue defines it",
     "rerun at the end of the session", "other engineers' notebooks", "target 2x: missed",
     "Still to do: time it", "see issue 11"],
)
def test_internal_words_are_found(text):
    assert internal_words(text), text


@pytest.mark.parametrize(
    "text",
    ["SamplingParams(seed=1)", "the same seed gives the same tokens", "with seed 0",
     "torch.manual_seed(0)", "the seed=3 row"],
)
def test_ordinary_words_pass(text):
    assert not internal_words(text), text


@pytest.mark.parametrize("path", learner_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_learner_text_has_no_internal_words(path):
    if path.suffix == ".ipynb":
        parts = _notebook_texts(path)
    else:
        parts = [("text", path.read_text(encoding="utf-8"))]
    found = [(where, word) for where, text in parts for word in internal_words(text)]
    assert not found, (
        f"{path.relative_to(ROOT)} speaks about how the project was made: {found[:5]}. "
        "Rewrite it for a reader of the course (what was measured, on what machine, what it "
        "shows), or add a real use to ALLOWED."
    )
