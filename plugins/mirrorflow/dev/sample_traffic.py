"""Sample traffic for the demo: a producer writing a few records a second to a topic, and a consumer group reading
it (and its remote copies, `primary.orders` on the backup) so checkpoints advance and a failover has a group to
move.

`mirrorflow traffic start` runs one background process per cluster (`python -m mirrorflow.dev.sample_traffic`), its
pid and its counts in `$MIRRORFLOW_HOME/traffic/{cluster}.json`; `stop` ends it (SIGTERM: the producer flushes and
the group commits before it exits). It is a demo aid, not a load generator: the rate is capped at 1,000/s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError
from confluent_kafka.admin import NewTopic

from mirrorflow.dev import daemons
from mirrorflow.errors import ConfigError, OperationalError
from mirrorflow.kafka import admin_sync, clients
from mirrorflow.model import config, paths

MAX_RATE = 1000.0
PARTITIONS = 3
STATUS_EVERY_S = 5.0
STARTUP_S = 3.0


@dataclass(frozen=True)
class Traffic:
    cluster: str
    topic: str
    group: str
    rate: float
    pid: int | None = None
    produced: int = 0
    consumed: int = 0
    updated: float | None = None

    @property
    def running(self) -> bool:
        """Whether the pid is still this cluster's traffic process (not a process that reused the pid)."""
        if self.pid is None:
            return False
        try:
            argv = Path(f"/proc/{self.pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return b"mirrorflow.dev.sample_traffic" in argv and self.cluster.encode() in argv

    def line(self) -> str:
        state = f"running (pid {self.pid})" if self.running else "stopped"
        return (f"traffic on {self.cluster}: {state}; {self.rate:g} records/s to {self.topic}, group {self.group} "
                f"reads {self.topic} and its remote copies; produced {self.produced}, consumed {self.consumed}")


def remote_copies_pattern(topic: str) -> str:
    """The group's subscription: the topic and any remote copy of it (`primary.orders`, `a.b.orders`)."""
    escaped = topic.replace(".", "\\.")
    return rf"^([^.]+\.)*{escaped}$"


def _state_file(cluster: str) -> Path:
    return paths.home() / "traffic" / f"{cluster}.json"


def read(cluster: str) -> Traffic | None:
    try:
        return Traffic(**json.loads(_state_file(cluster).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _write(state: Traffic) -> None:
    path = _state_file(state.cluster)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # the starting command and the process both write it
    tmp.write_text(json.dumps(state.__dict__))
    tmp.replace(path)


def start(cfg: config.MirrorConfig, config_path: Path, cluster: str, topic: str, group: str,
          rate: float) -> Traffic:
    """Create the topic if needed and start the background producer and group; returns at once."""
    if not 0 < rate <= MAX_RATE:
        raise ConfigError(f"--rate {rate:g}: expected more than 0 and at most {MAX_RATE:g} records/s")
    cluster_cfg = cfg.cluster(cluster)
    running = read(cluster)
    if running and running.running:
        return running
    admin = clients.admin(cluster_cfg)
    counts, brokers = admin_sync.partition_counts(admin, cluster)
    if topic not in counts:
        admin_sync.wait(admin.create_topics([NewTopic(topic, PARTITIONS, min(brokers, 3))]),
                        f"cannot create topic {topic} on {cluster}:", tolerate=(KafkaError.TOPIC_ALREADY_EXISTS,))
    log = _state_file(cluster).with_suffix(".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = daemons.keep(subprocess.Popen(
            [sys.executable, "-m", "mirrorflow.dev.sample_traffic", "--config", str(config_path), "--cluster", cluster,
             "--topic", topic, "--group", group, "--rate", str(rate)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
    state = Traffic(cluster, topic, group, rate, proc.pid, updated=time.time())
    _write(state)
    try:
        code = proc.wait(STARTUP_S)  # a bad setting or an unreachable cluster ends it at once
    except subprocess.TimeoutExpired:
        return state
    raise OperationalError(f"traffic on {cluster} exited ({code}) as it started; see {log}")


def stop(cluster: str, timeout_s: float = 20.0) -> Traffic | None:
    state = read(cluster)
    if state is None or not state.running or state.pid is None:
        return state
    with contextlib.suppress(ProcessLookupError):
        os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while state.running and time.monotonic() < deadline:
        time.sleep(0.2)
    if state.running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(state.pid, signal.SIGKILL)
    return read(cluster)


def run(cfg: config.MirrorConfig, cluster: str, topic: str, group: str, rate: float) -> None:
    """The background process: produce `rate` records/s and consume them in `group` until SIGTERM."""
    clients.quiet()
    target = cfg.cluster(cluster)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    counts = {"produced": 0, "consumed": 0}
    producer = clients.producer(target, **{"enable.idempotence": True})
    consumer = clients.consumer(target, **{"group.id": group, "enable.auto.commit": True,
                                           "auto.offset.reset": "earliest"})
    consumer.subscribe([remote_copies_pattern(topic)])

    def produce() -> None:
        n, began = 0, time.monotonic()
        try:
            while not done.is_set():
                producer.produce(topic, json.dumps({"order": n, "at": time.time()}).encode(), f"order-{n}".encode())
                producer.poll(0)
                n += 1
                counts["produced"] = n
                done.wait(max(0.0, began + n / rate - time.monotonic()))
        except Exception as exc:  # the process ends with it, and says why in its log: no silent half-demo
            print(f"mirrorflow traffic: producer failed: {exc!r}", file=sys.stderr, flush=True)
            done.set()
        producer.flush(10)

    writer = threading.Thread(target=produce, name="sample-producer", daemon=True)
    writer.start()
    last = 0.0
    try:
        while not done.is_set():
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                counts["consumed"] += 1
            if time.monotonic() - last > STATUS_EVERY_S:
                last = time.monotonic()
                _write(Traffic(cluster, topic, group, rate, os.getpid(), counts["produced"], counts["consumed"],
                               time.time()))
    finally:
        writer.join(15)
        consumer.close()  # commits what was read
        _write(Traffic(cluster, topic, group, rate, None, counts["produced"], counts["consumed"], time.time()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mirrorflow.dev.sample_traffic")
    parser.add_argument("--config", required=True)
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--rate", type=float, required=True)
    args = parser.parse_args(argv)
    try:
        run(config.load(args.config), args.cluster, args.topic, args.group, args.rate)
    except (ConfigError, OperationalError) as exc:
        print(f"mirrorflow traffic: error: {exc}", file=sys.stderr)
        return 2
    return 0


def as_dict(state: Traffic) -> dict[str, Any]:
    return {**state.__dict__, "running": state.running}


if __name__ == "__main__":
    sys.exit(main())
