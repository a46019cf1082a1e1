"""The cache folder, `$MINIMODEL_HOME`, and the one way anything is built into it: once, whole.

Models built offline (`bard`, `tiny`, `random:<shape>`) and Qwen3's tokenizer files live here.
`build_once` builds a folder into a temporary sibling, stamps it with a version and renames it
into place, so a reader sees a finished folder or none, and code that writes a folder differently
bumps the version to have older copies rebuilt. Nothing here imports the rest of the package.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

STAMP = ".minimodel-build"  # the file in a built folder that holds its version


def minimodel_home() -> Path:
    """The cache folder: $MINIMODEL_HOME, or ~/.cache/minimodel (also when it is set empty)."""
    return Path(os.environ.get("MINIMODEL_HOME") or Path.home() / ".cache" / "minimodel")


def cache_write_error(err: OSError) -> OSError:
    """The same kind of OSError as `err`, saying that the cache folder cannot be written and
    how to move it (a read-only home, a MINIMODEL_HOME under a regular file, a full disk)."""
    home = minimodel_home()
    file = next((p for p in (home, *home.parents) if p.exists() and not p.is_dir()), None)
    if file is not None:
        why = f"{file} is a file, not a folder"
    else:
        why = (err.strerror or str(err)) + (f" ({err.filename})" if err.filename else "")
    new = type(err)(f"cannot write the cache folder {home}: {why}. Set MINIMODEL_HOME to a "
                    "folder you can write (e.g. MINIMODEL_HOME=/tmp/minimodel) and try again.")
    new.errno = err.errno
    return new


def write_atomic(path: Path, data: bytes) -> None:
    """Write a file so that readers see either nothing or all of it (temp file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes the file private
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_once(target: Path, build: Callable[[Path], None], version: str) -> Path:
    """The folder `target`, built by `build(folder)` unless it is there with this `version`.

    A folder stamped with another version (built by older code) is replaced. Concurrent
    builders race on the final rename; the loser drops its own, identical, folder. A cache
    that cannot be written raises `cache_write_error`'s message, saying how to move it.
    """
    stamp = target / STAMP
    if stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == version:
        return target
    try:  # where an unusable cache folder shows first
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    except OSError as err:
        raise cache_write_error(err) from None
    try:
        build(tmp)
        (tmp / STAMP).write_text(version + "\n", encoding="utf-8")
        tmp.chmod(0o755)
        if target.exists():  # built by older code: replace it
            shutil.rmtree(target, ignore_errors=True)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first; its folder is identical
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
