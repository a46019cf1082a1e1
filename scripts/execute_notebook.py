"""Run notebooks in place and store their outputs the way nbval compares them.

    .venv/bin/python scripts/execute_notebook.py chapters/03_attention.ipynb solutions/ch03_*.ipynb

Each notebook runs in its own folder (as Jupyter runs it), offline, with a 10-minute cell limit.
A cell's stdout can arrive as several stream outputs (one per flush); they are merged into one
per stream name, so the stored notebook does not depend on when the kernel flushed. Run it on a
quiet machine: a cell that times something prints what this machine measured (such cells carry
`# NBVAL_IGNORE_OUTPUT`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def merge_streams(outputs: list) -> list:
    merged: list = []
    for out in outputs:
        prev = merged[-1] if merged else None
        if (out.get("output_type") == "stream" and prev is not None
                and prev.get("output_type") == "stream" and prev.get("name") == out.get("name")):
            prev["text"] = prev["text"] + out["text"]
        else:
            merged.append(out)
    return merged


def execute(path: Path, timeout: int = 600) -> None:
    nb = nbformat.read(str(path), as_version=4)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = merge_streams(cell.outputs)
    nbformat.write(nb, str(path))


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    for name in argv:
        print(f"running {name}", flush=True)
        execute(Path(name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
