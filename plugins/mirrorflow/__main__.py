"""`python -m mirrorflow`: the command line."""

import sys

from mirrorflow.entry.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
