"""`python -m minimodel.train`: the recipe's command line (cli.py)."""

import sys

from minimodel.train.cli import main

if __name__ == "__main__":
    sys.exit(main())
