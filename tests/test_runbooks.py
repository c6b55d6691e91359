"""Stream lifecycle DAGs and the DR runbooks, end to end: real Airflow, real Spark (spark-submit), real brokers.

The module's deployment calls the session's brokers `primary` (alpha) and `backup` (beta), with flows both
ways over topics `dr.*` and groups `dr-.*`. Tests run in file order: the stream DAG launches the flow, a bad
request changes nothing, the planned failover moves group `dr-app` to the backup, the failback brings it home
with what was produced on the backup meanwhile. The unplanned failover (a data center lost) is a drill on
three-broker clusters in test_drills.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from mirrorflow.jobs import lifecycle
from mirrorflow.kafka import clients, flow_lease
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model import config
from mirrorflow.status import metrics
from support.airflow import run_dag
from support.clusters import PORTS
from support.streams import (
    QUIET,
    create_topic,
    end_offsets,
    producer,
    read_partition,
    record_counts,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.airflow]
PRIMARY = f"127.0.0.1:{PORTS['alpha']}"
BACKUP = f"127.0.0.1:{PORTS['beta']}"
TOPIC, PARTITIONS, PER_PARTITION = "dr.orders", 3, 200
GROUP = "dr-app"


def _config(clusters: str = "primary, backup, spare", extra: str = "") -> str:
    return f"""clusters = {clusters}
primary.bootstrap.servers = {PRIMARY}
backup.bootstrap.servers = {BACKUP}
spare.bootstrap.servers = {BACKUP}
primary->backup.enabled = true
backup->primary.enabled = true
topics = dr\\..*
groups = dr-.*
replication.factor = 1
offset-syncs.topic.replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
emit.checkpoints.interval.seconds = 5
refresh.topics.interval.seconds = 10
mirrorflow.stream.watch.seconds = 20
mirrorflow.stream.watch.poll.seconds = 5
mirrorflow.health.grace.seconds = 5
{extra}"""


@dataclass
class Deployment:
    path: Path
    cfg: config.MirrorConfig
    work: Path
    airflow_db: Path


@pytest.fixture(scope="module")
def dr(stream_clusters: config.MirrorConfig, airflow_home: Path, tmp_path_factory: pytest.TempPathFactory
       ) -> Iterator[Deployment]:
    work = tmp_path_factory.mktemp("dr")
    path = work / "mirror.properties"
    path.write_text(_config())
    yield Deployment(path, config.load(path), work, airflow_home / "airflow.db")
    cfg = config.load(path)
    for name in ("primary->backup", "backup->primary"):
        lifecycle.stop(FlowLink.of(cfg, cfg.flow(name)), "end of the test module", 120)
    for run in StreamDagRun.started:
        run.wait(120)


class StreamDagRun:
    """`airflow dags test mirrorflow_stream__…`: one scheduled run of a stream DAG, as the scheduler would start it.

    Each run has an Airflow home of its own (a copy of the migrated database), so it never contends with the
    test process's own `dag.test()` runs.
    """

    started: ClassVar[list[StreamDagRun]] = []

    def __init__(self, dr: Deployment, flow: str) -> None:
        self.dag_id = "mirrorflow_stream__" + flow.replace("->", "_to_")
        n = len(StreamDagRun.started)
        self.home = dr.work / f"airflow-{n}"
        self.home.mkdir()
        shutil.copy(dr.airflow_db, self.home / "airflow.db")
        self.log = dr.work / f"{self.dag_id}-{n}.log"
        env = {**os.environ, "AIRFLOW_HOME": str(self.home), "MIRRORFLOW_CONFIG": str(dr.path),
               "AIRFLOW_CONN_MIRRORFLOW_SPARK": '{"conn_type": "spark", "host": "local[2]"}'}
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([str(Path(sys.executable).parent / "airflow"), "dags", "test", self.dag_id],
                                         stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        StreamDagRun.started.append(self)

    def wait(self, timeout: float) -> str:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        return self.output()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _holders(cfg: config.MirrorConfig, flow: str) -> list[str]:
    return flow_lease.holders(clients.admin(cfg.cluster(flow.split("->")[1])), flow)


def _lease_members(cfg: config.MirrorConfig, flow: str) -> set[str]:
    """The member ids holding the flow's lease (a restarted stream is a new member)."""
    admin = clients.admin(cfg.cluster(flow.split("->")[1]))
    return {m.member_id for m in flow_lease.members(admin, flow) if m.assignment.topic_partitions}


def _consume(bootstrap: str, group: str, topics: list[str], limit: dict[tuple[str, int], int] | None = None,
             partitions: int = PARTITIONS) -> list[bytes]:
    """Resume `group` on these topics from its committed offsets, read the committed records to the end (or
    `limit` records per partition), commit, and return the values read. Counts records, not offsets: a mirrored
    partition holds a transaction marker per commit."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                  "enable.partition.eof": True, **QUIET})
    try:
        tps = [TopicPartition(t, p) for t in topics for p in range(partitions)]
        for attempt in range(10):  # a group's first request may meet a coordinator still loading
            try:
                committed = {(tp.topic, tp.partition): tp.offset for tp in c.committed(tps, timeout=30)}
                break
            except KafkaException:
                if attempt == 9:
                    raise
                time.sleep(1)
        values: list[bytes] = []
        for (topic, p), offset in committed.items():
            start = max(offset, 0)
            want = limit.get((topic, p)) if limit else None
            if want == 0 or end_offsets(bootstrap, topic)[p] <= start:
                continue
            c.assign([TopicPartition(topic, p, start)])
            got, resume_at, at_end = 0, start, False
            deadline = time.monotonic() + 60
            while not at_end and got != want and time.monotonic() < deadline:
                for m in c.consume(1 if want is not None else 500, 1.0):
                    if m.error() is not None:
                        at_end = at_end or m.error().code() == KafkaError._PARTITION_EOF
                        resume_at = max(resume_at, m.offset()) if at_end else resume_at
                        continue
                    values.append(m.value())
                    got, resume_at = got + 1, m.offset() + 1
            assert at_end or got == want, f"{topic}-{p}: read {got} of {want} (from {start})"
            c.commit(offsets=[TopicPartition(topic, p, resume_at)], asynchronous=False)
        return values
    finally:
        c.close()


def _run_dag(dr: Deployment, dag_id: str, conf: dict[str, Any], only: str | None = None
             ) -> tuple[str, dict[str, str], dict[str, Any]]:
    return run_dag(dr.path, dag_id, conf, only)


# -- the stream's lifecycle ---------------------------------------------------------------------------

def test_the_stream_dag_launches_the_flow_with_spark_submit_restarts_it_when_killed_and_never_runs_two(
        dr: Deployment) -> None:
    create_topic(PRIMARY, TOPIC, PARTITIONS)
    p = producer(PRIMARY)
    for i in range(PER_PARTITION * PARTITIONS):
        p.produce(TOPIC, f"v{i}".encode(), partition=i % PARTITIONS)
    p.flush(30)
    lifecycle.start(FlowLink.of(dr.cfg, dr.cfg.flow("primary->backup")), "test")
    first = StreamDagRun(dr, "primary->backup")
    wait_for(lambda: bool(_holders(dr.cfg, "primary->backup")), 180, "the stream DAG's stream to hold the lease")
    wait_for(lambda: record_counts(BACKUP, f"primary.{TOPIC}") == [PER_PARTITION] * PARTITIONS, 120,
             "the records mirrored")
    assert "Spark-Submit cmd: spark-submit --master local[2]" in first.output()

    second = StreamDagRun(dr, "primary->backup")  # what a restarted scheduler's next run does
    out = second.wait(240)
    assert "already runs on" in out
    assert len(_holders(dr.cfg, "primary->backup")) == 1 and first.proc.poll() is None

    status = metrics.status_file(dr.cfg.flow("primary->backup"))
    wait_for(lambda: (metrics.read_status(status) or {}).get("state") == "running", 60, "the stream's status")
    driver = (metrics.read_status(status) or {})["pid"]
    dead = _lease_members(dr.cfg, "primary->backup")
    killed = time.monotonic()
    os.kill(driver, signal.SIGKILL)
    assert "state=failed" in first.wait(120)  # the run fails with its stream
    def restarted() -> bool:
        return bool(_lease_members(dr.cfg, "primary->backup") - dead)

    while not restarted():  # the scheduler: a run every 30 s, one at a time
        tick = time.monotonic()
        run = StreamDagRun(dr, "primary->backup")
        wait_for(lambda r=run: r.proc.poll() is not None or restarted(), 150,  # type: ignore[misc]
                 "the next run to start the stream or to end")
        assert time.monotonic() - killed < 150, run.output()[-3000:]
        if not restarted():
            time.sleep(max(0.0, 30 - (time.monotonic() - tick)))
    back_after = time.monotonic() - killed
    print(f"\nstream killed with SIGKILL: running again {back_after:.0f} s later")
    assert back_after < 120


def test_a_bad_request_fails_at_preflight_having_changed_nothing(dr: Deployment) -> None:
    forward = dr.cfg.flow("primary->backup")
    before = lifecycle.requested(FlowLink.of(dr.cfg, forward))
    base = [sys.executable, "-m", "mirrorflow", "--config", str(dr.path), "failover", "--yes"]
    cases = {
        ("--source", "nowhere", "--target", "backup"): "unknown cluster 'nowhere'",
        ("--source", "primary", "--target", "spare"): "no enabled flow 'primary->spare'",
        ("--source", "primary", "--target", "backup", "--groups", "nobody-.*"): "matches none of",
    }
    for args, message in cases.items():
        out = subprocess.run([*base, *args], capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 or out.stderr.count("mirrorflow: error:") == 1
    state, tasks, _ = _run_dag(dr, "mirrorflow_failover", {"source": "primary", "target": "spare",
                                                           "dry_run": False, "require_approval": False})
    assert state == "failed" and tasks["preflight"] == "failed"
    assert all(tasks.get(t) in (None, "None", "upstream_failed") for t in ("drain", "move_groups", "switch_flows"))
    # The form's defaults are a dry run of the first flow: with no group to move it still reports health and RPO.
    state, tasks, report = _run_dag(dr, "mirrorflow_failover", {"groups": "nobody-.*"})
    assert state == "success" and tasks["approval"] == "skipped" and tasks["DRY_RUN"] == "success", tasks
    assert "matches none of" in report["markdown"] and "RPO" in report["markdown"], report
    assert "primary->backup" in report["markdown"] and "**DRY RUN: nothing was changed.**" in report["markdown"]
    assert lifecycle.requested(FlowLink.of(dr.cfg, forward)) == before
    assert _holders(dr.cfg, "primary->backup")


# -- planned failover and failback --------------------------------------------------------------------

def test_planned_failover_moves_the_group_so_it_reads_exactly_the_remaining_records_on_the_backup(
        dr: Deployment) -> None:
    first_reads = _consume(PRIMARY, GROUP, [TOPIC], limit={(TOPIC, 0): 50, (TOPIC, 1): 120, (TOPIC, 2): 10})
    assert len(first_reads) == 180
    more = producer(PRIMARY)  # written just before the failover: the drain must carry them over
    for i in range(PER_PARTITION * PARTITIONS, PER_PARTITION * PARTITIONS + 90):
        more.produce(TOPIC, f"v{i}".encode(), partition=i % PARTITIONS)
    more.flush(30)

    state, tasks, report = _run_dag(dr, "mirrorflow_failover", {
        "source": "primary", "target": "backup", "groups": "dr-.*", "mode": "planned", "dry_run": False,
        "require_approval": False})
    assert state == "success", tasks
    assert tasks["approval"] == "skipped" and tasks["DRY_RUN"] == "skipped"  # a real run: no dry-run mark
    print("\n" + report["markdown"])
    assert report["groups"] == 1 and report["partitions"] == PARTITIONS and "RPO: 0 records" in report["markdown"]

    assert not _holders(dr.cfg, "primary->backup")  # stopped by the runbook: the stream finished its batch, exited 0
    running = [r for r in StreamDagRun.started if r.dag_id.endswith("primary_to_backup")][-1]
    assert "state=success" in running.wait(120)
    assert lifecycle.requested(FlowLink.of(dr.cfg, dr.cfg.flow("primary->backup"))).state == lifecycle.STOPPED
    assert lifecycle.requested(FlowLink.of(dr.cfg, dr.cfg.flow("backup->primary"))).state == lifecycle.RUNNING
    on_backup = _consume(BACKUP, GROUP, [f"primary.{TOPIC}"])
    everything = {f"v{i}".encode() for i in range(PER_PARTITION * PARTITIONS + 90)}
    assert len(on_backup) == len(set(on_backup)) == len(everything) - 180  # zero re-read
    assert set(on_backup) | set(first_reads) == everything  # zero lost


def test_failback_brings_home_what_was_produced_on_the_backup_and_the_group_resumes_without_loss(
        dr: Deployment) -> None:
    create_topic(BACKUP, TOPIC, PARTITIONS)
    p = producer(BACKUP)
    for i in range(150):
        p.produce(TOPIC, f"outage-{i}".encode(), partition=i % PARTITIONS)
    p.flush(30)
    read_on_backup = _consume(BACKUP, GROUP, [TOPIC], limit={(TOPIC, 0): 20, (TOPIC, 1): 0, (TOPIC, 2): 50})
    StreamDagRun(dr, "backup->primary")  # requested running by the failover: the scheduler starts it

    state, tasks, report = _run_dag(dr, "mirrorflow_failback", {
        "original": "primary", "backup": "backup", "groups": "dr-.*", "dry_run": False, "require_approval": False,
        "drain_timeout_s": 300})
    assert state == "success", tasks
    print("\n" + report["markdown"])

    came_back = [m.value() for p in range(PARTITIONS)
                 for m in read_partition(PRIMARY, f"backup.{TOPIC}", p, committed=True)]
    assert sorted(came_back) == sorted(f"outage-{i}".encode() for i in range(150))
    resumed = _consume(PRIMARY, GROUP, [TOPIC, f"backup.{TOPIC}"])
    assert sorted(resumed) == sorted(set(f"outage-{i}".encode() for i in range(150)) - set(read_on_backup))
    assert not _holders(dr.cfg, "backup->primary")
    assert lifecycle.requested(FlowLink.of(dr.cfg, dr.cfg.flow("backup->primary"))).state == lifecycle.STOPPED
    assert lifecycle.requested(FlowLink.of(dr.cfg, dr.cfg.flow("primary->backup"))).state == lifecycle.RUNNING


def test_the_control_and_health_dags_fail_when_a_flow_requested_running_has_no_stream(
        dr: Deployment) -> None:
    state, tasks, _ = _run_dag(dr, "mirrorflow_control__backup_to_primary", {"action": "health"})
    assert state == "success"  # stopped by the failback, as requested
    state, tasks, _ = _run_dag(dr, "mirrorflow_control__primary_to_backup", {"action": "health"})
    assert state == "failed" and tasks["act"] == "failed"  # requested running by the failback, not launched here
    # The scheduled check says the same with no one clicking: Airflow's failure alerts fire.
    state, tasks, _ = _run_dag(dr, "mirrorflow_flow__primary_to_backup", {}, only="health")
    assert state == "failed" and tasks["health"] == "failed"
    state, tasks, _ = _run_dag(dr, "mirrorflow_flow__backup_to_primary", {}, only="health")
    assert state == "success"  # stopped as requested: healthy
