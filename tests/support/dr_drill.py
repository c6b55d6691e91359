"""DR drill: planned and unplanned failover, and failback, under steady traffic, with one report.

    make drill                      # or: PYTHONPATH=tests .venv/bin/python -m support.dr_drill [--seconds 60]
                                    #     [--rate 400]

Two three-broker clusters (`primary` on ports 25800-25805, `backup` on 25900-25905; replication factor 3,
min.insync.replicas 2) under a temporary MIRRORFLOW_HOME and AIRFLOW_HOME. An application, a producer writing
`--rate` records/s and a consumer group reading the topic and its remote copies (committing after each poll), runs
on one cluster at a time. Every runbook runs as Airflow runs it: its DAG (`mirrorflow_failover`,
`mirrorflow_failback`) through `dag.test()` on the repo's DAG files; the drill stands in for the scheduler only in
starting the stream of a flow requested running (`mirrorflow stream`) and in the checkpoint rounds of the flow DAGs.

  planned    the application runs on primary; it stops, the planned failover moves its group to backup, it runs
             there; it stops, the failback brings the group home, it runs on primary again.
  unplanned  the application runs on primary; every primary broker is killed (SIGKILL: the data center is lost) and
             the application with it; the unplanned failover moves the group to backup from its newest checkpoints
             and the application runs there; primary comes back; the audit measures what never reached backup;
             the failback brings the group home.

Per move the report gives: the runbook's RPO (records, seconds), the records the audit found not mirrored
(unplanned), the RTO (from the runbook's start until the group's first record on the other cluster; the application
restarts as soon as the runbook returns), and what the moved group lost (acknowledged to the producer before the
move, read neither before it nor on the other cluster) and re-read (read on both sides of the move). Prints a
Markdown report; writes drill-results.json.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from support import ports
from support.streams import QUIET, StreamProcess, environ

REPO = Path(__file__).resolve().parents[2]
PRIMARY_PORTS, BACKUP_PORTS = ports.DR_PRIMARY, ports.DR_BACKUP


def servers(ports: tuple[int, ...]) -> str:
    return ",".join(f"127.0.0.1:{p}" for p in ports)


def drill_config(primary: str, backup: str, names: tuple[str, str] = ("primary", "backup")) -> str:
    a, b = names
    return (f"clusters = {a}, {b}\n{a}.bootstrap.servers = {primary}\n{b}.bootstrap.servers = {backup}\n"
            f"{a}->{b}.enabled = true\n{b}->{a}.enabled = true\ntopics = drill\\..*\ngroups = drill-.*\n"
            "replication.factor = 3\nemit.checkpoints.interval.seconds = 5\nrefresh.topics.interval.seconds = 5\n"
            "mirrorflow.health.grace.seconds = 5\n")


class App:
    """The application a runbook moves: a producer writing `rate` records/s to `topic` and a consumer group reading
    it and its remote copies (`^(.+\\.)?topic$`), on one cluster at a time."""

    def __init__(self, topic: str, group: str, rate: int) -> None:
        self.topic, self.group, self.rate = topic, group, rate
        self.acked: dict[bytes, tuple[str, float]] = {}  # value -> (cluster that acknowledged it, monotonic time)
        # value -> when its acknowledgement reached the producer (wall clock): at or after the broker's
        self.acked_at: dict[bytes, float] = {}
        self.reads: list[tuple[bytes, float, str]] = []  # (value, monotonic time, cluster), in read order
        self.failed: list[str] = []  # delivery errors
        self.where: str | None = None
        self._stop_producing, self._stop_consuming = threading.Event(), threading.Event()
        self._threads: list[threading.Thread] = []
        self._sent = 0
        self._lost = False

    def start(self, alias: str, bootstrap: str) -> None:
        self.where, self._lost = alias, False
        self._stop_producing.clear()
        self._stop_consuming.clear()
        self._threads = [threading.Thread(target=self._produce, args=(alias, bootstrap), daemon=True),
                         threading.Thread(target=self._consume, args=(alias, bootstrap), daemon=True)]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """A clean stop: every record sent is acknowledged, every record read is committed."""
        self._stop_producing.set()
        self._stop_consuming.set()
        for t in self._threads:
            t.join(120)
        self.where = None

    def finish(self, timeout: float = 180) -> None:
        """Stop producing, read on until every acknowledged record was read (or `timeout`), stop."""
        self._stop_producing.set()
        self._threads[0].join(120)
        self.wait_everything_read(timeout)
        self.stop()

    def lose(self) -> None:
        """The application dies with its data center: nothing more is sent, acknowledged or committed."""
        self._lost = True
        self._stop_producing.set()
        self._stop_consuming.set()
        self.where = None

    def first_read(self, alias: str, after: float) -> float | None:
        return next((t for _, t, where in list(self.reads) if where == alias and t >= after), None)

    def wait_first_read(self, alias: str, after: float, timeout: float = 120) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            t = self.first_read(alias, after)
            if t is not None:
                return t
            time.sleep(0.05)
        raise RuntimeError(f"group {self.group} read nothing on {alias} within {timeout:.0f} s")

    def wait_everything_read(self, timeout: float = 180) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if set(dict(self.acked)) <= {v for v, _, _ in list(self.reads)}:
                return True
            time.sleep(0.5)
        return False

    def _produce(self, alias: str, bootstrap: str) -> None:
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, **QUIET})

        def delivered(error: Any, message: Any) -> None:
            if self._lost:
                return  # an acknowledgement the application never saw
            if error is None:
                self.acked[message.value()] = (alias, time.monotonic())
                self.acked_at[message.value()] = time.time()
            else:
                self.failed.append(str(error))
        began, sent_here = time.monotonic(), 0
        while not self._stop_producing.is_set():
            due = int((time.monotonic() - began) * self.rate)
            while sent_here < due:
                p.produce(self.topic, f"{self.topic}-{self._sent}".encode(), partition=self._sent % 3,
                          on_delivery=delivered)
                self._sent += 1
                sent_here += 1
            p.poll(0)
            time.sleep(0.01)
        if self._lost:
            p.purge()
        p.flush(120 if not self._lost else 0)

    def _consume(self, alias: str, bootstrap: str) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": self.group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                      "topic.metadata.refresh.interval.ms": 2000, "session.timeout.ms": 10_000, **QUIET})
        c.subscribe([f"^(.+\\.)?{re.escape(self.topic)}$"])
        try:
            while not self._stop_consuming.is_set():
                messages = [m for m in c.consume(500, 0.2) if m.error() is None]
                if self._lost:  # gone with its data center: its last reads never happened
                    break
                now = time.monotonic()
                self.reads += [(m.value(), now, alias) for m in messages]
                if messages:
                    with suppress(KafkaException):  # a commit lost with its data center
                        c.commit(asynchronous=False)
        finally:
            c.close()  # a lost one too: a live handle would rejoin the group when the cluster comes back


class Scheduler:
    """What the drill borrows from Airflow's scheduler: a stream for each flow requested running (the stream DAG),
    and checkpoint rounds every `emit.checkpoints.interval.seconds` (the flow DAGs)."""

    def __init__(self, config_path: Path, work: Path) -> None:
        from mirrorflow.model import config

        self.config_path, self.work = config_path, work
        self.cfg = config.load(config_path)
        self.streams: dict[str, StreamProcess] = {}
        self.down: set[str] = set()  # clusters the drill has taken down: their flows' rounds are expected to fail
        self.checkpoint_errors: dict[str, tuple[int, str]] = {}  # flow -> (rounds failed, the last error)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._checkpoints, daemon=True)
        self._thread.start()

    def launch(self) -> None:
        from mirrorflow.jobs import lifecycle
        from mirrorflow.kafka.link import FlowLink

        for flow in self.cfg.flows:
            try:
                wanted = lifecycle.requested(FlowLink.of(self.cfg, flow)).state
            except Exception:  # the flow's target is down: nothing to launch there
                continue
            running = self.streams.get(flow.name)
            if wanted == lifecycle.RUNNING and (running is None or not running.alive()):
                stream = self.streams[flow.name] = StreamProcess(self.config_path, flow.name,
                                                                 self.work / flow.name.replace("->", "_to_"))
                stream.start()

    def wait_streaming(self, flow_name: str, timeout: float = 240) -> None:
        from mirrorflow.jobs import lifecycle
        from mirrorflow.kafka.link import FlowLink

        flow = self.cfg.flow(flow_name)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            stream = self.streams.get(flow_name)
            if stream is not None and not stream.alive():
                raise RuntimeError(f"the {flow_name} stream exited:\n{stream.output()[-2000:]}")
            with suppress(Exception):
                if lifecycle.health(FlowLink.of(self.cfg, flow), with_lag=False).alive:
                    return
            time.sleep(1)
        raise RuntimeError(f"no {flow_name} stream within {timeout:.0f} s")

    def wait_exited(self, flow_name: str, timeout: float = 180) -> None:
        stream = self.streams.get(flow_name)
        if stream is not None and stream.proc is not None:
            stream.proc.wait(timeout)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(60)
        for stream in self.streams.values():
            if stream.alive():
                stream.stop()

    def _checkpoints(self) -> None:
        from mirrorflow.jobs import checkpoints
        from mirrorflow.kafka.link import FlowLink

        period = float(self.cfg.flows[0].number("emit.checkpoints.interval.seconds"))
        while not self._stop.wait(period):
            for flow in self.cfg.flows:
                if {flow.source, flow.target} & self.down:
                    continue  # that flow's checkpoints wait, as its flow DAG's task would fail in Airflow
                try:
                    checkpoints.run_round(FlowLink.of(self.cfg, flow))
                except Exception as exc:  # counted, and the drill fails on it
                    failed, _ = self.checkpoint_errors.get(flow.name, (0, ""))
                    self.checkpoint_errors[flow.name] = (failed + 1, str(exc).splitlines()[0][:300])


@dataclass
class Move:
    """One runbook run and what the moved group saw."""
    name: str
    rpo: str
    rpo_records: int | None
    rto_s: float
    lost: int
    re_read: int
    audit_not_mirrored: int | None = None
    rpo_as_of: float | None = None  # unplanned: when the source's ends the RPO counts from were asked for (wall clock)
    written_after_view: int | None = None  # records on the source above those ends (appended after they were read)
    mirrored_through: float | None = None  # the report's: every record acknowledged before it is on the other side
    # Read on both clusters: when the earliest acknowledged record missing on the other side was acknowledged to the
    # drill's producer (wall clock, at or after the source's acknowledgement)
    oldest_missing_acked: float | None = None
    runbook_s: float = 0.0
    notes: list[str] = field(default_factory=list)


def group_effect(app: App, began: float, old: str, new: str) -> tuple[int, int]:
    """(lost, re-read) of a move that began at `began` (monotonic) from cluster `old` to `new`: records acknowledged
    on `old` before the move that the group read neither before it nor on `new` after it, and records it read on
    both sides."""
    reads, acked = list(app.reads), dict(app.acked)  # copies: the application's threads may still add to them
    before = {v for v, t, _ in reads if t < began}
    after_on_new = {v for v, t, where in reads if t >= began and where == new}
    lost = sum(1 for v, (where, t) in acked.items()
               if where == old and t < began and v not in before and v not in after_on_new)
    return lost, len(before & after_on_new)


class Drill:
    """One deployment (config, clusters, the scheduler stand-in) and the runbook runner (`run_dag`)."""

    def __init__(self, config_path: Path, bootstraps: dict[str, str], work: Path,
                 run_dag: Callable[[str, dict[str, Any]], dict[str, Any]], seconds: float, rate: int,
                 names: tuple[str, str] = ("primary", "backup")) -> None:
        from mirrorflow.model import config

        self.config_path, self.bootstraps, self.work = config_path, bootstraps, work
        self.cfg = config.load(config_path)
        self.run_dag, self.seconds, self.rate = run_dag, seconds, rate
        self.primary, self.backup = names
        self.apps: dict[str, App] = {}  # by scenario, for a test to look into

    def _topic(self, topic: str) -> None:
        for bootstrap in self.bootstraps.values():
            admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
            with suppress(KafkaException):  # there already
                admin.create_topics([NewTopic(topic, 3)])[topic].result(30)

    def _flows(self, running: str, stopped: str) -> None:
        from mirrorflow.jobs import lifecycle
        from mirrorflow.kafka.link import FlowLink

        lifecycle.request(FlowLink.of(self.cfg, self.cfg.flow(running)), lifecycle.RUNNING, "dr drill")
        lifecycle.request(FlowLink.of(self.cfg, self.cfg.flow(stopped)), lifecycle.STOPPED, "dr drill")

    def _application(self, scenario: str, scheduler: Scheduler) -> App:
        """The scenario's application, running on primary for `seconds` with the forward flow streaming."""
        p, b = self.primary, self.backup
        app = self.apps[scenario] = App(f"drill.{scenario}", f"drill-{scenario}", self.rate)
        self._topic(app.topic)
        self._flows(f"{p}->{b}", f"{b}->{p}")
        scheduler.launch()
        scheduler.wait_streaming(f"{p}->{b}")
        app.start(p, self.bootstraps[p])
        time.sleep(self.seconds)
        return app

    def planned(self, scheduler: Scheduler) -> list[Move]:
        p, b = self.primary, self.backup
        app = self._application("planned", scheduler)
        moves: list[Move] = []
        spans: list[tuple[float, str, str]] = []  # per move: when it began, from, to
        for kind, old, new, conf in (
                ("planned failover", p, b, {"source": p, "target": b, "mode": "planned"}),
                ("planned failback", b, p, {"original": p, "backup": b, "drain_timeout_s": 300})):
            app.stop()  # the application stops first; the runbook (and the RTO) starts once it has
            began = time.monotonic()
            dag = "mirrorflow_failover" if "failover" in kind else "mirrorflow_failback"
            report = self.run_dag(dag, {**conf, "groups": app.group, "dry_run": False, "require_approval": False})
            ran = time.monotonic() - began
            scheduler.launch()
            app.start(new, self.bootstraps[new])
            rto = app.wait_first_read(new, began) - began
            time.sleep(self.seconds)
            moves.append(Move(kind, _rpo_text(report), _rpo_records(report), round(rto, 1), 0, 0,
                              runbook_s=round(ran, 1)))
            spans.append((began, old, new))
        app.finish()
        _settle(app, moves, spans)
        return moves

    def unplanned(self, scheduler: Scheduler) -> list[Move]:
        from mirrorflow.dev import local
        from mirrorflow.jobs import lifecycle
        from mirrorflow.kafka.link import FlowLink

        p, b = self.primary, self.backup
        app = self._application("unplanned", scheduler)
        self._wait_steady(f"{p}->{b}", app.group)
        # The data center is lost: its brokers and the application die at once; the mirror (in backup's) lives.
        app.lose()
        scheduler.down.add(p)
        for s in local.status(self.cfg, [p]):
            if s.pid:
                os.kill(s.pid, signal.SIGKILL)
        began = time.monotonic()
        # the runbook reads the clusters, not the stream's host
        with environ("MIRRORFLOW_HOME", tempfile.mkdtemp(prefix="runbook-home-", dir=self.work)):
            report = self.run_dag("mirrorflow_failover", {
                "source": p, "target": b, "mode": "unplanned", "switch_flows": False, "groups": app.group,
                "dry_run": False, "require_approval": False})
        ran = time.monotonic() - began
        app.start(b, self.bootstraps[b])
        rto = app.wait_first_read(b, began) - began
        # The forward flow has no source any more; it stops (and stays stopped until the failback) so that the
        # audit below sees what it had mirrored when primary was lost.
        lifecycle.stop(FlowLink.of(self.cfg, self.cfg.flow(f"{p}->{b}")), "primary lost", 180)
        time.sleep(self.seconds)
        failover = Move("unplanned failover", _rpo_text(report), _rpo_records(report), round(rto, 1), 0, 0,
                        runbook_s=round(ran, 1))
        spans = [(began, p, b)]
        local.up(self.cfg, [p])  # primary is back
        scheduler.down.discard(p)
        self._wait_readable(p, app.topic)
        failover.audit_not_mirrored = self._not_mirrored(f"{p}->{b}", app.topic)
        failover.rpo_as_of = report.get("rpo", {}).get("as_of")
        if failover.rpo_as_of is not None:
            failover.written_after_view = self._appended_after_view(f"{p}->{b}", app.topic, failover.rpo_as_of)
        failover.mirrored_through = report.get("rpo", {}).get("mirrored_through")
        failover.oldest_missing_acked = self._oldest_missing_acked(app, p, b)
        # Failback: what was produced on backup meanwhile goes home first (the reverse flow), then the group.
        lifecycle.request(FlowLink.of(self.cfg, self.cfg.flow(f"{b}->{p}")), lifecycle.RUNNING, "dr drill: failback")
        scheduler.launch()
        scheduler.wait_streaming(f"{b}->{p}")
        app.stop()
        began = time.monotonic()
        report = self.run_dag("mirrorflow_failback", {"original": p, "backup": b, "groups": app.group,
                                                      "drain_timeout_s": 300, "dry_run": False,
                                                      "require_approval": False})
        ran = time.monotonic() - began
        scheduler.launch()
        app.start(p, self.bootstraps[p])
        rto = app.wait_first_read(p, began) - began
        time.sleep(self.seconds)
        failback = Move("unplanned failback", _rpo_text(report), _rpo_records(report), round(rto, 1), 0, 0,
                        runbook_s=round(ran, 1))
        spans.append((began, b, p))
        app.finish()
        moves = [failover, failback]
        _settle(app, moves, spans)
        return moves

    def _wait_steady(self, flow_name: str, group: str, timeout: float = 240) -> None:
        """Until the flow is in the steady state an unplanned failover starts from (a drill checks it before it
        cuts anything): its stream's status has a `mirrored-through` time under a minute old, and its checkpoints
        on the target cover the partitions the group reads."""
        from mirrorflow.jobs import checkpoints
        from mirrorflow.kafka import clients
        from mirrorflow.rules.policy import checkpoints_topic
        from mirrorflow.status import metrics

        flow = self.cfg.flow(flow_name)
        topic = checkpoints_topic(flow.policy, flow.source)
        settings = clients.settings(self.cfg.cluster(flow.target), "consumer")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = metrics.read_status(metrics.status_file(flow)) or {}
            through = status.get("mirrored-through")
            with suppress(Exception):  # the checkpoints topic may not exist yet
                if (through is not None and time.time() - through < 60
                        and sum(1 for g, _, _ in checkpoints.read_checkpoints(settings, topic) if g == group) >= 3):
                    return
            time.sleep(1)
        raise RuntimeError(f"flow {flow_name} not steady (mirrored-through, checkpoints of {group}) within "
                           f"{timeout:.0f} s")

    def _wait_readable(self, alias: str, topic: str) -> None:
        """Until every partition of the topic has a leader that answers offset requests again."""
        from support.streams import end_offsets, wait_for

        wait_for(lambda: len(end_offsets(self.bootstraps[alias], topic)) == 3, 120, f"{topic} readable on {alias}")

    def _oldest_missing_acked(self, app: App, source: str, target: str) -> float | None:
        """Read on both clusters: when the drill's producer had the acknowledgement of the earliest acknowledged
        record of the app's topic on `source` whose copy is not on `target` (values are unique), None when every one
        is there. A record's own timestamp is not used: its producer sets it before the append."""
        from support.streams import read_partition

        remote = self.cfg.flow(f"{source}->{target}").policy.remote_topic(source, app.topic)
        there = {m.value() for p in range(3) for m in read_partition(self.bootstraps[target], remote, p,
                                                                    committed=True)}
        missing = [app.acked_at[m.value()] for p in range(3) for m in read_partition(self.bootstraps[source],
                                                                                      app.topic, p)
                   if m.value() not in there and m.value() in app.acked_at]
        return min(missing) if missing else None

    def _appended_after_view(self, flow: str, topic: str, as_of: float) -> int | None:
        """Records of `topic` on the flow's source at or above the ends of the stream's view of it (the one the
        runbook read: the stream cannot read a lost source, so it makes no newer one), None if that view is gone."""
        from mirrorflow.kafka import source_view
        from mirrorflow.kafka.link import FlowLink

        from support.streams import end_offsets

        view = source_view.newest(FlowLink.of(self.cfg, self.cfg.flow(flow)))
        if view is None or view.as_of != as_of:
            return None
        source = self.cfg.flow(flow).source
        return sum(max(end - view.ends.get((topic, p), 0), 0)
                   for p, end in enumerate(end_offsets(self.bootstraps[source], topic)))

    def _not_mirrored(self, flow: str, topic: str) -> int:
        """The audit's count of the topic's records on the flow's source that its target does not hold."""
        out = subprocess.run([sys.executable, "-m", "mirrorflow", "--config", str(self.config_path), "audit",
                              "--flow", flow, "--topics", re.escape(topic), "--json"],
                             capture_output=True, text=True, timeout=600)
        if not out.stdout.strip().startswith("{"):
            raise RuntimeError(f"audit of {flow} failed: {out.stderr[-2000:]}")
        result = json.loads(out.stdout)
        return int(result["behind"]) + int(result["missing"])


def verdict(moves: Sequence[Move], checkpoint_errors: Mapping[str, tuple[int, str]]) -> list[str]:
    """What makes the drill fail, one line each: a planned move that lost or re-read a record of the moved group;
    an unplanned failover whose reported RPO (at least N records not mirrored, counted from the source's ends as
    the stream last read them) is not what the audit found, give or take the records appended after that read, that
    claims a `mirrored_through` later than that read, or that misses a record acknowledged before its
    `mirrored_through`; checkpoint rounds that failed while their clusters were up."""
    failures = []
    for m in moves:
        if m.name.startswith("planned") and (m.lost or m.re_read):
            failures.append(f"{m.name}: the group lost {m.lost} and re-read {m.re_read} records")
        if m.name == "unplanned failover":
            if m.rpo_records is None or m.audit_not_mirrored is None or m.written_after_view is None:
                failures.append(f"{m.name}: no RPO in records to hold against the audit (RPO: {m.rpo}; audit: "
                                f"{m.audit_not_mirrored})")
            elif (m.mirrored_through is not None and m.rpo_as_of is not None
                  and m.mirrored_through > m.rpo_as_of):
                failures.append(f"{m.name}: the report said every record acknowledged before "
                                f"{m.mirrored_through:.3f} was mirrored, later than its view of the source "
                                f"({m.rpo_as_of:.3f})")
            elif (m.mirrored_through is not None and m.oldest_missing_acked is not None
                  and m.oldest_missing_acked < m.mirrored_through):
                failures.append(f"{m.name}: a record acknowledged at {m.oldest_missing_acked:.3f} is missing on the "
                                f"other side, although the report said every record acknowledged before "
                                f"{m.mirrored_through:.3f} was mirrored")
            elif not m.rpo_records <= m.audit_not_mirrored <= m.rpo_records + m.written_after_view:
                failures.append(f"{m.name}: the runbook reported at least {m.rpo_records} records not mirrored, the "
                                f"audit found {m.audit_not_mirrored}, and {m.written_after_view} were appended "
                                "after the stream's view it counted from")
    failures += [f"checkpoint rounds of {flow} failed {n} time(s) with its clusters up: {error}"
                 for flow, (n, error) in sorted(checkpoint_errors.items())]
    return failures


def _settle(app: App, moves: list[Move], spans: list[tuple[float, str, str]]) -> None:
    """Once the group has read on to the end: what each move made it lose and re-read, and what it never read."""
    for move, (began, old, new) in zip(moves, spans, strict=True):
        move.lost, move.re_read = group_effect(app, began, old, new)
    never = set(app.acked) - {v for v, _, _ in app.reads}
    moves[-1].notes.append(f"{len(app.acked)} records acknowledged in the scenario, {len(never)} never read by the "
                           f"group, {len(app.reads) - len({v for v, _, _ in app.reads})} read more than once, "
                           f"{len(app.failed)} delivery errors")


def _rpo_records(report: dict[str, Any]) -> int | None:
    if "RPO: 0 records" in report.get("markdown", ""):
        return 0
    records = report.get("rpo", {}).get("records")
    return None if records is None else int(records)


def _rpo_text(report: dict[str, Any]) -> str:
    line = next((ln for ln in report.get("markdown", "").splitlines() if ln.startswith("- RPO:")), "- RPO: ?")
    return line[len("- RPO: "):]


def run_dag(config_path: Path, dag_id: str, conf: dict[str, Any]) -> dict[str, Any]:
    """One run of a runbook DAG, `dag.test()` on the repo's DAG files: its report task's result; raises unless
    every task succeeded or was skipped."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with environ("MIRRORFLOW_CONFIG", str(config_path)):  # dag.test() parses the DAG file again
        try:
            bag = DagBag(dag_folder=str(REPO / "dags"))
            if bag.import_errors:
                raise RuntimeError(f"DAG import errors: {bag.import_errors}")
            run = bag.dags[dag_id].test(run_conf=conf)
        finally:
            _tracebacks_on_crash()
    with create_session() as session:
        states = {ti.task_id: str(ti.state) for ti in
                  session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=run.run_id)}
        rows = session.query(XComModel).filter_by(dag_id=dag_id, run_id=run.run_id, task_id="report",
                                                  key="return_value").all()
        result: dict[str, Any] = XComModel.deserialize_value(rows[0]) if rows else {}
    if str(run.state) != "success":
        raise RuntimeError(f"{dag_id} ended {run.state}: {states}")
    return result


# Where a crash's tracebacks go: under pytest a copy of the real stderr (tests/conftest.py), since while a test runs
# fd 2 is pytest's capture file, lost with the process.
crash_reports_fd: int | None = None


def _tracebacks_on_crash() -> None:
    """faulthandler back on SIGSEGV. Parsing a DAG file leaves Airflow's Python handler there (to name a crashing
    file), and enable() alone does not take it back: a native crash in this process then hangs or dies unexplained
    (CI: killed by SIGSEGV, nothing printed)."""
    faulthandler.disable()
    faulthandler.enable(file=sys.__stderr__ if crash_reports_fd is None else crash_reports_fd, all_threads=True)


def report_markdown(moves: list[Move], setup: str) -> str:
    lines = [f"DR drill: {setup}", "",
             "| move | RPO (the runbook's report) | not mirrored (audit) | RTO | runbook | group lost "
             "| group re-read |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for m in moves:
        audit = "" if m.audit_not_mirrored is None else str(m.audit_not_mirrored)
        lines.append(f"| {m.name} | {m.rpo} | {audit} | {m.rto_s:.1f} s | {m.runbook_s:.1f} s | {m.lost} | "
                     f"{m.re_read} |")
    lines += ["", *(f"- {m.name}: {n}" for m in moves for n in m.notes)]
    lines += [f"- {m.name}: the RPO holds against the audit when {m.rpo_records} <= {m.audit_not_mirrored} <= "
              f"{m.rpo_records} + {m.written_after_view} (records appended after the stream's view of the source)"
              for m in moves if None not in (m.rpo_records, m.audit_not_mirrored, m.written_after_view)]
    return "\n".join(lines)


def rss_mib(pid: int) -> float:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024


@contextmanager
def clusters(cfg: Any) -> Iterator[str]:
    from mirrorflow.dev import local

    began = time.monotonic()
    local.up(cfg)
    try:
        rss = sum(rss_mib(s.pid) for s in local.status(cfg) if s.pid)
        yield f"up in {time.monotonic() - began:.1f} s, {rss:.0f} MiB RSS idle"
    finally:
        local.down(cfg, purge=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="traffic before and after each move")
    parser.add_argument("--rate", type=int, default=400, help="records/s the application produces")
    parser.add_argument("--out", type=Path, default=Path("drill-results.json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mirrorflow-drill-"))
    os.environ["MIRRORFLOW_HOME"] = str(work / "home")
    os.environ.setdefault("MIRRORFLOW_JAR_CACHE", str(REPO / ".mirrorflow" / "jars"))
    os.environ.update(AIRFLOW_HOME=str(work / "airflow"), AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
                      AIRFLOW__CORE__LOAD_EXAMPLES="False")
    migrated = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], capture_output=True,
                              text=True, timeout=600)
    if migrated.returncode != 0:
        sys.exit(f"airflow db migrate failed: {migrated.stderr[-2000:]}")
    from mirrorflow.model import config
    from mirrorflow.spark import spark_session

    spark_session.kafka_jars()
    path = work / "mirror.properties"
    bootstraps = {"primary": servers(PRIMARY_PORTS), "backup": servers(BACKUP_PORTS)}
    path.write_text(drill_config(bootstraps["primary"], bootstraps["backup"]))
    cfg = config.load(path)
    moves: list[Move] = []
    try:
        with clusters(cfg) as started:
            scheduler = Scheduler(path, work / "streams")
            try:
                drill = Drill(path, bootstraps, work, lambda dag, conf: run_dag(path, dag, conf), args.seconds,
                              args.rate)
                moves += drill.planned(scheduler)
                moves += drill.unplanned(scheduler)
            finally:
                scheduler.close()
    except Exception as exc:  # a step that errs fails the drill, with what it had measured so far
        done = ", ".join(m.name for m in moves) or "none"
        sys.exit(f"DR drill failed after the moves {done}: {type(exc).__name__}: {str(exc).splitlines()[0][:500]}")
    setup = (f"two three-broker clusters (replication factor 3, min.insync.replicas 2; {started}), "
             f"{args.rate} records/s over 3 partitions, {args.seconds:.0f} s of traffic around each move")
    failures = verdict(moves, scheduler.checkpoint_errors)
    text = report_markdown(moves, setup)
    print("\n" + text)
    args.out.write_text(json.dumps({"setup": setup, "moves": [asdict(m) for m in moves], "failures": failures},
                                   indent=2) + "\n")
    if failures:
        sys.exit("DR drill failed:\n" + "\n".join(f"- {f}" for f in failures))
    print("\nDR drill passed: planned moves lost and re-read nothing, the unplanned RPO held against the audit, "
          "every checkpoint round with its clusters up succeeded")


if __name__ == "__main__":
    main()
