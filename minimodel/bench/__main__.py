"""`python -m minimodel.bench ...`: the same as `python -m minimodel bench ...`, through the
command line's main, so that a user's error is one line."""

from __future__ import annotations

import sys

from minimodel.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(["bench", *sys.argv[1:]]))
