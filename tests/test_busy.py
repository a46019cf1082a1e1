"""scripts/busy.py, the load of the stress lane: it keeps the cores busy while a command runs,
passes on the command's exit status, and leaves none of its processes behind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
# The command checks that the spinners run beside it, then exits with 3.
CHECK = ("import os, psutil, sys; me = psutil.Process(); "
         "spinners = [c for c in me.parent().children() if c.pid != me.pid]; "
         "assert len(spinners) == 2 and all(s.is_running() for s in spinners), spinners; "
         "sys.exit(3)")


def test_busy_runs_the_command_beside_spinners_and_stops_them():
    out = subprocess.run([sys.executable, "scripts/busy.py", "--workers", "2", "--",
                          sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 3, out.stdout + out.stderr
    pids = [int(p) for p in re.search(r"busy processes \[([\d, ]+)\]", out.stdout)[1].split(",")]
    assert len(pids) == 2
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_busy_without_a_command_is_an_error():
    out = subprocess.run([sys.executable, "scripts/busy.py"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2 and "give the command" in out.stderr
