"""The batch jobs: audit and backfill (Spark)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from mirrorflow.entry.cli.common import add_json, checked, load_config, show
from mirrorflow.jobs import ranges


def add(sub: Any) -> None:
    """Register this group's commands on the `mirrorflow` parser's subparsers."""
    p = sub.add_parser("audit", help="prove by content that a flow's target holds every source record of a range "
                       "(Spark batch job; exit 1 when anything is missing or differs)")
    p.add_argument("--flow", required=True, metavar="A->B")
    _add_range(p)
    p.add_argument("--full", action="store_true", help="accepted for older scripts: every audit reads every record "
                   "on both sides")
    p.set_defaults(run=cmd_audit)


    p = sub.add_parser("backfill", help="copy a bounded range of a flow once, with the stream's fidelity (Spark "
                       "batch job; skips what the target holds)")
    p.add_argument("--flow", required=True, metavar="A->B")
    start = p.add_mutually_exclusive_group(required=True)
    start.add_argument("--from-offsets", metavar="JSON", type=checked(ranges.parse_offsets),
                       help='where to start, per partition: {"orders": {"0": 10, "1": -2}} (-2: the earliest)')
    _add_range(p, start)
    p.add_argument("--pause", action="store_true",
                   help="stop the flow's running stream for the backfill and ask it to run again after")
    p.set_defaults(run=cmd_backfill)


def _add_range(p: argparse.ArgumentParser, start: Any = None) -> None:
    (start or p).add_argument("--from-time", metavar="T", type=checked(ranges.parse_time),
                              help="the first record's time: ISO 8601 (UTC if no zone) or epoch ms")
    p.add_argument("--to-time", metavar="T", type=checked(ranges.parse_time),
                   help="stop before records at or after T (default: now)")
    p.add_argument("--topics", metavar="REGEX",
                   help="only source topics REGEX matches whole (a Java regex, as the config's topics; "
                        "default: the flow's)")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    add_json(p)


def cmd_audit(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import audit
    from mirrorflow.jobs.ranges import Window
    from mirrorflow.kafka.link import FlowLink

    cfg = load_config(args)
    report = audit.run(FlowLink.of(cfg, args.flow), topics=args.topics, window=Window(args.from_time, args.to_time),
                       master=args.master)
    show(report.as_dict(), args.json, report.table())
    return 0 if report.complete else 1


def cmd_backfill(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import backfill
    from mirrorflow.jobs.ranges import Window
    from mirrorflow.kafka.link import FlowLink

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    cfg = load_config(args)
    report = backfill.run(FlowLink.of(cfg, args.flow), topics=args.topics, window=Window(args.from_time, args.to_time),
                          from_offsets=args.from_offsets, pause=args.pause, master=args.master)
    show(report.as_dict(), args.json, report.table())
    return 0
