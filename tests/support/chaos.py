"""Chaos: SIGKILL what copies, under steady traffic and a backlog, in each delivery mode; then check every record.

    PYTHONPATH=tests .venv/bin/python -m support.chaos [--kills 20] [--modes at-least-once,...] [--seed 1]

`make chaos` runs it whole; tests/test_chaos.py runs a short round of it. One source broker and a three-broker
target (replicas 3, min.insync.replicas 2) of the project's launcher; each mode is a flow of its own (its own
cluster aliases for the same brokers) over a topic of its own. Kills take turns over four kinds:
  worker         the Python worker of Spark's daemon that used the most CPU just before (a copying task's);
  planner        the data source's planner (Spark's streaming source runner);
  tree           every process of the stream (the harness then launches it again, as a supervisor would);
  target broker  one broker of the target, started again after a few seconds.
Each kill comes at a random point of the copy, then at the first moment the target holds records of an open
transaction (at most IN_FLIGHT_WAIT_S later): a kill counts as in flight when records written to the target were
not yet committed at that moment. After the last kill the traffic stops, every committed source record must reach the
target with its first copies in source order, and under exactly-once none twice.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, IsolationLevel, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from mirrorflow.dev import local
from mirrorflow.model import config

from support import ports
from support.streams import QUIET, StreamProcess, create_topic, mirrored_offsets, origin, read_partition, wait_for

REPO = Path(__file__).resolve().parents[2]
MODES = {
    "at-least-once": "",
    "transactional source": "{source}.consumer.isolation.level = read_committed\n",
    "exactly-once": "{target}.exactly.once.source.support = enabled\n",
}
KINDS = ("worker", "planner", "tree", "target broker")
PARTITIONS = 12
IN_FLIGHT_WAIT_S = 3.0
PLANNER_MODULE = b"pyspark.sql.streaming.python_streaming_source_runner"
DAEMONS = (b"pyspark.daemon", b"mirrorflow.spark.spark_daemon")  # what Spark's Python workers are forked from


@dataclass
class Kill:
    kind: str
    in_flight: int  # records written to the target but not committed at the kill (0: none)
    resumed_s: float | None  # from the kill (a tree kill: the relaunch) until a record produced after it is committed
    relaunched: bool  # the stream's process had to be launched again


@dataclass
class ModeRun:
    mode: str
    kills: list[Kill] = field(default_factory=list)
    records: int = 0  # committed source records
    missing: int = 0
    out_of_order: int = 0  # partitions whose first copies are not in source order
    duplicates: int = 0  # target records that repeat an earlier copy
    unexpected: int = 0  # copies of no committed source record (an aborted transaction's)
    altered: int = 0  # copies whose key or value differs from their source record's
    unexpected_exits: int = 0  # stream exits after a kill of less than the tree (relaunched; shown, not a failure)
    graceful_stop: bool = False

    @property
    def in_flight(self) -> int:
        return sum(1 for k in self.kills if k.in_flight)

    def failures(self, kills_wanted: int) -> list[str]:
        out = []
        if len(self.kills) < kills_wanted:
            out.append(f"{len(self.kills)} kills, not {kills_wanted}")
        if self.in_flight * 2 < len(self.kills):
            out.append(f"only {self.in_flight} of {len(self.kills)} kills landed with records in flight")
        if self.missing:
            out.append(f"{self.missing} records missing on the target")
        if self.altered:
            out.append(f"{self.altered} copies whose key or value differs from the source's")
        if self.unexpected:
            out.append(f"{self.unexpected} copies of no committed source record")
        if self.out_of_order:
            out.append(f"{self.out_of_order} partitions' first copies out of order")
        if self.mode == "exactly-once" and self.duplicates:
            out.append(f"{self.duplicates} duplicates under exactly-once")
        if any(k.resumed_s is None for k in self.kills):
            out.append("no copy after a kill")
        if not self.graceful_stop:
            out.append("the stream did not stop cleanly at the end")
        return [f"{self.mode}: {o}" for o in out]


class Traffic:
    """Steady records into the source topic in a thread: idempotent, or in transactions of which every fifth is
    aborted (a transactional source). `committed` counts what a read_committed reader will see."""

    def __init__(self, bootstrap: str, topic: str, *, transactional: bool, rate: int) -> None:
        self.topic, self.transactional, self.rate = topic, transactional, rate
        settings = {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, **QUIET}
        if transactional:
            settings["transactional.id"] = f"chaos-{topic}"
        self.producer = Producer(settings)
        if transactional:
            self.producer.init_transactions(30)
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-traffic", daemon=True)

    def backlog(self, n: int) -> None:
        self._write(n)
        self.producer.flush(60)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.producer.flush(60)

    def _run(self) -> None:
        chunk = max(1, self.rate // 20)
        while not self._stop.is_set():
            began = time.monotonic()
            self._write(chunk)
            self._stop.wait(max(0.0, 0.05 - (time.monotonic() - began)))

    def _write(self, n: int) -> None:
        per_transaction = 40
        for at in range(0, n, per_transaction):
            count = min(per_transaction, n - at)
            if self.transactional:
                self.producer.begin_transaction()
            for i in range(count):
                self.producer.produce(self.topic, f"v{self.sent + i}".encode(), f"k{self.sent + i}".encode(),
                                      partition=(self.sent + i) % PARTITIONS)
            self.producer.poll(0)
            if self.transactional:
                if (self.sent // per_transaction) % 5 == 4:
                    self.producer.flush(30)  # in the log, then aborted: the flow must skip them
                    self.producer.abort_transaction(30)
                else:
                    self.producer.commit_transaction(30)
            self.sent += count


def _processes(session: int) -> dict[int, tuple[int, list[bytes], int]]:
    """pid -> (parent, command line, CPU ticks) of every live process of the stream's session."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[0] == "Z" or int(fields[3]) != session:
                continue
            pid = int(stat.parent.name)
            out[pid] = (int(fields[1]), Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"),
                        int(fields[11]) + int(fields[12]))
    return out


def _workers(session: int) -> dict[int, int]:
    """Spark's Python workers (the daemon's forked children) of the session: pid -> CPU ticks so far."""
    procs = _processes(session)
    daemons = {pid for pid, (_, args, _) in procs.items()
               if any(d in args for d in DAEMONS) and b"pyspark.worker" in args}
    return {pid: ticks for pid, (parent, _, ticks) in procs.items() if parent in daemons}


def _planner(session: int) -> int | None:
    return next((pid for pid, (_, args, _) in _processes(session).items() if PLANNER_MODULE in args), None)


class Target:
    """The remote topic's ends on the target: in flight (uncommitted) records, and the next committed copy."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})

    def ends(self, isolation: IsolationLevel) -> list[int] | None:
        asked = {TopicPartition(self.topic, p): OffsetSpec.latest() for p in range(PARTITIONS)}
        try:
            answers = self.admin.list_offsets(asked, isolation_level=isolation, request_timeout=5)
            found = [answers[tp].result(timeout=6).offset for tp in asked]
            if any(o < 0 for o in found):  # a partition whose leader was just killed
                return None
            return found
        except (KafkaException, TimeoutError):
            # A broker just killed, a leader moving; a client that lost a broker may not answer again: a new one.
            self.admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})
            return None

    def in_flight(self) -> int:
        """Records written to the target that a read_committed reader cannot see yet (an open transaction's)."""
        high, stable = self.ends(IsolationLevel.READ_UNCOMMITTED), self.ends(IsolationLevel.READ_COMMITTED)
        if high is None or stable is None:
            return 0
        return sum(max(0, h - s) for h, s in zip(high, stable, strict=True))

    def next_copy(self, since: float, produced: int, timeout: float, stream: StreamProcess) -> float | None:
        """Seconds from `since` (monotonic) until a record the traffic produced after its first `produced` is
        committed on the target."""
        ends = None
        while ends is None and time.monotonic() < since + timeout:
            ends = self.ends(IsolationLevel.READ_UNCOMMITTED)
        if ends is None:
            return None
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "chaos-watch", "enable.auto.commit": False,
                      "isolation.level": "read_committed", "fetch.wait.max.ms": 50, **QUIET})
        try:
            c.assign([TopicPartition(self.topic, p, end) for p, end in enumerate(ends)])
            while time.monotonic() < since + timeout:
                for m in c.consume(500, 0.2):
                    if not m.error() and int(m.value()[1:]) >= produced:
                        return time.monotonic() - since
                if not stream.alive():
                    return None
            return None
        finally:
            c.close()


def _kill(kind: str, stream: StreamProcess, target_brokers: list[local.LocalBroker], base: config.MirrorConfig,
          target: Target, traffic: Traffic, rng: random.Random) -> Kill:
    assert stream.proc is not None
    session = stream.proc.pid
    time.sleep(rng.uniform(1.0, 5.0))
    before = _workers(session)
    deadline = time.monotonic() + IN_FLIGHT_WAIT_S
    in_flight = target.in_flight()
    while not in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
        in_flight = target.in_flight()
    relaunched = False
    if kind == "worker":
        now, waited = _workers(session), time.monotonic() + 60
        while not now and time.monotonic() < waited:  # the query restarting after an earlier kill: none forked yet
            time.sleep(0.1)
            now = _workers(session)
        busiest = max(now, key=lambda pid: now[pid] - before.get(pid, 0), default=None)
        if busiest is None:
            raise RuntimeError("no Python worker of Spark's daemon found in the stream's processes for 60 s")
        os.kill(busiest, signal.SIGKILL)
    elif kind == "planner":
        planner, waited = _planner(session), time.monotonic() + 60
        while planner is None and time.monotonic() < waited:  # a query restarting, or paused for its lease
            time.sleep(0.1)
            planner = _planner(session)
        if planner is None:
            raise RuntimeError("no planner (Spark's streaming source runner) in the stream's processes for 60 s")
        os.kill(planner, signal.SIGKILL)
    elif kind == "tree":
        stream.signal_all(signal.SIGKILL)
        stream.proc.wait(30)
    else:
        broker = rng.choice(target_brokers)
        local.stop(broker, kill=True)
    killed, produced = time.monotonic(), traffic.sent
    restarting = None
    if kind == "tree":
        stream.start()
        relaunched, killed, produced = True, time.monotonic(), traffic.sent
    elif kind == "target broker":  # back after a few seconds, while the flow goes on with the other two
        down_s = rng.uniform(2.0, 6.0)
        failed: list[BaseException] = []

        def start_again() -> None:
            time.sleep(down_s)
            try:
                local.up(base, ["target"])
            except BaseException as exc:  # raised below: a broker not back would make later kills no kills
                failed.append(exc)

        restarting = threading.Thread(target=start_again)
        restarting.start()
    resumed = target.next_copy(killed, produced, 240, stream)
    if restarting is not None:
        restarting.join()
        if failed:
            raise failed[0]
    if not stream.alive():  # the stream gave up: a supervisor would launch it again
        stream.start()
        relaunched = True
        if resumed is None:
            resumed = target.next_copy(time.monotonic(), traffic.sent, 240, stream)
    return Kill(kind, in_flight, resumed, relaunched)


def _base_config(work: Path) -> config.MirrorConfig:
    path = work / "clusters.properties"
    path.write_text(
        "clusters = source, target\n"
        f"source.bootstrap.servers = 127.0.0.1:{ports.CHAOS_SOURCE}\n"
        f"target.bootstrap.servers = {','.join(f'127.0.0.1:{p}' for p in ports.CHAOS_TARGET)}\n")
    return config.load(path)


def _flow_config(work: Path, mode: str, source: str, target: str, topic: str) -> Path:
    path = work / f"{source}.properties"
    path.write_text(
        f"clusters = {source}, {target}\n"
        f"{source}.bootstrap.servers = 127.0.0.1:{ports.CHAOS_SOURCE}\n"
        f"{target}.bootstrap.servers = {','.join(f'127.0.0.1:{p}' for p in ports.CHAOS_TARGET)}\n"
        "replication.factor = 3\noffset-syncs.topic.replication.factor = 3\n"
        "refresh.topics.interval.seconds = 10\nemit.heartbeats.enabled = false\n"
        f"{source}->{target}.enabled = true\n{source}->{target}.topics = {topic.replace('.', '[.]')}\n"
        + MODES[mode].format(source=source, target=target))
    return path


def run_mode(mode: str, n: int, kills: int, base: config.MirrorConfig, work: Path, rng: random.Random, *,
             backlog: int, rate: int, kinds: tuple[str, ...] = KINDS, log: bool = True) -> ModeRun:
    source_alias, target_alias = f"src{n}", f"dst{n}"
    topic = f"chaos.{mode.replace(' ', '-')}"
    remote = f"{source_alias}.{topic}"
    source = f"127.0.0.1:{ports.CHAOS_SOURCE}"
    target_bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports.CHAOS_TARGET)  # any one of them may be down
    create_topic(source, topic, PARTITIONS)
    traffic = Traffic(source, topic, transactional=mode == "transactional source", rate=rate)
    traffic.backlog(backlog)
    flow = _flow_config(work, mode, source_alias, target_alias, topic)
    stream = StreamProcess(flow, f"{source_alias}->{target_alias}", work / source_alias)
    out = ModeRun(mode)
    target = Target(target_bootstrap, remote)
    brokers = local.local_brokers(base, ["target"])
    stream.start()
    try:
        _kills(out, stream, brokers, base, target, traffic, rng, mode, kills, kinds, log)
        _check(out, source, topic, target_bootstrap, remote, stream)
    finally:
        out.graceful_stop = stream.stop() == 0
    return out


def _kills(out: ModeRun, stream: StreamProcess, brokers: list[local.LocalBroker], base: config.MirrorConfig,
           target: Target, traffic: Traffic, rng: random.Random, mode: str, kills: int, kinds: tuple[str, ...],
           log: bool) -> None:
    try:
        wait_for(lambda: sum(target.ends(IsolationLevel.READ_COMMITTED) or [0]) > 0, 240, "a first copy", stream)
        traffic.start()
        turns = [kinds[i % len(kinds)] for i in range(kills)]
        rng.shuffle(turns)
        for i, kind in enumerate(turns):
            kill = _kill(kind, stream, brokers, base, target, traffic, rng)
            expected_exit = kind == "tree"
            if kill.relaunched and not expected_exit:
                out.unexpected_exits += 1
            out.kills.append(kill)
            if log:
                resumed = "never" if kill.resumed_s is None else f"{kill.resumed_s:.1f} s"
                print(f"  {mode} kill {i + 1}/{kills}: {kind}, {kill.in_flight} records in flight, copying again "
                      f"after {resumed}{' (relaunched)' if kill.relaunched and not expected_exit else ''}",
                      flush=True)
            if kill.resumed_s is None:
                break
    finally:
        traffic.stop()


def _check(out: ModeRun, source: str, topic: str, target_bootstrap: str, remote: str, stream: StreamProcess) -> None:
    """Every committed source record on the target once the traffic stopped: first copies in source order, each
    copy's key and value the source record's, none twice (counted), none of an aborted transaction."""
    records = {p: {m.offset(): (m.key(), m.value()) for m in read_partition(source, topic, p, committed=True)}
               for p in range(PARTITIONS)}
    expected = [list(records[p]) for p in range(PARTITIONS)]
    out.records = sum(map(len, expected))

    def complete() -> bool:
        got = mirrored_offsets(target_bootstrap, remote, PARTITIONS, committed=True)
        return all(set(want) <= set(have) for want, have in zip(expected, got, strict=True))

    with contextlib.suppress(AssertionError):
        wait_for(complete, 300, "every record on the target", stream)
    copies = [read_partition(target_bootstrap, remote, p, committed=True) for p in range(PARTITIONS)]
    out.altered = sum(1 for p in range(PARTITIONS) for m in copies[p]
                      if records[p].get(origin(m).offset, (m.key(), m.value())) != (m.key(), m.value()))
    got = [[origin(m).offset for m in copies[p]] for p in range(PARTITIONS)]
    for want, have in zip(expected, got, strict=True):
        firsts = list(dict.fromkeys(have))
        wanted, copied = set(want), set(firsts)
        out.missing += len(wanted - copied)
        out.unexpected += len(copied - wanted)
        out.duplicates += len(have) - len(firsts)
        if [o for o in firsts if o in wanted] != [o for o in want if o in copied]:
            out.out_of_order += 1


def run(modes: list[str], kills: int, seed: int, *, backlog: int = 40_000, rate: int = 2_000,
        kinds: tuple[str, ...] = KINDS, work: Path | None = None, log: bool = True) -> list[ModeRun]:
    """Every mode in turn on clusters of its own (started here, removed after)."""
    work = work or Path(tempfile.mkdtemp(prefix="mirrorflow-chaos-"))
    os.environ.setdefault("MIRRORFLOW_HOME", str(work / "home"))
    os.environ.setdefault("MIRRORFLOW_JAR_CACHE", str(REPO / ".mirrorflow" / "jars"))
    base = _base_config(work)
    rng = random.Random(seed)
    local.up(base)
    try:
        return [run_mode(mode, n, kills, base, work, rng, backlog=backlog, rate=rate, kinds=kinds, log=log)
                for n, mode in enumerate(modes, 1)]
    finally:
        local.down(base, purge=True)


def table(runs: list[ModeRun]) -> str:
    """The report: per mode, kills by kind, how many landed in flight, how soon a record produced after each kind of
    kill was committed on the target (a tree kill: after the relaunch, so the restart to the first copy), the
    check."""
    lines = ["| mode | kills: worker / planner / tree / target broker | in flight | copying again, median (max) s: "
             "worker / planner / tree, from the relaunch / target broker | records | missing | first copies out of "
             "order | duplicates | not committed on the source | stream exits (relaunched) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        counts = " / ".join(str(sum(1 for k in r.kills if k.kind == kind)) for kind in KINDS)
        resumed = " / ".join(_spread([k.resumed_s for k in r.kills if k.kind == kind]) for kind in KINDS)
        lines.append(f"| {r.mode} | {len(r.kills)}: {counts} | {r.in_flight} | {resumed} | {r.records:,} | "
                     f"{r.missing} | {r.out_of_order} | {r.duplicates} | {r.unexpected} | {r.unexpected_exits} |")
    return "\n".join(lines)


def _spread(times: list[float | None]) -> str:
    if not times:
        return "-"
    if any(t is None for t in times):
        return "never"
    done = [t for t in times if t is not None]
    return f"{statistics.median(done):.1f} ({max(done):.1f})"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="support.chaos", description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="kills per mode (default 20)")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, of: " + ", ".join(MODES))
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated, of: " + ", ".join(KINDS))
    parser.add_argument("--rate", type=int, default=2_000, help="records/s of steady traffic (default 2,000)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(unknown)}; known: {', '.join(MODES)}")
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if not kinds or set(kinds) - set(KINDS):
        parser.error(f"--kinds: of {', '.join(KINDS)}")
    runs = run(modes, args.kills, args.seed, kinds=kinds, rate=args.rate)
    print(table(runs))
    failures = [f for r in runs for f in r.failures(args.kills)]
    for f in failures:
        print(f"chaos: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
