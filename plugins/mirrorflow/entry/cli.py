"""`mirrorflow` command line: parses, calls the library, prints. Exit 0 ok, 1 operational, 2 usage/config."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from mirrorflow.dev import local
from mirrorflow.errors import MirrorflowError
from mirrorflow.jobs import ranges
from mirrorflow.model import config as configmod
from mirrorflow.model import legacy

DEFAULT_CONFIG = "include/mirrorflow.properties"

class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")


def _parts(text: str) -> tuple[str, ...]:
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in parts if p not in ("topics", "configs", "acls")]
    if unknown or not parts:
        raise argparse.ArgumentTypeError(f"expected a comma separated subset of topics,configs,acls, got {text!r}")
    return parts


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mirrorflow", description="Replicate Kafka clusters: a MirrorMaker 2 compatible "
                     "stream (PySpark) with sync, checkpoints and runbooks (Airflow).")
    parser.add_argument("--config", metavar="FILE",
                        help=f"connect-mirror-maker.properties (default: $MIRRORFLOW_CONFIG or {DEFAULT_CONFIG})")
    parser.add_argument("--clusters", action="extend", metavar="ALIAS[,ALIAS]",
                        type=lambda v: [a.strip() for a in v.split(",") if a.strip()],
                        help="as MM2's --clusters: only the flows whose target is one of these "
                             "(comma separated or repeated)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("validate", help="check the configuration and print what it defines")
    _add_json(p)
    p.set_defaults(run=cmd_validate)

    p = sub.add_parser("local", help="run real local Kafka clusters for the config's localhost aliases")
    lsub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    lsub.required = True
    for action, text in (("up", "start (or resume) one KRaft broker per localhost alias"),
                         ("down", "stop the brokers this launcher started"),
                         ("status", "show the local brokers")):
        lp = lsub.add_parser(action, help=text)
        lp.add_argument("aliases", nargs="*", metavar="ALIAS", help="only these clusters")
        _add_json(lp)
        if action == "up":
            lp.add_argument("--secure", action="store_true",
                            help="SASL (PLAIN, SCRAM) with KRaft's StandardAuthorizer and a super user")
        if action == "down":
            lp.add_argument("--purge", action="store_true", help="also delete the brokers' data")
        lp.set_defaults(run=cmd_local)

    p = sub.add_parser("airflow", help="run the embedded Airflow (standalone: scheduler, API server, DAG "
                       "processor, triggerer) with this project's DAGs")
    asub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    asub.required = True
    for action, text in (("up", "start it in the background and wait until its API answers"),
                         ("down", "stop it and every task it runs"), ("status", "show it")):
        asub.add_parser(action, help=text).set_defaults(run=cmd_airflow)

    p = sub.add_parser("traffic", help="sample traffic for the demo: a producer (a few records/s) and a consumer "
                       "group reading the topic and its remote copies, in the background")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--cluster", metavar="ALIAS", help="where (default: the first enabled flow's source)")
    p.add_argument("--topic", default="orders", help="the topic written (created with 3 partitions if missing)")
    p.add_argument("--group", default="orders-app", help="the consumer group reading it")
    p.add_argument("--rate", type=float, default=5.0, metavar="N", help="records per second (default 5)")
    _add_json(p)
    p.set_defaults(run=cmd_traffic)

    p = sub.add_parser("mm1", help="map MirrorMaker 1 / Go mirror maker flags onto an MM2 config")
    p.add_argument("--consumer.config", dest="consumer_configs", action="append", default=[], metavar="FILE",
                   help="source cluster consumer properties (repeat for several sources)")
    p.add_argument("--producer.config", dest="producer_config", metavar="FILE", help="target producer properties")
    p.add_argument("--whitelist", help="regex of topics to mirror")
    p.add_argument("--blacklist", help="regex of topics not to mirror")
    p.add_argument("--prefix", help="prefix for remote topic names")
    p.add_argument("--num.streams", dest="num_streams", type=int, default=1, help="parallelism (tasks.max)")
    p.add_argument("--num.producers", dest="num_producers", type=int, default=1, help="accepted, not needed")
    p.add_argument("--preserve.partitions", dest="preserve_partitions", action="store_true",
                   help="accepted: mirrorflow always keeps partitions")
    p.add_argument("--preserve.order", dest="preserve_order", action="store_true",
                   help="accepted: mirrorflow always keeps order")
    p.add_argument("--output", metavar="FILE", help="write the MM2 properties here (mode 0600, secrets kept)")
    p.set_defaults(run=cmd_mm1)

    p = sub.add_parser("stream", help="run the mirror stream of one flow in the foreground (PySpark "
                       "Structured Streaming) until SIGTERM or Ctrl-C")
    p.add_argument("--flow", required=True, metavar="A->B", help="the flow to mirror")
    p.add_argument("--master", default="local[*]", help="Spark master URL (default: local[*])")
    p.add_argument("--checkpoint", metavar="DIR", help="the query's checkpoint folder (default: "
                   "$MIRRORFLOW_HOME/streams/A-B/checkpoint)")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus /metrics and JSON /status on PORT (default: the flow's "
                        "mirrorflow.metrics.port; none: no endpoint)")
    p.add_argument("--metrics-host", metavar="HOST",
                   help="the address the metrics are served on (default: the flow's mirrorflow.metrics.host, "
                        "127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--max-records-per-batch", type=int, default=100_000, metavar="N",
                   help="records per micro-batch at most (default: 100000)")
    p.add_argument("--trigger-ms", type=int, default=100, metavar="MS",
                   help="micro-batch interval when idle (default: 100)")
    p.add_argument("--driver-memory", default="1g", help="Spark driver heap (default: 1g)")
    p.set_defaults(run=cmd_stream)

    p = sub.add_parser("status", help="show each flow's state, throughput, lag and latency")
    p.add_argument("--flow", metavar="A->B", help="only this flow")
    _add_json(p)
    p.set_defaults(run=cmd_status)

    p = sub.add_parser("plan", help="show, changing nothing, every topic, partition, config and ACL change "
                       "sync would make, and what it leaves alone")
    p.add_argument("--flow", metavar="A->B", help="only this flow (default: every enabled flow)")
    _add_json(p)
    p.set_defaults(run=cmd_plan)

    p = sub.add_parser("sync", help="create and grow remote topics, sync topic configs and ACLs; prints what it did")
    p.add_argument("--flow", metavar="A->B", help="only this flow (default: every enabled flow)")
    p.add_argument("--only", type=_parts, default=("topics", "configs", "acls"), metavar="PARTS",
                   help="comma separated subset of topics,configs,acls (default: all)")
    _add_json(p)
    p.set_defaults(run=cmd_sync)

    p = sub.add_parser("topology", help="print clusters, flows, upstream clusters and replication hops, from "
                       "the heartbeats each cluster holds")
    _add_json(p)
    p.set_defaults(run=cmd_topology)

    p = sub.add_parser("checkpoint", help="translate consumer-group offsets and write MM2 checkpoints "
                       "(one round, or every emit.checkpoints.interval.seconds with --loop)")
    p.add_argument("--flow", metavar="A->B", help="only this flow (default: every enabled flow emitting checkpoints)")
    p.add_argument("--loop", action="store_true", help="keep running rounds until SIGTERM or Ctrl-C")
    _add_json(p)
    p.set_defaults(run=cmd_checkpoint)

    p = sub.add_parser("translate", help="print where a consumer group would resume on the target, per partition")
    p.add_argument("--group", required=True, help="the consumer group on the source")
    p.add_argument("--source", required=True, metavar="ALIAS")
    p.add_argument("--target", required=True, metavar="ALIAS")
    _add_json(p)
    p.set_defaults(run=cmd_translate)

    p = sub.add_parser("health", help="each flow as the clusters see it: running or not, requested state, "
                       "heartbeat age, lag in records and seconds")
    p.add_argument("--flow", metavar="A->B", help="only this flow")
    _add_json(p)
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
    p.add_argument("--to", required=True, metavar="WHERE", type=_checked(_reset_to),
                   help="earliest, latest, or a source offset")
    p.add_argument("--reason", default="")
    _add_json(p)
    p.set_defaults(run=cmd_reset)

    p = sub.add_parser("start", help="record that a flow should run: its stream DAG starts it within a minute")
    p.add_argument("--flow", required=True, metavar="A->B")
    p.add_argument("--reason", default="started from the command line")
    p.add_argument("--wait", type=float, default=0.0, metavar="S", help="wait up to S seconds for it to run")
    p.set_defaults(run=cmd_start)

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
        _add_json(p)
        p.set_defaults(run=cmd_runbook)

    p = sub.add_parser("audit", help="prove by content that a flow's target holds every source record of a range "
                       "(Spark batch job; exit 1 when anything is missing or differs)")
    p.add_argument("--flow", required=True, metavar="A->B")
    _add_range(p)
    p.add_argument("--full", action="store_true", help="read every record on both sides, even where the stream's "
                   "digest units would prove the copy from the target alone")
    p.set_defaults(run=cmd_audit)

    p = sub.add_parser("backfill", help="copy a bounded range of a flow once, with the stream's fidelity (Spark "
                       "batch job; skips what the target holds)")
    p.add_argument("--flow", required=True, metavar="A->B")
    start = p.add_mutually_exclusive_group(required=True)
    start.add_argument("--from-offsets", metavar="JSON", type=_checked(ranges.parse_offsets),
                       help='where to start, per partition: {"orders": {"0": 10, "1": -2}} (-2: the earliest)')
    _add_range(p, start)
    p.add_argument("--pause", action="store_true",
                   help="stop the flow's running stream for the backfill and ask it to run again after")
    p.set_defaults(run=cmd_backfill)
    return parser


def _reset_to(text: str) -> str | int:
    from mirrorflow.jobs import reset

    return reset.parse_to(text)


def _partition_list(text: str) -> list[int]:
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected partition numbers, e.g. 0,3") from None


def _checked(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a library parser: its ConfigError becomes argparse's one-line usage error."""
    def convert(text: str) -> Any:
        from mirrorflow.errors import ConfigError

        try:
            return parse(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix("--from-offsets: ").removeprefix("--to ")) from None
    return convert


def _add_range(p: argparse.ArgumentParser, start: Any = None) -> None:
    (start or p).add_argument("--from-time", metavar="T", type=_checked(ranges.parse_time),
                              help="the first record's time: ISO 8601 (UTC if no zone) or epoch ms")
    p.add_argument("--to-time", metavar="T", type=_checked(ranges.parse_time),
                   help="stop before records at or after T (default: now)")
    p.add_argument("--topics", metavar="REGEX", help="only source topics matching REGEX (default: the flow's)")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    _add_json(p)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    if args.command != "stream":
        from mirrorflow.kafka import clients

        clients.quiet()
    try:
        return run(args)
    except MirrorflowError as exc:
        print(f"mirrorflow: error: {_one_line(str(exc))}", file=sys.stderr)
        for extra in getattr(exc, "problems", [])[1:]:
            print(f"mirrorflow: error: {_one_line(str(extra))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def spark_submit_main(command: str, argv: Sequence[str]) -> int:
    """A spark_jobs/ entry point: `command`'s arguments plus the global --config, wherever it is given."""
    args, front = list(argv), []
    while "--config" in args:
        at = args.index("--config")
        front += args[at:at + 2]
        args = args[:at] + args[at + 2:]
    return main([*front, command, *args])


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _config_path(args: argparse.Namespace) -> str:
    return str(args.config or os.environ.get("MIRRORFLOW_CONFIG") or DEFAULT_CONFIG)


def load_config(args: argparse.Namespace) -> configmod.MirrorConfig:
    cfg = configmod.load(_config_path(args))
    for w in cfg.warnings:
        print(f"mirrorflow: warning: {w}", file=sys.stderr)
    if args.clusters:
        cfg = cfg.select_clusters(args.clusters)
    return cfg


def _print(data: Any, as_json: bool, text: str) -> None:
    print(json.dumps(data, indent=2, sort_keys=True) if as_json else text)


def describe(cfg: configmod.MirrorConfig) -> dict[str, Any]:
    """What a config defines, secrets masked (for `validate --json`)."""
    return {
        "config": cfg.source,
        "clusters": {a: {"bootstrap.servers": c.bootstrap_servers, "exactly_once": c.exactly_once}
                     for a, c in cfg.clusters.items()},
        "flows": [{"name": f.name, "enabled": f.enabled, "source": f.source, "target": f.target,
                   "policy": type(f.policy).__name__,
                   "settings": {k: s.shown for k, s in sorted(f.settings.items())}} for f in cfg.flows],
        "warnings": list(cfg.warnings),
        "not_used": list(cfg.not_used),
    }


def cmd_validate(args: argparse.Namespace) -> int:
    from mirrorflow.kafka import clients
    from mirrorflow.spark import stream_writer

    cfg = load_config(args)
    for target in sorted({f.target for f in cfg.enabled_flows}):  # what the stream's writer would refuse at start
        stream_writer.check_producer_tuning(clients.settings(cfg.cluster(target), "producer"), target)
    flows = ", ".join(f.name for f in cfg.enabled_flows) or "none"
    _print(describe(cfg), args.json,
           "\n".join([f"{cfg.source}: valid: {len(cfg.clusters)} clusters ({', '.join(cfg.clusters)}); "
                      f"enabled flows: {flows}", *cfg.not_used]))
    return 0


def cmd_local(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    if args.action == "up":
        states = local.up(cfg, args.aliases, secure=args.secure)
    elif args.action == "down":
        states = local.down(cfg, args.aliases, purge=args.purge)
    else:
        states = local.status(cfg, args.aliases)
    lines = [f"{s.alias}: {'running' if s.running else 'stopped'}"
             f"{f' (pid {s.pid})' if s.pid else ''} on port {s.port}"
             f"{', secure (SASL + ACLs)' if s.secure else ''}" for s in states]
    _print([s.as_dict() for s in states], args.json, "\n".join(lines))
    return 0


def cmd_airflow(args: argparse.Namespace) -> int:
    from mirrorflow.dev import local_airflow

    project = Path(__file__).resolve().parents[3]
    if args.action == "up":
        load_config(args)  # a broken config fails here, in one line, not as DAG import errors
        state = local_airflow.up(project, Path(_config_path(args)).resolve())
    elif args.action == "down":
        state = local_airflow.down()
    else:
        state = local_airflow.status()
    if not state.running:
        print(f"Airflow: not running (home {state.home})")
        return 0 if args.action != "up" else 1
    print(f"Airflow: running (pid {state.pid}), UI and API at {state.url}, home {state.home}")
    fresh = " (just generated; mode 0600)" if state.new_password else ""
    print(f"  login: {local_airflow.USER}, password in {state.home / 'passwords.json'}{fresh}")
    return 0


def cmd_traffic(args: argparse.Namespace) -> int:
    from mirrorflow.dev import sample_traffic

    cfg = load_config(args)
    cluster = args.cluster or (cfg.enabled_flows[0].source if cfg.enabled_flows else next(iter(cfg.clusters)))
    cfg.cluster(cluster)  # an unknown alias fails here, in one line
    if args.action == "start":
        state: sample_traffic.Traffic | None = sample_traffic.start(
            cfg, Path(_config_path(args)).resolve(), cluster, args.topic, args.group, args.rate)
    elif args.action == "stop":
        state = sample_traffic.stop(cluster)
    else:
        state = sample_traffic.read(cluster)
    if state is None:
        _print({"cluster": cluster, "running": False}, args.json, f"traffic on {cluster}: never started")
        return 0
    _print(sample_traffic.as_dict(state), args.json, state.line())
    return 0


def cmd_mm1(args: argparse.Namespace) -> int:
    flags = legacy.LegacyFlags(args.consumer_configs, args.producer_config, args.whitelist, args.blacklist,
                               args.prefix, args.num_streams, args.preserve_partitions, args.preserve_order)
    entries = legacy.to_properties(flags)
    text = legacy.render(entries, mask=False)
    cfg = configmod.from_text(text, source=args.output or "<mm1 flags>")
    if args.output:
        out = Path(args.output)
        out.write_text(text)
        out.chmod(0o600)
        print(f"wrote {out}: {len(cfg.clusters)} clusters, flows {', '.join(f.name for f in cfg.enabled_flows)}")
    else:
        print(legacy.render(entries, mask=True), end="")
    return 0


def cmd_stream(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import stream

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # a line per call into the JVM: thousands an hour
    cfg = load_config(args)
    options = stream.StreamOptions(
        master=args.master, checkpoint=Path(args.checkpoint) if args.checkpoint else None,
        metrics_port=args.metrics_port, metrics_host=args.metrics_host,
        max_records_per_batch=args.max_records_per_batch, trigger_ms=args.trigger_ms, driver_memory=args.driver_memory)
    stream.run(cfg, args.flow, options)
    return 0


STATUS_CLUSTERS_S = 20.0  # `status` waits this long for the clusters' view, then shows the driver's figures alone


def _health_within(cfg: configmod.MirrorConfig, flow: configmod.Flow, timeout_s: float) -> tuple[Any, str]:
    """The flow's health as the clusters say it, or (None, why) if they do not answer within `timeout_s` (a read
    of a leaderless partition waits out its election for much longer)."""
    import threading

    from mirrorflow.jobs import lifecycle

    found: list[Any] = []

    def read() -> None:
        try:
            found.append(lifecycle.health(cfg, flow))
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
            lines.append("  driver: " + metrics.progress_line(snap) + f" (as of {age:.0f} s ago)")
            lines.extend(f"    {p['topic']}-{p['partition']}: {p['record-count']} records, lag "
                         f"{p['replication-lag-records']}, p99 {p['replication-latency-ms-p99']} ms"
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
    _print(out, args.json, "\n".join(lines))
    return 0


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


FlowRun = Callable[[configmod.MirrorConfig, configmod.Flow], tuple[list[Any], list[Any]]]


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
            print(f"mirrorflow: error: flow {flow.name}: {_one_line(str(exc))}", file=sys.stderr)
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
    _print(data, args.json, "\n".join(topology.lines(cfg, views)))
    return 1 if all(v.error for v in views) else 0


def cmd_checkpoint(args: argparse.Namespace) -> int:
    import signal
    import threading

    from mirrorflow.jobs import checkpoints

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
            report(flow, checkpoints.run_round(cfg, flow))
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
    return 0


def cmd_translate(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import checkpoints

    cfg = load_config(args)
    flow = cfg.flow(f"{args.source}->{args.target}")
    rows = checkpoints.translate_group(cfg, flow, args.group, compare_mm2=True)
    lines = [f"group {args.group}, {flow.name}: {len(rows)} partition(s)"]
    for r in rows:
        mm2 = "" if r.mm2_offset is None else f"  (MM2's rule: {r.mm2_offset})"
        how = "exact" if r.exact else f"inexact: {r.note}"
        lines.append(f"  {r.source_topic}-{r.partition} at {r.source_offset} -> {r.target_topic}-{r.partition} "
                     f"at {r.target_offset}, {how}{mm2}")
    if not rows:
        lines.append("  nothing to translate: the group has no offsets on topics this flow mirrored")
    _print([vars(r) for r in rows], args.json, "\n".join(lines))
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import lifecycle

    cfg = load_config(args)
    flows = [cfg.flow(args.flow)] if args.flow else list(cfg.enabled_flows)
    found = [lifecycle.health(cfg, flow) for flow in flows]
    lines = [h.line() for h in found]
    lines += [f"  behind: {b.topic}-{b.partition} {b.records} records" for h in found for b in h.behind()[:10]]
    _print([h.as_dict() for h in found], args.json, "\n".join(lines))
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import lifecycle

    cfg = load_config(args)
    lifecycle.stop(cfg, cfg.flow(args.flow), args.reason, args.timeout)
    print(f"flow {args.flow}: stopped; supervisors will not restart it until `mirrorflow start --flow {args.flow}`")
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import reset

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    cfg = load_config(args)
    moves = reset.reset(cfg, args.flow, args.topic, args.to, args.partitions, args.reason)
    lines = [f"flow {args.flow}: reset {m.line()}" for m in moves]
    lines.append(f"the stream resumes there at its next start (mirrorflow start --flow {args.flow})")
    _print([{"topic": m.topic, "partition": m.partition, "before": m.before, "after": m.after} for m in moves],
           args.json, "\n".join(lines))
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import lifecycle

    cfg = load_config(args)
    runs = lifecycle.start(cfg, cfg.flow(args.flow), args.reason, args.wait)
    print(f"flow {args.flow}: " + ("running" if runs else "requested running; its stream DAG (or "
                                   "`mirrorflow stream`) starts it"))
    return 0 if runs or not args.wait else 1


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
    _print(result, args.json, result["markdown"])
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import audit
    from mirrorflow.jobs.ranges import Window

    cfg = load_config(args)
    report = audit.run(cfg, args.flow, topics=args.topics, window=Window(args.from_time, args.to_time),
                       master=args.master, full=args.full)
    _print(report.as_dict(), args.json, report.table())
    return 0 if report.complete else 1


def cmd_backfill(args: argparse.Namespace) -> int:
    from mirrorflow.jobs import backfill
    from mirrorflow.jobs.ranges import Window

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    cfg = load_config(args)
    report = backfill.run(cfg, args.flow, topics=args.topics, window=Window(args.from_time, args.to_time),
                          from_offsets=args.from_offsets, pause=args.pause, master=args.master)
    _print(report.as_dict(), args.json, report.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
