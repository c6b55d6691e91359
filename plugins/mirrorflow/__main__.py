"""`python -m mirrorflow`: the command line."""

import sys

from mirrorflow.entry.cli import main

if __name__ == "__main__":
    sys.exit(main())
