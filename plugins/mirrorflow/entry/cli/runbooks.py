"""The DR runbooks on the command line: failover and failback."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from mirrorflow.entry.cli.common import add_json, load_config, show
from mirrorflow.errors import MirrorflowError


def add(sub: Any) -> None:
    """Register this group's commands on the `mirrorflow` parser's subparsers."""
    for name, text in (("failover", "DR failover runbook: move consumer groups from SOURCE to its mirror TARGET"),
                       ("failback", "DR failback runbook: move consumer groups back from BACKUP to ORIGINAL and "
                                    "restart the original flow")):
        p = sub.add_parser(name, help=text, description=text)
        if name == "failover":
            p.add_argument("--source", required=True, metavar="ALIAS", help="the cluster the groups leave")
            p.add_argument("--target", required=True, metavar="ALIAS", help="its mirror, where they resume")
            p.add_argument("--mode", choices=("planned", "unplanned"), default="planned",
                           help="planned: the source is up and is drained first; unplanned: the source is down")
        else:
            p.add_argument("--original", required=True, metavar="ALIAS", help="the cluster the groups return to")
            p.add_argument("--backup", required=True, metavar="ALIAS", help="the cluster they run on now")
        p.add_argument("--groups", default=".*", metavar="REGEX", help="consumer groups to move (Java regex)")
        p.add_argument("--dry-run", action="store_true", help="only read; print what the run would do")
        p.add_argument("--no-switch", dest="switch_flows", action="store_false",
                       help="leave the flows in the other direction as they are")
        p.add_argument("--drain-timeout", type=float, default=300.0, metavar="S",
                       help="planned: wait at most S seconds for the flow to catch up (default 300)")
        p.add_argument("--yes", action="store_true", help="do not ask for approval after the preflight")
        add_json(p)
        p.set_defaults(run=cmd_runbook)


def cmd_runbook(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import runbooks

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    cfg = load_config(args)
    options = {"groups": args.groups, "dry_run": args.dry_run, "switch_flows": args.switch_flows,
               "drain_timeout_s": args.drain_timeout}
    if args.command == "failover":
        rb = runbooks.Runbook(runbooks.FAILOVER, args.source, args.target, mode=args.mode, **options)
    else:
        rb = runbooks.failback(args.original, args.backup, **options)

    def approve(summary: str) -> bool:
        print(summary, file=sys.stderr)
        if args.yes:
            return True
        if not sys.stdin.isatty():
            raise MirrorflowError("approval needed and no terminal to ask on: rerun with --yes")
        return input("proceed? [y/N] ").strip().lower() in ("y", "yes")

    result = runbooks.run(cfg, rb, approve)
    show(result, args.json, result["markdown"])
    return 0
