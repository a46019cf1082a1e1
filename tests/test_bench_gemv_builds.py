"""scripts/bench_gemv_builds.py builds this tree's kernels and another revision's and times both."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from minimodel.kernels import native

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench_gemv_builds.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.skipif(native.library() is None, reason="no C compiler here: nothing to build")
def test_two_builds_time_the_same_products_side_by_side():
    done = run("--against", "HEAD", "--shapes", "40x24", "--weights", "float32,int8",
               "--rows", "1,3", "--repeats", "1", "--hot")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["against"] == "HEAD" and report["hot"] is True
    assert [(r["weights"], r["rows"]) for r in report["results"]] == [
        ("float32", 1), ("float32", 3), ("int8", 1), ("int8", 3)]
    for r in report["results"]:
        assert set(r["us"]) == {"this", "HEAD"} and all(v > 0 for v in r["us"].values())
        assert r["this_over_other"] == pytest.approx(r["us"]["this"] / r["us"]["HEAD"])
        assert r["max_abs_difference"] < 1e-3  # the same products, whichever build


def test_a_revision_without_the_kernels_is_refused_with_what_to_give():
    done = run("--against", "no-such-revision-here", "--shapes", "40x24")
    assert done.returncode != 0
    assert "no-such-revision-here" in done.stderr and "--against" in done.stderr
