"""Commands that set a deployment up: validate, mm1, and the dev tools (local clusters, the embedded Airflow,
sample traffic)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mirrorflow.dev import local
from mirrorflow.entry.cli.common import Parser, add_json, config_path, load_config, show
from mirrorflow.model import config as configmod
from mirrorflow.model import legacy


def add(sub: Any) -> None:
    """Register this group's commands on the `mirrorflow` parser's subparsers."""
    p = sub.add_parser("validate", help="check the configuration and print what it defines")
    add_json(p)
    p.set_defaults(run=cmd_validate)


    p = sub.add_parser("local", help="run real local Kafka clusters for the config's localhost aliases")
    lsub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    lsub.required = True
    for action, text in (("up", "start (or resume) one KRaft broker per localhost alias"),
                         ("down", "stop the brokers this launcher started"),
                         ("status", "show the local brokers")):
        lp = lsub.add_parser(action, help=text)
        lp.add_argument("aliases", nargs="*", metavar="ALIAS", help="only these clusters")
        add_json(lp)
        if action == "up":
            lp.add_argument("--secure", action="store_true",
                            help="SASL (PLAIN, SCRAM) with KRaft's StandardAuthorizer and a super user")
        if action == "down":
            lp.add_argument("--purge", action="store_true", help="also delete the brokers' data")
        lp.set_defaults(run=cmd_local)


    p = sub.add_parser("airflow", help="run the embedded Airflow (standalone: scheduler, API server, DAG "
                       "processor, triggerer) with this project's DAGs")
    asub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
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
    add_json(p)
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
    from mirrorflow.kafka import clients, readers, writers

    cfg = load_config(args)
    clients.check(cfg)  # a store that cannot be opened fails here
    for target in sorted({f.target for f in cfg.enabled_flows}):  # what the stream's writer would refuse at start
        writers.check_tuning(clients.settings(cfg.cluster(target), "producer"), target)
    for source in sorted({f.source for f in cfg.enabled_flows}):  # and what its copier would
        readers.check_tuning(clients.settings(cfg.cluster(source), "consumer"), source)
    flows = ", ".join(f.name for f in cfg.enabled_flows) or "none"
    by_connection = " (the stream DAG: connection mirrorflow_spark)"
    streams = [f"{f.name} stream: master {f.stream.spark_master}"
               f"{'' if f.given('mirrorflow.stream.spark.master') else by_connection}"
               f", driver memory {f.stream.driver_memory}, at most {f.stream.max_records_per_batch:,} records per "
               f"batch, trigger {f.stream.trigger_ms} ms, linger {f.stream.linger_ms} ms" for f in cfg.enabled_flows]
    show(describe(cfg), args.json,
           "\n".join([f"{cfg.source}: valid: {len(cfg.clusters)} clusters ({', '.join(cfg.clusters)}); "
                      f"enabled flows: {flows}", *streams, *cfg.not_used]))
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
             f"{', secure (SASL + ACLs)' if s.secure else ''}{f', {s.tls}' if s.tls else ''}" for s in states]
    show([s.as_dict() for s in states], args.json, "\n".join(lines))
    return 0


def cmd_airflow(args: argparse.Namespace) -> int:
    from mirrorflow.dev import local_airflow

    project = Path(__file__).resolve().parents[4]
    if args.action == "up":
        load_config(args)  # a broken config fails here, in one line, not as DAG import errors
        state = local_airflow.up(project, Path(config_path(args)).resolve())
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
            cfg, Path(config_path(args)).resolve(), cluster, args.topic, args.group, args.rate)
    elif args.action == "stop":
        state = sample_traffic.stop(cluster)
    else:
        state = sample_traffic.read(cluster)
    if state is None:
        show({"cluster": cluster, "running": False}, args.json, f"traffic on {cluster}: never started")
        return 0
    show(sample_traffic.as_dict(state), args.json, state.line())
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
