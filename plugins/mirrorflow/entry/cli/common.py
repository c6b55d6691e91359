"""What every command shares: the parser class, the config it reads, how it prints and how it fails."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from mirrorflow.errors import MirrorflowError
from mirrorflow.model import config as configmod

DEFAULT_CONFIG = "include/mirrorflow.properties"


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def new_parser() -> tuple[argparse.ArgumentParser, Any]:
    """The `mirrorflow` parser with its global options, and its (required) command subparsers."""
    parser = Parser(prog="mirrorflow", description="Replicate Kafka clusters: a MirrorMaker 2 compatible "
                    "stream (PySpark) with sync, checkpoints and runbooks (Airflow).")
    parser.add_argument("--config", metavar="FILE",
                        help=f"connect-mirror-maker.properties (default: $MIRRORFLOW_CONFIG or {DEFAULT_CONFIG})")
    parser.add_argument("--clusters", action="extend", metavar="ALIAS[,ALIAS]",
                        type=lambda v: [a.strip() for a in v.split(",") if a.strip()],
                        help="as MM2's --clusters: only the flows whose target is one of these "
                             "(comma separated or repeated)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    return parser, sub


def run(args: argparse.Namespace) -> int:
    """Run the parsed command: an expected failure is one line per problem and its exit code, never a traceback."""
    from confluent_kafka import KafkaException

    from mirrorflow.kafka import clients

    command: Callable[[argparse.Namespace], int] = args.run
    if args.command != "stream":
        clients.quiet()
    try:
        try:
            return command(args)
        except KafkaException as exc:
            if args.command == "stream":  # unexpected in the long-running stream: its traceback is the report
                raise
            raise clients.operational(exc) from None
    except MirrorflowError as exc:
        print(f"mirrorflow: error: {one_line(str(exc))}", file=sys.stderr)
        for extra in getattr(exc, "problems", [])[1:]:
            print(f"mirrorflow: error: {one_line(str(extra))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")


def checked(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a library parser: its ConfigError becomes argparse's one-line usage error."""
    def convert(text: str) -> Any:
        from mirrorflow.errors import ConfigError

        try:
            return parse(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return convert


def one_line(text: str) -> str:
    return " ".join(text.split())


def config_path(args: argparse.Namespace) -> str:
    return str(args.config or os.environ.get("MIRRORFLOW_CONFIG") or DEFAULT_CONFIG)


def load_config(args: argparse.Namespace) -> configmod.MirrorConfig:
    cfg = configmod.load(config_path(args))
    for w in cfg.warnings:
        print(f"mirrorflow: warning: {w}", file=sys.stderr)
    if args.clusters:
        cfg = cfg.select_clusters(args.clusters)
    return cfg


def show(data: Any, as_json: bool, text: str) -> None:
    print(json.dumps(data, indent=2, sort_keys=True) if as_json else text)
