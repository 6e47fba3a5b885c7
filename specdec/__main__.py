"""`python -m specdec ...`: see specdec.cli."""

import sys

from specdec.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m specdec"))
