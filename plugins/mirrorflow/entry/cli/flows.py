"""Commands about a flow's stream: run it, its status and health, start, stop, reset, take it over, hand it back."""

from __future__ import annotations

import argparse
import logging
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from mirrorflow.entry.cli.common import add_json, checked, load_config, show
from mirrorflow.errors import MirrorflowError
from mirrorflow.model import config as configmod
from mirrorflow.model import paths


def add(sub: Any) -> None:
    """Register this group's commands on the `mirrorflow` parser's subparsers."""
    p = sub.add_parser("stream", help="run the mirror stream of one flow in the foreground (PySpark "
                       "Structured Streaming) until SIGTERM or Ctrl-C")
    p.add_argument("--flow", required=True, metavar="A->B", help="the flow to mirror")
    p.add_argument("--master", help="Spark master URL (default: the flow's mirrorflow.stream.spark.master, "
                   "local[*])")
    p.add_argument("--checkpoint", metavar="DIR", help="the query's checkpoint folder (default: "
                   "$MIRRORFLOW_HOME/streams/A-B/checkpoint)")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus /metrics and JSON /status on PORT (default: the flow's "
                        "mirrorflow.metrics.port; none: no endpoint)")
    p.add_argument("--metrics-host", metavar="HOST",
                   help="the address the metrics are served on (default: the flow's mirrorflow.metrics.host, "
                        "127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--max-records-per-batch", type=_positive, metavar="N",
                   help="records per micro-batch at most (default: the flow's "
                        "mirrorflow.stream.max.records.per.batch, 250000)")
    p.add_argument("--trigger-ms", type=_at_least_0, metavar="MS",
                   help="micro-batch interval when idle (default: the flow's mirrorflow.stream.trigger.ms, 100)")
    p.add_argument("--linger-ms", type=_at_least_0, metavar="MS",
                   help="how long a micro-batch goes on copying what arrives, from its start (default: the flow's "
                        "mirrorflow.stream.linger.ms, 1500; 0: a batch copies its planned ranges only)")
    p.add_argument("--driver-memory", help="Spark driver heap (default: the flow's mirrorflow.stream.driver.memory, "
                   "1g)")
    p.set_defaults(run=cmd_stream)


    p = sub.add_parser("status", help="show each flow's state, throughput, lag and latency")
    p.add_argument("--flow", metavar="A->B", help="only this flow")
    add_json(p)
    p.set_defaults(run=cmd_status)


    p = sub.add_parser("health", help="each flow as the clusters see it: running or not, requested state, "
                       "heartbeat age, lag in records and seconds")
    p.add_argument("--flow", metavar="A->B", help="only this flow")
    add_json(p)
    p.set_defaults(run=cmd_health)


    p = sub.add_parser("stop", help="stop a flow's stream cleanly, wherever it runs (its running batch finishes), "
                       "and keep supervisors from restarting it")
    p.add_argument("--flow", required=True, metavar="A->B")
    p.add_argument("--reason", default="stopped from the command line")
    p.add_argument("--timeout", type=float, default=120.0, metavar="S", help="wait at most S seconds (default 120)")
    p.set_defaults(run=cmd_stop)


    p = sub.add_parser("reset", help="move where a stopped flow resumes a topic's partitions (earliest re-mirrors, "
                       "latest skips), logged")
    p.add_argument("--flow", required=True, metavar="A->B")
    p.add_argument("--topic", required=True, metavar="TOPIC", help="the source topic")
    p.add_argument("--partitions", metavar="P,P", type=_partition_list, help="only these partitions (default: all)")
    p.add_argument("--to", required=True, metavar="WHERE", type=checked(_reset_to),
                   help="earliest, latest, or a source offset")
    p.add_argument("--reason", default="")
    add_json(p)
    p.set_defaults(run=cmd_reset)


    p = _mirror_move(sub, "takeover", "--from", ["mm2", "mm1"], "take a flow over from a stopped MirrorMaker 2 (or "
                     "MirrorMaker 1, Go mirror maker) where it stopped: no re-copy, no gap; prints the plan per "
                     "partition first (exit 1 when it refuses)", cmd_takeover)
    p.add_argument("--group", help="with --from mm1: the consumer group the old mirror consumed the source with")
    p.add_argument("--window", type=_positive, metavar="N",
                   help="records of each remote partition's tail compared with the source (default 100,000): MM2's "
                        "copies in it translate groups exactly; with --from mm1, where the group's last copy is "
                        "looked for. A smaller window plans faster")
    _mirror_move(sub, "handback", "--to", ["mm2"], "give a stopped flow back to MirrorMaker 2 where mirrorflow "
                 "stopped: MM2's offsets and offset syncs are written so that MM2 resumes there; the flow is recorded "
                 "stopped", cmd_handback)

    p = sub.add_parser("start", help="record that a flow should run: its stream DAG starts it within a minute")
    p.add_argument("--flow", required=True, metavar="A->B")
    p.add_argument("--reason", default="started from the command line")
    p.add_argument("--wait", type=float, default=0.0, metavar="S", help="wait up to S seconds for it to run")
    p.set_defaults(run=cmd_start)


STATUS_CLUSTERS_S = 20.0  # `status` waits this long for the clusters' view, then shows the driver's figures alone


def cmd_stream(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import stream
    from mirrorflow.kafka.link import FlowLink

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # a line per call into the JVM: thousands an hour
    cfg = load_config(args)
    options = stream.StreamOptions(
        master=args.master, checkpoint=paths.checkpoint_folder(args.checkpoint) if args.checkpoint else None,
        metrics_port=args.metrics_port, metrics_host=args.metrics_host,
        max_records_per_batch=args.max_records_per_batch, trigger_ms=args.trigger_ms, linger_ms=args.linger_ms,
        driver_memory=args.driver_memory)
    stream.run(FlowLink.of(cfg, args.flow), options)
    return 0


def _health_within(cfg: configmod.MirrorConfig, flow: configmod.Flow, timeout_s: float) -> tuple[Any, str]:
    """The flow's health as the clusters say it, or (None, why) if they do not answer within `timeout_s` (a read
    of a leaderless partition waits out its election for much longer)."""
    import threading

    from mirrorflow.jobs import lifecycle
    from mirrorflow.kafka.link import FlowLink

    found: list[Any] = []

    def read() -> None:
        try:
            found.append(lifecycle.health(FlowLink.of(cfg, flow)))
        except MirrorflowError as exc:
            found.append(exc)

    # A daemon thread: a read still waiting when `status` has printed must not keep the command from exiting.
    reader = threading.Thread(target=read, name="status-health", daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not found:
        return None, f"no answer within {timeout_s:.0f} s"
    if isinstance(found[0], MirrorflowError):
        return None, str(found[0])
    return found[0], ""


def cmd_status(args: argparse.Namespace) -> int:
    from mirrorflow.status import metrics

    cfg = load_config(args)
    flows = [cfg.flow(args.flow)] if args.flow else list(cfg.enabled_flows)
    out, lines = [], []
    for flow in flows:
        # Running or not, and the lag, as the clusters say (what `health` says, wherever the driver runs); the
        # throughput and latency figures only the driver has, from its status file on this host.
        found, why = _health_within(cfg, flow, STATUS_CLUSTERS_S)
        if found is None:  # the target is down or degraded: what this host's driver last said still helps
            lines.append(f"flow {flow.name}: the clusters cannot say ({why})")
        if found is not None:
            lines.append(found.line())
        snap = metrics.read_status(metrics.status_file(flow))
        checkpoints = metrics.read_status(metrics.checkpoint_status_file(flow))
        if snap is None:
            alive = found is not None and found.alive
            snap = {"flow": flow.name, "state": "running elsewhere" if alive else "never run here"}
            lines.append(f"  driver figures: none on this host ({socket.gethostname()})" + (
                f"; the driver on {', '.join(found.holders)} keeps them (its metrics endpoint serves them)"
                if found is not None and alive else ""))
        else:
            age = max(time.time() - snap["updated"], 0)
            # One lag per flow: the clusters' (the source's ends now against the target's offset syncs) when they
            # answered, else the driver's as of its last batch, said as such.
            lines.append("  driver: " + metrics.progress_line(snap, with_lag=found is None)
                         + f" (as of {age:.0f} s ago" + (", lag as of its last batch)" if found is None else ")"))
            lines.extend(f"    {p['topic']}-{p['partition']}: {p['record-count']} records, "
                         + (f"lag {p['replication-lag-records']} at the driver's last batch, " if found is None else "")
                         + f"p99 {p['replication-latency-ms-p99']} ms since the driver started"
                         + (f", {p['refused-count']} refused (they came from the topic they would go to)"
                            if p.get("refused-count") else "")
                         + (f", {p['lost-count']} LOST (deleted on the source before mirrored)"
                            if p.get("lost-count") else "")
                         + (f", STUCK (paused, {p.get('paused-records', 0)} records to mirror when the target takes "
                            f"them): {p.get('stuck-why')}" if p.get("stuck") else "")
                         for p in snap["partitions"])
        if checkpoints is not None:
            snap["checkpoints"] = checkpoints
            lines.append("  " + metrics.checkpoint_line(checkpoints))
        snap["clusters"] = found.as_dict() if found is not None else None
        out.append(snap)
    show(out, args.json, "\n".join(lines))
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import lifecycle
    from mirrorflow.kafka.link import FlowLink

    cfg = load_config(args)
    flows = [cfg.flow(args.flow)] if args.flow else list(cfg.enabled_flows)
    found = [lifecycle.health(FlowLink.of(cfg, flow)) for flow in flows]
    lines = []
    for h in found:  # each flow's own lines under it
        lines.append(h.line())
        behind = h.behind()
        lines += [f"  behind: {b.topic}-{b.partition} {b.records} records" for b in behind[:10]]
        if len(behind) > 10:
            lines.append(f"  behind: {len(behind) - 10} more partitions (--json lists them all)")
    show([h.as_dict() for h in found], args.json, "\n".join(lines))
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import lifecycle
    from mirrorflow.kafka.link import FlowLink

    cfg = load_config(args)
    lifecycle.stop(FlowLink.of(cfg, args.flow), args.reason, args.timeout)
    print(f"flow {args.flow}: stopped; supervisors will not restart it until `mirrorflow start --flow {args.flow}`")
    return 0


def _mirror_move(sub: Any, name: str, mirror_flag: str, mirrors: list[str], text: str,
                 run: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    """A command that moves a flow between mirrorflow and another mirror (`--from` or `--to` it)."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=text)
    p.add_argument("--flow", required=True, metavar="A->B")
    p.add_argument(mirror_flag, dest="mirror", required=True, choices=mirrors, help="the other mirror")
    p.add_argument("--dry-run", action="store_true", help="show what it would do, change nothing")
    add_json(p)
    p.set_defaults(run=run)
    return p


def _reset_to(text: str) -> str | int:
    from mirrorflow.jobs import reset

    return reset.parse_to(text)


def _whole(text: str, least: int) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
    if n < least:
        raise argparse.ArgumentTypeError(f"{n}: must be at least {least}")
    return n


def _positive(text: str) -> int:
    return _whole(text, 1)


def _at_least_0(text: str) -> int:
    return _whole(text, 0)


def _partition_list(text: str) -> list[int]:
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected partition numbers, e.g. 0,3") from None


def cmd_reset(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import reset
    from mirrorflow.kafka.link import FlowLink

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    cfg = load_config(args)
    moves = reset.reset(FlowLink.of(cfg, args.flow), args.topic, args.to, args.partitions, args.reason)
    lines = [f"flow {args.flow}: reset {m.line()}" for m in moves]
    lines.append(f"the stream resumes there at its next start (mirrorflow start --flow {args.flow})")
    show([{"topic": m.topic, "partition": m.partition, "before": m.before, "after": m.after} for m in moves],
           args.json, "\n".join(lines))
    return 0


def cmd_takeover(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import takeover
    from mirrorflow.kafka.link import FlowLink

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    link = FlowLink.of(load_config(args), args.flow)
    planned = takeover.plan(link, args.mirror, args.group, window=args.window or takeover.WINDOW)
    applied = planned.allowed and not args.dry_run
    if applied:
        takeover.apply(link, planned)
    lines = planned.lines()
    lines.append("refused: nothing was written" if not planned.allowed else "dry run: nothing was written"
                 if args.dry_run else
                 f"taken over: the stream resumes there at its next start (mirrorflow start --flow {args.flow}); "
                 f"do not start {planned.mirror} on this flow again")
    show({"flow": planned.flow, "mirror": planned.mirror, "stopped": list(planned.stopped), "running": planned.running,
          "applied": applied,
          "partitions": [{"topic": p.topic, "partition": p.partition, "committed": p.committed,
                          "target_end": p.target_end, "resume": p.resume, "since_commit": p.since_commit,
                          "repeats": p.repeats, "refused": p.refused} for p in planned.partitions]},
         args.json, "\n".join(lines))
    return 0 if planned.allowed else 1


def cmd_handback(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import handback
    from mirrorflow.kafka.link import FlowLink

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    planned = handback.handback(FlowLink.of(load_config(args), args.flow), args.mirror, args.dry_run)
    lines = [f"flow {args.flow}: " + ("would hand back" if args.dry_run else "handed back") + " to MirrorMaker 2",
             *(f"  {h.line()}" for h in planned),
             "dry run: nothing was written" if args.dry_run else
             "start MirrorMaker 2 on the same properties: it resumes there (mirrorflow's stream stays stopped)"]
    show([{"topic": h.topic, "partition": h.partition, "position": h.position, "mm2_committed": h.mm2_committed,
           "commit": h.commit, "syncs": len(h.syncs)} for h in planned], args.json, "\n".join(lines))
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import lifecycle
    from mirrorflow.kafka.link import FlowLink

    cfg = load_config(args)
    runs = lifecycle.start(FlowLink.of(cfg, args.flow), args.reason, args.wait)
    print(f"flow {args.flow}: " + ("running" if runs else "requested running; its stream DAG (or "
                                   "`mirrorflow stream`) starts it"))
    return 0 if runs or not args.wait else 1
