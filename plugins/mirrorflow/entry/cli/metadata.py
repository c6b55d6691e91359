"""Commands about what surrounds the records: topics, configs and ACLs (plan, sync), topology, checkpoints
and offset translation."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

from mirrorflow.entry.cli.common import add_json, load_config, one_line, show
from mirrorflow.errors import MirrorflowError
from mirrorflow.model import config as configmod


def add(sub: Any) -> None:
    """Register this group's commands on the `mirrorflow` parser's subparsers."""
    p = sub.add_parser("plan", help="show, changing nothing, every topic, partition, config and ACL change "
                       "sync would make, and what it leaves alone")
    p.add_argument("--flow", metavar="A->B", help="only this flow (default: every enabled flow)")
    add_json(p)
    p.set_defaults(run=cmd_plan)


    p = sub.add_parser("sync", help="create and grow remote topics, sync topic configs and ACLs; prints what it did")
    p.add_argument("--flow", metavar="A->B", help="only this flow (default: every enabled flow)")
    p.add_argument("--only", type=_parts, default=("topics", "configs", "acls"), metavar="PARTS",
                   help="comma separated subset of topics,configs,acls (default: all)")
    add_json(p)
    p.set_defaults(run=cmd_sync)


    p = sub.add_parser("topology", help="print clusters, flows, upstream clusters and replication hops, from "
                       "the heartbeats each cluster holds")
    add_json(p)
    p.set_defaults(run=cmd_topology)


    p = sub.add_parser("checkpoint", help="translate consumer-group offsets and write MM2 checkpoints "
                       "(one round, or every emit.checkpoints.interval.seconds with --loop)")
    p.add_argument("--flow", metavar="A->B", help="only this flow (default: every enabled flow emitting checkpoints)")
    p.add_argument("--loop", action="store_true", help="keep running rounds until SIGTERM or Ctrl-C")
    add_json(p)
    p.set_defaults(run=cmd_checkpoint)


    p = sub.add_parser("translate", help="print where a consumer group would resume on the target, per partition")
    p.add_argument("--group", required=True, help="the consumer group on the source")
    p.add_argument("--source", required=True, metavar="ALIAS")
    p.add_argument("--target", required=True, metavar="ALIAS")
    add_json(p)
    p.set_defaults(run=cmd_translate)


FlowRun = Callable[[configmod.MirrorConfig, configmod.Flow], tuple[list[Any], list[Any]]]


def _parts(text: str) -> tuple[str, ...]:
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in parts if p not in ("topics", "configs", "acls")]
    if unknown or not parts:
        raise argparse.ArgumentTypeError(f"expected a comma separated subset of topics,configs,acls, got {text!r}")
    return parts


def cmd_plan(args: argparse.Namespace) -> int:
    from mirrorflow.kafka import admin_sync
    from mirrorflow.model.drift import Notice

    def planned(cfg: configmod.MirrorConfig, flow: configmod.Flow) -> tuple[list[Any], list[Any]]:
        changes = admin_sync.flow_plan(cfg, flow)
        return [c for c in changes if not isinstance(c, Notice)], [c for c in changes if isinstance(c, Notice)]

    return _per_flow(args, planned, "change(s) planned")


def cmd_sync(args: argparse.Namespace) -> int:
    from mirrorflow.kafka import admin_sync

    return _per_flow(args, lambda cfg, flow: admin_sync.sync_flow(cfg, flow, args.only), "change(s) made")


def _per_flow(args: argparse.Namespace, run: FlowRun, counted: str) -> int:
    """Run `run` (changes, notices) for each selected flow; a failing flow is one error line, the others run."""
    cfg = load_config(args)
    flows = [cfg.flow(args.flow)] if args.flow else list(cfg.enabled_flows)
    out, failed = [], 0
    for flow in flows:
        try:
            changes, notices = run(cfg, flow)
        except MirrorflowError as exc:
            failed += 1
            print(f"mirrorflow: error: flow {flow.name}: {one_line(str(exc))}", file=sys.stderr)
            continue
        out.append({"flow": flow.name, "changes": [{"kind": type(c).__name__, "text": str(c), **_fields(c)}
                                                    for c in changes],
                    "notices": [c.text for c in notices]})
        if not args.json:
            print(f"flow {flow.name}: {len(changes)} {counted}" + ("" if changes or notices else ", in sync"))
            for c in [*changes, *notices]:
                print(f"  {c}")
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
    return 1 if failed else 0


def _fields(change: Any) -> dict[str, Any]:
    import dataclasses

    return {k: (dict(v) if isinstance(v, dict) else str(v) if dataclasses.is_dataclass(v) else v)
            for k, v in dataclasses.asdict(change).items()}


def cmd_topology(args: argparse.Namespace) -> int:
    import dataclasses

    from mirrorflow.jobs import topology

    cfg = load_config(args)
    views = topology.view(cfg)
    data = [{**dataclasses.asdict(v), "reached_from": v.reached_from()} for v in views]
    show(data, args.json, "\n".join(topology.lines(cfg, views)))
    return 1 if all(v.error for v in views) else 0


def cmd_checkpoint(args: argparse.Namespace) -> int:
    import signal
    import threading

    from mirrorflow.jobs import checkpoints
    from mirrorflow.kafka.link import FlowLink

    cfg = load_config(args)
    flows = ([cfg.flow(args.flow)] if args.flow
             else [f for f in cfg.enabled_flows if f.flag("emit.checkpoints.enabled")])
    out: list[dict[str, Any]] = []

    def report(flow: configmod.Flow, results: list[checkpoints.GroupCheckpoints]) -> None:
        if args.json:
            out.extend({"flow": flow.name, "group": r.group, "group_sync": r.group_sync,
                        "partitions": [vars(p) for p in r.partitions]} for r in results)
            return
        for r in results:
            print(r.line(flow), flush=True)
        if not results:
            print(f"flow {flow.name}: no consumer group with offsets on mirrored topics", flush=True)

    if args.loop:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        checkpoints.loop(cfg, flows, report, stop)
    else:
        for flow in flows:
            report(flow, checkpoints.run_round(FlowLink.of(cfg, flow)))
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
    return 0


def cmd_translate(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import checkpoints
    from mirrorflow.kafka.link import FlowLink

    cfg = load_config(args)
    flow = cfg.flow(f"{args.source}->{args.target}")
    rows = checkpoints.translate_group(FlowLink.of(cfg, flow), args.group, compare_mm2=True)
    lines = [f"group {args.group}, {flow.name}: {len(rows)} partition(s)"]
    for r in rows:
        mm2 = "" if r.mm2_offset is None else f"  (MM2's rule: {r.mm2_offset})"
        how = "exact" if r.exact else f"inexact: {r.note}"
        lines.append(f"  {r.source_topic}-{r.partition} at {r.source_offset} -> {r.target_topic}-{r.partition} "
                     f"at {r.target_offset}, {how}{mm2}")
    if not rows:
        lines.append("  nothing to translate: the group has no offsets on topics this flow mirrored")
    show([vars(r) for r in rows], args.json, "\n".join(lines))
    return 0
