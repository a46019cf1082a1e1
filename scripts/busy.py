"""Run a command while every core is kept busy, as on a loaded machine.

    python scripts/busy.py -- pytest -q -m stress tests
    python scripts/busy.py --workers 4 -- COMMAND ...

It starts one spinning process per core (or --workers of them), runs COMMAND, then stops
exactly the processes it started, by their ids, whatever way COMMAND ends (Ctrl-C too). The
exit status is COMMAND's. The tests that use processes, sockets, threads or deadlines carry the
`stress` marker; `make test` runs them this way, so that none of them depends on a quiet
machine.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

SPIN = "while True: pass"


def start(n: int) -> list[subprocess.Popen]:
    """n processes that each keep one core busy (at normal priority, as other work would)."""
    return [subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL)
            for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    """Stop the spinners started here, and only them: terminate, then kill what remains."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 10
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=None,
                        help="busy processes (default: one per core this process may use)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS ...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    n = cores() if args.workers is None else args.workers
    if n < 0:
        parser.error(f"--workers must be >= 0, got {n}")
    procs = start(n)
    print(f"busy.py: {n} busy processes {[p.pid for p in procs]} while running: "
          f"{' '.join(command)}", flush=True)
    # SIGTERM (a CI runner ending the job) takes the same way out as Ctrl-C: stop() runs.
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.monotonic()
    try:
        code = subprocess.call(command)
    except KeyboardInterrupt:
        code = 130
    finally:
        stop(procs)
    print(f"busy.py: the command took {time.monotonic() - started:.0f} s under load, exit "
          f"{code}; busy processes stopped", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
