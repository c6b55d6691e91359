"""The whole `mirrorflow` command line: every group's commands on one parser. Exit 0 ok, 1 operational, 2 usage or
config."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mirrorflow.entry.cli import batch, common, flows, metadata, runbooks, setup


def build_parser() -> argparse.ArgumentParser:
    parser, sub = common.new_parser()
    for group in (setup, flows, metadata, runbooks, batch):
        group.add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return common.run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
