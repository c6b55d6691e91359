"""The spark-submit entry points (`spark_jobs/`): one job's command-line arguments, parsed and run without the
rest of the command line."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

from mirrorflow.entry.cli import batch, common, flows

GROUPS: dict[str, ModuleType] = {"stream": flows, "audit": batch, "backfill": batch}


def submit_main(command: str, argv: Sequence[str]) -> int:
    """`command`'s arguments plus the global --config, wherever it is given; exit code as `mirrorflow` gives it."""
    args, front = list(argv), []
    while "--config" in args:
        at = args.index("--config")
        front += args[at:at + 2]
        args = args[:at] + args[at + 2:]
    parser, sub = common.new_parser()
    GROUPS[command].add(sub)
    return common.run(parser.parse_args([*front, command, *args]))
