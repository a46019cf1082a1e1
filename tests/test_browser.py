"""The course as a person sees it: JupyterLab and the book in a real (headless) chromium.

- JupyterLab starts on a free loopback port with a token, opens `chapters/00_tour.ipynb` and a
  widget chapter (05, else 03), runs all cells, and checks that no cell shows an error and that
  the widgets render as widgets (not "Error displaying widget").
- The built book (`make book`) is opened from disk: the index, a chapter page with its title and
  a figure, rendered math, 中文, a working glossary link, and no request leaves the machine.
- The Chinese edition: a chapter of chapters/zh/ opened in JupyterLab and its page in the book
  show their Chinese title, and the characters render as glyphs (a missing CJK font would draw
  every character as the same empty box).

Screenshots go to build/screenshots/. Run with `make test-browser` or `pytest -m browser`.
Skips, saying why, when chromium (Debian's `chromium`, see `make browser-deps`), Playwright, a
notebook or the built book is missing. The notebooks run on copies, so chapters/ is not touched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
BOOK_HTML = ROOT / "book" / "_build" / "html"
SHOTS = ROOT / "build" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
NOTEBOOK_TIMEOUT_S = 150  # each chapter runs in under a minute on 2 cores; Lab adds a little
WIDGET_CHAPTERS = ("05_*.ipynb", "03_*.ipynb")  # the first that exists is the widget chapter


def _chromium() -> str:
    path = CHROMIUM if Path(CHROMIUM).is_file() else shutil.which("chromium")
    if not path:
        pytest.skip(f"no chromium at {CHROMIUM} or on PATH: `make browser-deps` installs "
                    "Debian's chromium (apt-get install chromium chromium-driver)")
    return path


def _playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed: `make book` installs the book extra")
    return sync_playwright


def _chapter(pattern: str) -> Path | None:
    found = sorted(CHAPTERS.glob(pattern))
    return found[0] if found else None


def _widget_chapter() -> Path | None:
    for pattern in WIDGET_CHAPTERS:
        if path := _chapter(pattern):
            return path
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _check_stayed_local(browser) -> None:
    assert not browser.outside_requests, (
        f"the page asked for something off this machine: {browser.outside_requests}")


def _shot(page, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


# ---------------------------------------------------------------------------------------------
# the browser


@pytest.fixture(scope="module")
def browser():
    """A chromium context with a fresh profile; every request off this machine is blocked."""
    chromium = _chromium()
    sync_playwright = _playwright()
    outside: list[str] = []

    def guard(route):
        url = route.request.url
        if re.match(r"^(file|data|blob|about):|^https?://(127\.0\.0\.1|localhost)[:/]", url):
            return route.continue_()
        outside.append(url)
        return route.abort()

    with tempfile.TemporaryDirectory(prefix="minimodel-chromium-") as profile, \
            sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=chromium, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900}, device_scale_factor=1,
        )
        context.route("**/*", guard)
        context.outside_requests = outside
        try:
            yield context
        finally:
            context.close()


# ---------------------------------------------------------------------------------------------
# JupyterLab


LAB_SETTINGS = {
    # no autosave (the copies are thrown away anyway), no news, no update checks
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false", "checkForUpdates": False},
    # every cell in the DOM, so the checks below see all of them
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def _course_copy(tmp: Path) -> Path:
    """A folder that looks like the repository, with chapters/ copied (Lab may write to it)."""
    root = tmp / "course"
    root.mkdir()
    for entry in ROOT.iterdir():
        if entry.name in ("chapters", ".git", ".venv", "build"):
            continue
        (root / entry.name).symlink_to(entry)
    shutil.copytree(CHAPTERS, root / "chapters",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    return root


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on a free loopback port with a token, serving a copy of the course."""
    if not CHAPTERS.is_dir() or not any(CHAPTERS.glob("*.ipynb")):
        pytest.skip("no notebooks in chapters/ yet")
    tmp = tmp_path_factory.mktemp("lab")
    root = _course_copy(tmp)
    settings = tmp / "settings"
    for name, value in LAB_SETTINGS.items():
        path = settings / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    for sub in ("config", "data", "runtime", "workspaces"):
        (tmp / sub).mkdir()
    port, token = _free_port(), os.urandom(16).hex()
    env = dict(
        os.environ, HF_HUB_OFFLINE="1", JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"), JUPYTER_CONFIG_DIR=str(tmp / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"), JUPYTER_DATA_DIR=str(tmp / "data"),
        MPLBACKEND="module://matplotlib_inline.backend_inline",
    )
    log = (tmp / "lab.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         "--LabApp.extension_manager=readonly"]
        + (["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    tail = (tmp / "lab.log").read_text()[-3000:]
                    pytest.fail(f"JupyterLab did not start:\n{tail}")
                time.sleep(0.5)
        yield {"base": base, "token": token, "root": root, "log": tmp / "lab.log"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


JS_STATE = """() => {
  const nb = window.jupyterapp.shell.currentWidget;
  const kernel = nb && nb.sessionContext && nb.sessionContext.session
      && nb.sessionContext.session.kernel;
  const prompts = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) '
      + '.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent.trim());
  return {kernel: kernel ? kernel.status : null, prompts};
}"""

JS_REPORT = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const cells = [...panel.querySelectorAll('.jp-CodeCell')];
  // error outputs, read from the notebook's model (on screen they look like stderr)
  const errors = [];
  for (const cell of window.jupyterapp.shell.currentWidget.content.widgets) {
    if (cell.model.type !== 'code') continue;
    for (let i = 0; i < cell.model.outputs.length; i++) {
      const out = cell.model.outputs.get(i).toJSON();
      if (out.output_type === 'error') {
        errors.push(cell.model.sharedModel.getSource().slice(0, 80) + '\\n'
                    + out.ename + ': ' + out.evalue);
      }
    }
  }
  const widgets = [...panel.querySelectorAll('.jp-OutputArea-output .jupyter-widgets')]
      .filter(w => w.getBoundingClientRect().width > 0);
  const controls = panel.querySelectorAll(
      '.widget-slider, .widget-dropdown, .widget-button, .widget-toggle-buttons, '
      + '.widget-select, .widget-checkbox, .widget-text, .widget-play, .widget-inline-hbox').length;
  return {
    cells: cells.length,
    prompts: cells.map(c => c.querySelector('.jp-InputPrompt').textContent.trim()),
    errors,
    widgets: widgets.length,
    controls,
    widgetErrors: (panel.innerText.match(/Error displaying widget[^\\n]*/g) || []),
    loading: (panel.innerText.match(/Loading widget\\.\\.\\./g) || []).length,
    images: panel.querySelectorAll('.jp-OutputArea-output img').length,
  };
}"""


def _run_notebook_in_lab(browser, lab, notebook: Path) -> dict:
    """Open a copy of `notebook` in JupyterLab, Run All Cells, wait, and report what shows."""
    page = browser.new_page()
    try:
        rel = notebook.relative_to(ROOT).as_posix()
        # a workspace of its own, reset: only this notebook is open, as for a learner
        page.goto(f"{lab['base']}/lab/workspaces/{notebook.stem}/tree/{rel}"
                  f"?reset&token={lab['token']}", timeout=60_000)
        page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
        page.wait_for_function(
            "() => { const s = window.jupyterapp.shell.currentWidget?.sessionContext;"
            " return s && s.session && s.session.kernel && s.session.kernel.status === 'idle'; }",
            timeout=60_000,
        )
        # clear the stored outputs first, so that everything checked below comes from this run
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
        page.wait_for_function("() => ![...document.querySelectorAll('.jp-NotebookPanel:not("
                               ".lm-mod-hidden) .jp-CodeCell .jp-OutputArea-output')].length")
        # Run > Run All Cells; not awaited, so that a hanging cell meets the deadline below
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        deadline = time.monotonic() + NOTEBOOK_TIMEOUT_S
        quiet_since, started = None, False
        while True:
            state = page.evaluate(JS_STATE)
            running = state["kernel"] != "idle" or any("*" in p for p in state["prompts"])
            started = started or running
            all_ran = all(re.search(r"\[\d+\]", p) for p in state["prompts"])
            if not running and (started or all_ran):
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 1.5:  # idle and settled, not between cells
                    break
            else:
                quiet_since = None
            if time.monotonic() > deadline:
                _shot(page, f"lab_{notebook.stem}_timeout")
                pytest.fail(f"{rel} did not finish in {NOTEBOOK_TIMEOUT_S}s in JupyterLab: {state}")
            time.sleep(0.5)
        page.wait_for_timeout(1000)  # let widget views finish rendering
        report = page.evaluate(JS_REPORT)
        page.evaluate("() => document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) "
                      ".jp-WindowedPanel-outer')?.scrollTo(0, 0)")
        report["screenshots"] = [str(_shot(page, f"lab_{notebook.stem}"))]
        first_widget = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) "
                                    ".jp-OutputArea-output .jupyter-widgets").first
        if first_widget.count():
            first_widget.scroll_into_view_if_needed()
            page.wait_for_timeout(300)
            report["screenshots"].append(str(_shot(page, f"lab_{notebook.stem}_widget")))
        return report
    finally:
        page.close()


def _check_ran_cleanly(report: dict, name: str) -> None:
    assert report["cells"] > 0, f"{name}: no code cells rendered in JupyterLab"
    assert not report["errors"], f"{name}: cells show errors in JupyterLab:\n" + "\n---\n".join(
        report["errors"])
    unrun = [p for p in report["prompts"] if not re.search(r"\[\d+\]", p)]
    assert not unrun, f"{name}: {len(unrun)} code cells did not run: {report['prompts']}"
    assert not report["widgetErrors"], f"{name}: {report['widgetErrors']}"


def test_lab_runs_tour(browser, request):
    notebook = _chapter("00_*.ipynb")
    if notebook is None:
        pytest.skip("chapters/00_tour.ipynb is not written yet")
    lab = request.getfixturevalue("lab")
    report = _run_notebook_in_lab(browser, lab, notebook)
    _check_ran_cleanly(report, notebook.name)
    assert report["loading"] == 0, f"{notebook.name}: widgets still 'Loading widget...'"
    _check_stayed_local(browser)


def test_lab_runs_widget_chapter(browser, request):
    notebook = _widget_chapter()
    if notebook is None:
        pytest.skip("neither chapters/05_*.ipynb nor chapters/03_*.ipynb is written yet")
    lab = request.getfixturevalue("lab")
    report = _run_notebook_in_lab(browser, lab, notebook)
    _check_ran_cleanly(report, notebook.name)
    assert report["widgets"] > 0 and report["controls"] > 0, (
        f"{notebook.name}: no widget rendered as a widget in JupyterLab "
        f"({report['widgets']} widget views, {report['controls']} controls)")
    assert report["loading"] == 0, f"{notebook.name}: widgets still 'Loading widget...'"
    _check_stayed_local(browser)


# ---------------------------------------------------------------------------------------------
# the Chinese edition

JS_GLYPHS = """(selector) => {
  // Draw two different characters in the element's own font: a missing CJK font draws both as
  // the same box (and as the box of a code point no font has), real glyphs differ.
  const el = document.querySelector(selector);
  const family = getComputedStyle(el).fontFamily;
  const canvas = document.createElement('canvas');
  canvas.width = canvas.height = 64;
  const ctx = canvas.getContext('2d');
  const draw = (ch) => {
    ctx.clearRect(0, 0, 64, 64);
    ctx.font = '48px ' + family;
    ctx.fillText(ch, 4, 52);
    return Array.from(ctx.getImageData(0, 0, 64, 64).data).join(',');
  };
  const a = draw('中'), b = draw('文'), none = draw('\\u{10FFFD}');
  return {family, inked: /[1-9]/.test(a), differ: a !== b, notBox: a !== none && b !== none};
}"""


def _zh_chapter() -> Path | None:
    found = sorted((CHAPTERS / "zh").glob("[0-9][0-9]_*.ipynb"))
    return found[0] if found else None


def _check_glyphs(page, selector: str, what: str) -> None:
    glyphs = page.evaluate(JS_GLYPHS, selector)
    assert glyphs["inked"] and glyphs["differ"] and glyphs["notBox"], (
        f"{what}: Chinese characters do not render as glyphs in {glyphs['family']!r} "
        f"({glyphs}); install a CJK font (`make browser-deps` installs fonts-noto-cjk)")


def test_lab_shows_a_chinese_chapter(browser, request):
    notebook = _zh_chapter()
    if notebook is None:
        pytest.skip("chapters/zh/ has no chapter yet (python -m minimodel translate)")
    lab = request.getfixturevalue("lab")
    page = browser.new_page()
    try:
        rel = notebook.relative_to(ROOT).as_posix()
        page.goto(f"{lab['base']}/lab/workspaces/zh-{notebook.stem}/tree/{rel}"
                  f"?reset&token={lab['token']}", timeout=60_000)
        page.wait_for_selector(".jp-NotebookPanel .jp-MarkdownOutput h1", timeout=60_000)
        h1 = page.inner_text(".jp-NotebookPanel .jp-MarkdownOutput h1").replace("¶", "").strip()
        assert h1 == _title(notebook), f"{rel}: title {h1!r} != {_title(notebook)!r}"
        _check_glyphs(page, ".jp-NotebookPanel .jp-MarkdownOutput h1", rel)
        _shot(page, f"lab_zh_{notebook.stem}")
        _check_stayed_local(browser)
    finally:
        page.close()


def test_book_chinese_chapter_page(browser, book):
    notebook = _zh_chapter()
    if notebook is None:
        pytest.skip("chapters/zh/ has no chapter yet (python -m minimodel translate)")
    html = book / "chapters" / "zh" / f"{notebook.stem}.html"
    if not html.is_file():
        pytest.fail(f"{html.relative_to(ROOT)} is missing: the book is older than chapters/zh "
                    "(`make book`)")
    page = browser.new_page()
    try:
        page.goto(html.as_uri())
        page.wait_for_load_state("load")
        h1 = page.inner_text("article h1").replace("#", "").strip()
        assert h1 == _title(notebook), f"Chinese chapter title {h1!r} != notebook title"
        _check_glyphs(page, "article h1", html.name)
        _check_glyphs(page, "article p", html.name)
        assert "中文版" in page.inner_text("nav.bd-docs-nav")
        _shot(page, f"book_zh_{notebook.stem}")
        # the language switch under the title goes to the English chapter, and back
        page.locator("article a.language-switch", has_text="English").click()
        page.wait_for_load_state("load")
        english = CHAPTERS / notebook.name
        assert page.inner_text("article h1").replace("#", "").strip() == _title(english)
        page.locator("article a.language-switch", has_text="中文").click()
        page.wait_for_load_state("load")
        assert page.url.endswith(f"chapters/zh/{notebook.stem}.html")
        _check_stayed_local(browser)
    finally:
        page.close()


# ---------------------------------------------------------------------------------------------
# the book


def _title(notebook: Path) -> str:
    """The text of the notebook's first `# ` heading, as the book shows it."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("# "):
                    return re.sub(r"[*_`]", "", line[2:]).strip()
    raise AssertionError(f"{notebook.name} has no '# ' title")


def _has_figure(notebook: Path) -> bool:
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    return any("image/png" in out.get("data", {}) or "image/svg+xml" in out.get("data", {})
               for cell in nb["cells"] for out in cell.get("outputs", []))


def _book_chapter() -> Path | None:
    """The chapter whose page is checked: the widget chapter, else any with a stored figure."""
    candidates = [p for p in (_widget_chapter(), _chapter("00_*.ipynb")) if p]
    candidates += sorted(CHAPTERS.glob("[0-9][0-9]_*.ipynb"))
    for path in candidates:
        if _has_figure(path) and (BOOK_HTML / "chapters" / f"{path.stem}.html").is_file():
            return path
    return None


@pytest.fixture(scope="module")
def book():
    if not (BOOK_HTML / "index.html").is_file():
        pytest.skip("the book is not built: run `make book`")
    return BOOK_HTML


def test_book_index(browser, book):
    page = browser.new_page()
    try:
        page.goto((book / "index.html").as_uri())
        page.wait_for_load_state("load")
        page.wait_for_selector("article h1")
        assert "minimodel" in page.inner_text("article h1")
        nav = page.inner_text("nav.bd-docs-nav")
        for entry in ("Setup", "Glossary"):
            assert entry in nav, f"'{entry}' missing from the book's navigation: {nav!r}"
        for notebook in sorted(CHAPTERS.glob("[0-9][0-9]_*.ipynb")):
            assert _title(notebook) in nav, f"{notebook.name} is not in the book's navigation"
        # the one display equation of the intro is typeset by the bundled MathJax
        page.wait_for_selector("mjx-container", timeout=15_000)
        assert "中文" in page.inner_text("article")
        _shot(page, "book_index")
        _check_stayed_local(browser)
    finally:
        page.close()


def test_book_chapter_page(browser, book):
    notebook = _book_chapter()
    if notebook is None:
        pytest.skip("no chapter with a stored figure is in the built book yet: run `make book`")
    page = browser.new_page()
    try:
        page.goto((book / "chapters" / f"{notebook.stem}.html").as_uri())
        page.wait_for_load_state("load")
        h1 = page.inner_text("article h1").replace("#", "").strip()
        assert h1 == _title(notebook), f"chapter title {h1!r} != notebook title"
        figures = page.locator("article .cell_output img")
        assert figures.count() > 0, (
            f"{notebook.name} has a stored figure but its book page shows none "
            "(is the book older than the notebook? `make book`)")
        figures.first.scroll_into_view_if_needed()
        loaded = figures.first.evaluate("img => img.complete && img.naturalWidth > 0")
        assert loaded, f"{notebook.name}: the figure on its book page did not load"
        page.evaluate("() => window.scrollTo(0, 0)")
        _shot(page, f"book_{notebook.stem}")
        figures.first.scroll_into_view_if_needed()
        _shot(page, f"book_{notebook.stem}_figure")
        # a glossary link from the chapter lands on an existing term
        link = page.locator("article a[href*='glossary.html#']").first
        if link.count():
            anchor = link.get_attribute("href").split("#", 1)[1]
            link.click()
            page.wait_for_load_state("load")
            assert page.url.endswith(f"glossary.html#{anchor}")
            assert page.locator(f"[id='{anchor}']").count() == 1, f"no glossary term #{anchor}"
            assert "预填充" in page.inner_text("article")
            _shot(page, "book_glossary")
        _check_stayed_local(browser)
    finally:
        page.close()
