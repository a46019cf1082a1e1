"""Sphinx extension for the minimodel book: offline MathJax, glossary anchors, chapter links.

- Copies MathJax 3 (shipped by the `django-static-mathjax` wheel, a `book` extra) into
  `_static/mathjax/`, so math renders with no network (`mathjax_path: mathjax/tex-chtml.js`).
- Registers every explicit id of a page (`[prefill]{#prefill}` in the glossary) as a link target
  for MyST's `page.md#id` links, the way heading anchors are, so `../book/glossary.md#prefill` in
  a chapter resolves without a warning, and a link to an id that does not exist still warns.
- Shows `docs/benchmarks.md` (written by `make bench`) as the page `book/benchmarks`, re-read on
  every build so the page follows that file; until it exists, the page says how to make it.
- Adds the roles ``{ch}`07` `` and ``{chn}`07` ``: a link to the chapter notebook
  `chapters/07_*.ipynb`, titled with that chapter's own title (``chn``: "ch. 07", the title on
  hover), or plain text when that chapter is not written yet.
- Puts a language switch under the title of every chapter that exists in both languages: "中文"
  on `chapters/07_*` to `chapters/zh/07_*`, "English" on the way back.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

CHAPTER_DIR = "chapters"
BENCH_DOC = "book/benchmarks"
BENCH_FILE = Path("docs") / "benchmarks.md"
BENCH_PENDING = """# Benchmarks

No measurements yet. `make bench` (or `python -m minimodel bench`) runs the engine, transformers
and the naive loop side by side and writes the results, with the machine and the command, to
`docs/benchmarks.md`; the next `make book` shows them here.
"""


def _mathjax_source() -> Path | None:
    """The `es5/` folder of MathJax 3 inside the installed `django-static-mathjax` wheel."""
    try:
        import mathjax  # the django-static-mathjax distribution's package
    except ImportError:
        return None
    es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    return es5 if (es5 / "tex-chtml.js").is_file() else None


def copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    """Copy MathJax into the HTML output's `_static/mathjax/` (once; kept between builds)."""
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "mathjax"
    if (target / "tex-chtml.js").is_file():
        return
    source = _mathjax_source()
    if source is None:
        logger.warning(
            "MathJax is not installed, so math will not render offline: "
            "install the book extra (`pip install -e '.[book]'`, or `make book`)."
        )
        return
    # tex-chtml.js loads the rest on demand (TeX extensions, CHTML fonts, the menu, a11y); the
    # other bundles, the SVG output and the speech-rule engine (sre) are never asked for.
    skip = ("sre", "svg", "*svg*.js", "mml-*.js", "tex-mml-*.js", "tex-chtml-full*.js", "*.map")
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(*skip))


def register_explicit_ids(app: Sphinx, doctree: nodes.document) -> None:
    """Make every id on a page (`{#id}`, `(id)=`) a valid target for MyST `page.md#id` links."""
    env = app.env
    slugs = env.metadata[env.docname].setdefault("myst_slugs", {})
    for node in doctree.findall(nodes.Element):
        if isinstance(node, nodes.document):
            continue
        for node_id in node.get("ids", []):
            if node_id not in slugs:
                slugs[node_id] = (0, node_id, node.astext()[:80])


def benchmarks_source(app: Sphinx, docname: str, source: list[str]) -> None:
    """`book/benchmarks` includes docs/benchmarks.md; until that exists, say how to make it."""
    if docname == BENCH_DOC and not (Path(app.srcdir) / BENCH_FILE).is_file():
        source[0] = BENCH_PENDING


def benchmarks_outdated(app, env, added, changed, removed) -> list[str]:
    """Re-read the benchmarks page on every build: docs/benchmarks.md may have appeared."""
    return [BENCH_DOC] if BENCH_DOC in env.found_docs else []


class chapter_ref(nodes.Inline, nodes.TextElement):
    """A link to chapter NN, resolved once every page is known."""


def chapter_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{ch}`07` ``: link to chapters/07_*.ipynb titled with the chapter's title;
    ``{chn}`07` ``: the same link, short ("ch. 07", the title on hover), for tables."""
    number = text.strip()
    if not re.fullmatch(r"\d\d", number):
        msg = inliner.reporter.error(f"{{{name}}} wants a two-digit chapter number, got {text!r}")
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    return [chapter_ref(rawtext, number, number=number, short=(name == "chn"))], []


def _chapter_docname(app: Sphinx, number: str) -> str | None:
    names = sorted(d for d in app.env.found_docs if d.startswith(f"{CHAPTER_DIR}/{number}_"))
    return names[0] if names else None


def resolve_chapter_refs(app: Sphinx, doctree: nodes.document, fromdocname: str) -> None:
    """Turn each `chapter_ref` into a link to that chapter, or plain text if it is missing."""
    for node in list(doctree.findall(chapter_ref)):
        number = node["number"]
        target = _chapter_docname(app, number)
        if target is None:
            text = f"ch. {number}" if node.get("short") else f"chapter {number}"
            node.replace_self(nodes.inline("", text, classes=["chapter-missing"]))
            continue
        title = app.env.titles[target].astext()
        if not title.startswith(number):
            title = f"{number} {title}"
        text = f"ch. {number}" if node.get("short") else title
        ref = nodes.reference("", "", internal=True, classes=["chapter-ref"], reftitle=title)
        ref["refuri"] = app.builder.get_relative_uri(fromdocname, target)
        ref.append(nodes.inline(text, text))
        node.replace_self(ref)


ZH_DIR = f"{CHAPTER_DIR}/zh"


def other_language(docname: str, found: set[str]) -> tuple[str, str] | None:
    """(the same chapter's page in the other language, the switch's label), if it exists."""
    if docname.startswith(f"{ZH_DIR}/"):
        other, label = f"{CHAPTER_DIR}/{docname.removeprefix(f'{ZH_DIR}/')}", "English"
    elif docname.startswith(f"{CHAPTER_DIR}/") and docname.count("/") == 1:
        other, label = f"{ZH_DIR}/{docname.removeprefix(f'{CHAPTER_DIR}/')}", "中文"
    else:
        return None
    return (other, label) if other in found else None


def add_language_switch(app: Sphinx, pagename: str, templatename: str, context: dict,
                        doctree: nodes.document | None) -> None:
    """A link to the chapter in the other language, under the page's title."""
    found = other_language(pagename, app.env.found_docs)
    if found is None or "body" not in context:
        return
    other, label = found
    href = app.builder.get_relative_uri(pagename, other)
    switch = f'<p class="language-switch"><a class="language-switch" href="{href}">{label}</a></p>'
    context["body"] = re.sub(r"(</h1>)", lambda m: m.group(1) + switch, context["body"], count=1)


def visit_chapter_ref(self, node):  # only reached by builders that skip doctree-resolved
    self.body.append(node.astext())
    raise nodes.SkipNode


def setup(app: Sphinx) -> dict:
    app.add_node(chapter_ref, html=(visit_chapter_ref, None), latex=(visit_chapter_ref, None),
                 text=(visit_chapter_ref, None))
    app.add_role("ch", chapter_role)
    app.add_role("chn", chapter_role)
    app.connect("source-read", benchmarks_source)
    app.connect("env-get-outdated", benchmarks_outdated)
    app.connect("doctree-read", register_explicit_ids)
    app.connect("doctree-resolved", resolve_chapter_refs)
    app.connect("html-page-context", add_language_switch)
    app.connect("build-finished", copy_mathjax)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
