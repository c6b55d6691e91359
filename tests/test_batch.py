"""Backfill and the completeness audit on real clusters and real Spark (in this process, local[2]).

A "broken mirror" is a remote topic written by hand the way the stream writes it (same partition, key, value,
headers, timestamp, and this hop's provenance header), with a dropped range, a duplicated range, a changed
value and a changed header; its offset syncs position says the flow has read it, as the stream would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from mirrorflow.jobs import audit, backfill
from mirrorflow.jobs.ranges import Window
from mirrorflow.kafka import admin_sync, offset_sync_log
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model import config
from mirrorflow.rules import offset_syncs
from mirrorflow.rules.offset_syncs import Position
from mirrorflow.rules.provenance import HEADER, Provenance
from support.airflow import deployment
from support.clusters import PORTS, REPO
from support.streams import (
    StreamProcess,
    config_text,
    create_topic,
    producer,
    read_partition,
    record_counts,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]
ALPHA = f"127.0.0.1:{PORTS['alpha']}"
BETA = f"127.0.0.1:{PORTS['beta']}"
FLOW = "quarry->depot"
# The hand-made mirrors' records carry timestamps in closed hours, so the hourly audit DAG can pick them out.
HOUR = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=6)


@pytest.fixture(scope="module")
def cfg_path(stream_clusters: config.MirrorConfig, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("batch") / "mirror.properties"
    path.write_text(config_text(("quarry", "depot"), (PORTS["alpha"], PORTS["beta"]), [FLOW],
                                "quarry->depot.topics = bf\\..*\nquarry->depot.emit.heartbeats.enabled = false\n"))
    return path


@pytest.fixture(scope="module")
def spark(stream_clusters: config.MirrorConfig) -> Iterator[Any]:
    from mirrorflow.spark import spark_session

    session = spark_session.build("mirrorflow tests: batch", "local[2]")
    yield session
    session.stop()


def _record(topic: str, partition: int, i: int, ts: int) -> dict[str, Any]:
    headers = [("trace", f"t-{partition}-{i}".encode()), ("empty", None)] if i % 3 else None
    return {"key": None if i % 7 == 0 else f"k{i}".encode(), "value": f"{topic}/{partition}/{i}".encode() * 3,
            "headers": headers, "timestamp": ts}


def _produce_source(topic: str, partitions: int, per_partition: int, base_ms: int) -> dict[int, list[dict[str, Any]]]:
    create_topic(ALPHA, topic, partitions)
    p = producer(ALPHA)
    out: dict[int, list[dict[str, Any]]] = {}
    for part in range(partitions):
        out[part] = [_record(topic, part, i, base_ms + part * 1000 + i * 10) for i in range(per_partition)]
        for r in out[part]:
            p.produce(topic, r["value"], r["key"], partition=part, headers=r["headers"], timestamp=r["timestamp"])
    assert p.flush(30) == 0
    return out


def _mirror_by_hand(topic: str, partitions: int, copies: dict[int, list[tuple[int, dict[str, Any]]]],
                    read_to: dict[int, int]) -> None:
    """Write the remote topic as the stream would (records, then the positions), from (source offset, record) pairs."""
    remote = f"quarry.{topic}"
    create_topic(BETA, remote, partitions)
    syncs = offset_syncs.topic_name("quarry")
    admin_sync.ensure_internal_topic(AdminClient({"bootstrap.servers": BETA}), "depot", syncs, 1,
                                     {"cleanup.policy": "compact"})
    failed: list[Any] = []
    p = producer(BETA, on_delivery=lambda err, _msg: failed.append(err) if err else None)
    for part, pairs in copies.items():
        for offset, r in pairs:
            hop = (HEADER, Provenance("quarry", topic, part, offset).encode())
            p.produce(remote, r["value"], r["key"], partition=part, headers=[*(r["headers"] or []), hop],
                      timestamp=r["timestamp"])
    for part, upstream_next in read_to.items():
        position = Position(topic, part, upstream_next, None)
        p.produce(syncs, position.value(), position.key(), partition=0)
    assert p.flush(30) == 0 and not failed, failed


def _origins(remote: str, partition: int) -> list[int]:
    """The source offsets a remote partition's records carry, in target order."""
    return [Provenance.parse(dict(m.headers())[HEADER]).offset
            for m in read_partition(BETA, remote, partition, committed=True)]


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _dag_run(cfg_path: Path, dag_id: str, key: str, **test_args: Any) -> tuple[str, dict[str, Any]]:
    """Run a DAG (dag.test) in this process: its state and the XCom `key` of its one task."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with deployment(cfg_path) as bag:
        dag = bag.dags[dag_id]
        run = dag.test(**test_args)
    with create_session() as session:
        row = session.query(XComModel).filter_by(dag_id=dag.dag_id, run_id=run.run_id, key=key).one()
        return str(run.state), row.value if isinstance(row.value, dict) else json.loads(row.value)


def _tries(dag_id: str) -> int:
    """How many times the task of the DAG's newest run was tried."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        newest = session.query(TaskInstance).filter_by(dag_id=dag_id).order_by(TaskInstance.start_date.desc()).first()
        return int(newest.try_number)


def _dag_audit(cfg_path: Path, window_end: datetime) -> tuple[str, dict[str, Any]]:
    """The flow's hourly audit DAG, run for the hour ending at `window_end`: its state and its report."""
    return _dag_run(cfg_path, "mirrorflow_audit__quarry_to_depot", "report", logical_date=window_end)


def test_backfill_into_an_empty_target_twice_writes_each_record_once_and_the_stream_continues_after_it(
        cfg_path: Path, spark: Any, tmp_path: Path) -> None:
    cfg = config.load(cfg_path)
    source = _produce_source("bf.seed", 3, 100, _ms(HOUR))
    first = backfill.run(FlowLink.of(cfg, FLOW), topics=r"bf\.seed", from_offsets={"bf.seed": {0: -2, 1: -2, 2: 0}},
                         spark=spark)
    print("\n" + first.table())
    assert first.written == 300 and {p.mode for p in first.partitions} == {backfill.SEED}
    # Again, as the spark_jobs/ entry point under spark-submit: nothing is written the second time.
    from mirrorflow.spark import spark_session

    submit = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]", "--driver-memory", "640m",
              "--jars", ",".join(str(j) for j in spark_session.kafka_jars()), str(REPO / "spark_jobs" / "backfill.py"),
              "--config", str(cfg_path), "--flow", FLOW, "--topics", r"bf\.seed", "--json",
              "--from-offsets", '{"bf.seed": {"0": 0, "1": 0, "2": 0}}']
    done = subprocess.run(submit, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout  # spark-submit's Python runner merges the driver's log (stderr) into it
    second = json.loads(out[out.index("\n{") + 1:out.rindex("}") + 1])
    assert second["written"] == 0 and [p["mode"] for p in second["partitions"]] == ["repair"] * 3, second
    for part in range(3):
        copies = read_partition(BETA, "quarry.bf.seed", part)
        assert _origins("quarry.bf.seed", part) == list(range(100))
        for m, r in zip(copies, source[part], strict=True):
            assert (m.key(), m.value(), m.timestamp()[1], m.partition()) == (r["key"], r["value"], r["timestamp"], part)
            assert [h for h in m.headers() if h[0] != HEADER] == (r["headers"] or [])

    report = audit.run(FlowLink.of(cfg, FLOW), topics=r"bf\.seed", spark=spark)
    print(report.table())
    assert report.complete and report.total("source_records") == 300 and report.total("mirrored_records") == 300
    assert report.total("duplicated") == report.total("behind") == 0

    # The seed set each partition's position to its end: the stream starts there, with no gap and no duplicate.
    p = producer(ALPHA)
    for i in range(30):
        p.produce("bf.seed", f"after-{i}".encode(), partition=i % 3)
    assert p.flush(30) == 0
    stream = StreamProcess(cfg_path, FLOW, tmp_path / "stream")
    stream.start()
    try:
        wait_for(lambda: sum(record_counts(BETA, "quarry.bf.seed")) >= 330, 240, "the 30 new records", stream)
    finally:
        assert stream.stop() == 0, stream.output()[-3000:]
    for part in range(3):
        assert _origins("quarry.bf.seed", part) == list(range(110)), part

    # The audit reads both sides of the new records: each mirrored once.
    since = Window(int(time.time() * 1000) - 15 * 60_000, None)
    proven = audit.run(FlowLink.of(cfg, FLOW), topics=r"bf\.seed", window=since, spark=spark)
    print(proven.table())
    assert proven.complete and (proven.total("source_records"), proven.total("mirrored_records")) == (30, 30)
    # A second copy of source offset 105 of partition 0: the audit names it.
    [copy] = [m for m in read_partition(BETA, "quarry.bf.seed", 0) if Provenance.parse(dict(m.headers())[HEADER]).offset
              == 105]
    p = producer(BETA)
    p.produce("quarry.bf.seed", copy.value(), copy.key(), partition=0, headers=copy.headers(),
              timestamp=copy.timestamp()[1])
    assert p.flush(30) == 0
    rechecked = audit.run(FlowLink.of(cfg, FLOW), topics=r"bf\.seed", window=since, spark=spark)
    print(rechecked.table())
    assert rechecked.total("duplicated") == 1 and rechecked.partitions[0].duplicated_ranges == ((105, 105),)


@pytest.mark.airflow
def test_audit_names_exactly_the_dropped_duplicated_and_altered_offsets_of_a_broken_mirror(
        cfg_path: Path, spark: Any, airflow_home: Path) -> None:
    window_start = HOUR + timedelta(hours=1)
    source = _produce_source("bf.broken", 2, 60, _ms(window_start))
    zero = [(o, r) for o, r in enumerate(source[0]) if not 10 <= o <= 19]  # offsets 10-19 dropped
    at = next(i for i, (o, _) in enumerate(zero) if o == 35)
    zero[at:at] = [(o, source[0][o]) for o in range(30, 35)]  # offsets 30-34 written twice
    at = next(i for i, (o, _) in enumerate(zero) if o == 40)
    zero[at] = (40, {**source[0][40], "value": b"changed"})
    one = [(o, r) for o, r in enumerate(source[1][:50])]  # the flow has read 50 of 60: 50-59 are behind
    one[7] = (7, {**source[1][7], "headers": [("trace", b"changed"), ("empty", None)]})
    looped = producer(ALPHA)  # it came from the depot topic it would go to: refused by design, counted, not missing
    looped.produce("bf.broken", b"from depot", partition=0, timestamp=_ms(window_start) + 5000,
                   headers=[(HEADER, Provenance("depot", "quarry.bf.broken", 0, 3).encode())])
    assert looped.flush(30) == 0
    _mirror_by_hand("bf.broken", 2, {0: zero, 1: one}, {0: 61, 1: 50})

    done = subprocess.run([sys.executable, "-m", "mirrorflow", "--config", str(cfg_path), "audit", "--flow", FLOW,
                           "--topics", r"bf\.broken", "--master", "local[2]"],
                          capture_output=True, text=True, cwd=REPO, timeout=300, check=False)
    print("\n$ mirrorflow audit --flow quarry->depot --topics 'bf\\.broken'\n" + done.stdout)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "INCOMPLETE: 10 missing (bf.broken-0 10-19); 2 differ (bf.broken-0@40 value, bf.broken-1@7 headers); " \
           "5 duplicated (bf.broken-0 30-34); 10 not yet mirrored (the stream is behind); 1 refused: they came from " \
           "the depot topic they would be written to (bf.broken-0 1)" in done.stdout, done.stdout

    report = audit.run(FlowLink.of(config.load(cfg_path), FLOW), topics=r"bf\.broken", spark=spark)
    p0, p1 = report.partitions
    assert (p0.end, p0.source_records, p0.mirrored_records, p0.copies, p0.refused) == (61, 61, 50, 55, 1)
    assert (p0.missing, p0.missing_ranges, p0.duplicated, p0.duplicated_ranges) == (10, ((10, 19),), 5, ((30, 34),))
    assert [(d.offset, d.fields) for d in p0.differences] == [(40, ("value",))]
    assert (p1.missing, p1.duplicated, p1.behind, p1.behind_from) == (0, 0, 10, 50)
    assert [(d.offset, d.fields, d.at) for d in p1.differences] == [(7, ("headers",), "quarry.bf.broken-1@7")]

    # The hourly DAG over the records' hour fails, and its report names the same offsets.
    state, xcom = _dag_audit(cfg_path, window_start + timedelta(hours=1))
    assert state == "failed" and not xcom["complete"]
    assert _tries("mirrorflow_audit__quarry_to_depot") == 1  # a finding is not retried (only a task that cannot start)
    assert xcom["missing"] == 10 and xcom["differing"] == 2 and xcom["duplicated"] == 5 and xcom["behind"] == 10
    assert xcom["partitions"][0]["missing_ranges"] == [[10, 19]], xcom["partitions"][0]


@pytest.mark.airflow
def test_the_hourly_audit_of_a_standby_flow_succeeds_with_nothing_to_audit(airflow_home: Path,
                                                                            tmp_path: Path) -> None:
    path = tmp_path / "standby.properties"
    path.write_text(config_text(("quarry", "depot"), (PORTS["alpha"], PORTS["beta"]), ["depot->quarry"],
                                "depot->quarry.topics = standby\\..*\n"))
    state, xcom = _dag_run(path, "mirrorflow_audit__depot_to_quarry", "report",
                           logical_date=HOUR + timedelta(hours=1))
    assert state == "success" and xcom["complete"] and xcom["partitions"] == [], xcom
    assert "nothing to audit: no topic on depot" in xcom["summary"]
    # Asked for by name: an error.
    with pytest.raises(config.ConfigError, match="no topic on depot matches topics regex"):
        audit.run(FlowLink.of(config.load(path), "depot->quarry"), topics=r"standby\.orders")


@pytest.mark.airflow
def test_backfill_repairs_the_gap_an_audit_found_and_the_next_audit_is_complete(
        cfg_path: Path, spark: Any, airflow_home: Path) -> None:
    cfg = config.load(cfg_path)
    window_start = HOUR + timedelta(hours=2)
    source = _produce_source("bf.gap", 2, 40, _ms(window_start))
    copies = {0: [(o, r) for o, r in enumerate(source[0]) if not 5 <= o <= 9],
              1: [(o, r) for o, r in enumerate(source[1]) if o not in (0, 39)]}
    _mirror_by_hand("bf.gap", 2, copies, {0: 40, 1: 40})
    found = audit.run(FlowLink.of(cfg, FLOW), window=Window(_ms(window_start), _ms(window_start + timedelta(hours=1))),
                      spark=spark)
    assert [(p.name, p.missing_ranges) for p in found.partitions if p.missing] == \
           [("bf.gap-0", ((5, 9),)), ("bf.gap-1", ((0, 0), (39, 39)))]

    # The person on call fills in the backfill DAG's form with what the audit named.
    state, repaired = _dag_run(cfg_path, "mirrorflow_backfill", "return_value", run_conf={
        "flow": FLOW, "topics": r"bf\.gap", "from_offsets": '{"bf.gap": {"0": 5, "1": 0}}'})
    print("\n" + repaired["summary"])
    assert state == "success" and repaired["written"] == 7
    # Below the flow's position only, and without offset syncs (the repaired records come after later ones).
    assert [(p["mode"], p["start"], p["end"]) for p in repaired["partitions"]] == [("repair", 5, 40), ("repair", 0, 40)]
    syncs = offset_sync_log.read({"bootstrap.servers": BETA}, offset_syncs.topic_name("quarry"))
    assert not syncs.anchors.get(("bf.gap", 0)) and syncs.positions[("bf.gap", 0)].upstream_next == 40

    state, xcom = _dag_audit(cfg_path, window_start + timedelta(hours=1))
    print(xcom["summary"])
    assert state == "success" and xcom["complete"] and xcom["source_records"] == 80 and xcom["mirrored_records"] == 80


@pytest.mark.airflow
def test_the_hourly_audit_finds_a_record_the_copier_never_read_at_its_offset(airflow_home: Path,
                                                                              tmp_path: Path) -> None:
    """The copier's consumer is made to skip one source record (tests/support/copier_fault: a fault the stream
    does not notice); the hourly audit, which reads the source itself, fails and names that offset."""
    path = tmp_path / "skip.properties"
    path.write_text(config_text(("ore", "vault"), (PORTS["alpha"], PORTS["beta"]), ["ore->vault"],
                                "ore->vault.topics = skip\\.orders\nore->vault.emit.heartbeats.enabled = false\n"))
    hour = HOUR + timedelta(hours=3)
    _produce_source("skip.orders", 2, 1_500, _ms(hour))
    fault = {"PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "support" / "copier_fault"),
                                            os.environ.get("PYTHONPATH", "")]),
             "MIRRORFLOW_TEST_SKIP_RECORD": "skip.orders/1/1234"}
    stream = StreamProcess(path, "ore->vault", tmp_path / "stream", env=fault)
    stream.start()
    try:
        syncs = offset_syncs.topic_name("ore")
        wait_for(lambda: offset_sync_log.read({"bootstrap.servers": BETA}, syncs).positions.get(
            ("skip.orders", 1), Position("", 0, 0, None)).upstream_next == 1_500, 240, "the copy of 3,000 records",
            stream)
    finally:
        assert stream.stop() == 0, stream.output()[-3000:]
    assert sum(record_counts(BETA, "ore.skip.orders")) == 2_999  # the stream went on past the record it never read

    state, xcom = _dag_run(path, "mirrorflow_audit__ore_to_vault", "report", logical_date=hour + timedelta(hours=1))
    print(xcom["summary"])
    assert state == "failed" and not xcom["complete"] and xcom["missing"] == 1
    assert [(p["partition"], p["missing_ranges"]) for p in xcom["partitions"] if p["missing"]] == [(1, [[1234, 1234]])]
    assert "1 missing (skip.orders-1 1234)" in xcom["summary"]


def test_backfill_refuses_while_the_stream_runs_and_pause_hands_over(cfg_path: Path, spark: Any,
                                                                     tmp_path: Path) -> None:
    from mirrorflow.errors import OperationalError
    from mirrorflow.jobs import lifecycle
    from mirrorflow.kafka import clients, flow_lease

    cfg = config.load(cfg_path)
    flow = cfg.flow(FLOW)
    _produce_source("bf.pause", 1, 20, _ms(HOUR))
    lifecycle.start(FlowLink.of(cfg, flow), "test")
    stream = StreamProcess(cfg_path, FLOW, tmp_path / "stream")
    stream.start()
    try:
        admin = clients.admin(cfg.cluster("depot"))
        wait_for(lambda: bool(flow_lease.holders(admin, FLOW)), 120, "the stream to hold its lease", stream)
        with pytest.raises(OperationalError, match=r"is running .*: a backfill writes only while the stream is "
                                                   r"stopped; stop it \(mirrorflow stop --flow quarry->depot\)"):
            backfill.run(FlowLink.of(cfg, FLOW), topics=r"bf\.pause", from_offsets={"bf.pause": {0: 0}},
                         spark=spark)
        report = backfill.run(FlowLink.of(cfg, FLOW), topics=r"bf\.pause", from_offsets={"bf.pause": {0: 0}},
                              pause=True, spark=spark)
        assert report.paused and stream.proc is not None and stream.proc.wait(120) == 0  # it stopped cleanly
        assert lifecycle.requested(FlowLink.of(cfg, flow)).state == lifecycle.RUNNING  # and is asked to run again
        # Whatever the stream had mirrored, the backfill added only what was missing: every record once.
        assert sorted(_origins("quarry.bf.pause", 0)) == list(range(20)), report.table()
    finally:
        stream.stop()


def test_a_local_sessions_python_workers_start_with_the_writer_already_imported_and_no_archive_to_reread(
        spark: Any) -> None:
    # A worker is forked per task from Spark's Python daemon, and a minute idle ends it: the mirrorflow daemon
    # imports the writer (pyarrow, pandas, confluent-kafka) once, so a new worker does not pay for it; and its path
    # holds no archive, which PySpark's `importlib.invalidate_caches` at a new worker's first task would re-read.
    def imported(batches: Any) -> Any:
        import os
        import sys

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            forked_from = f.read().replace(b"\0", b" ").decode()
        preloaded = all(m in sys.modules for m in ("mirrorflow.spark.stream_writer", "pandas", "confluent_kafka"))
        import pyarrow
        import pyspark

        archives = [p for p in sys.path if p.endswith((".zip", ".jar")) and os.path.exists(p)]
        for _ in batches:
            yield pyarrow.RecordBatch.from_pydict({"daemon": [forked_from], "preloaded": [preloaded],
                                                   "pyspark": [pyspark.__file__], "archives": [repr(archives)]})

    rows = spark.range(2, numPartitions=2).mapInArrow(
        imported, "daemon string, preloaded boolean, pyspark string, archives string").collect()
    assert all("-m mirrorflow.spark.spark_daemon " in r.daemon for r in rows), rows
    assert [r.preloaded for r in rows] == [True, True]
    assert all(".zip" not in r.pyspark and r.archives == "[]" for r in rows), rows


def test_a_local_sessions_jvm_maps_the_class_archive_make_setup_wrote(spark: Any) -> None:
    # The JVM validates an archive against its JDK and classpath and unmaps one that does not match: mapped, it is
    # used.
    from mirrorflow.spark import spark_session

    archive = spark_session.class_archive()
    assert archive is not None and archive.exists(), archive
    jvm = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    with open(f"/proc/{jvm.getPid()}/maps") as maps:
        mapped = {line.split()[-1] for line in maps if line.rstrip().endswith(".jsa")}
    assert str(archive) in mapped, mapped


def test_the_copiers_python_record_digest_equals_sparks_on_every_kind_of_record(spark: Any) -> None:
    import datetime
    import random

    import numpy as np
    from mirrorflow.rules import digests, record_digest

    rng = random.Random(7)
    rows = []
    for i in range(400):
        key = None if i % 7 == 0 else b"" if i % 11 == 0 else rng.randbytes(rng.randint(1, 40))
        value = None if i % 13 == 0 else rng.randbytes(rng.choice([0, 3, 31, 32, 33, 1500]))
        headers = None if i % 3 == 0 else [] if i % 5 == 0 else [
            (f"h-ü{j}", None if j == 1 else rng.randbytes(j * 3)) for j in range(i % 4 + 1)]
        ts = 1_700_000_000_000 + i * 977 - (2_000_000_000_000 if i % 17 == 0 else 0)  # before 1970 too
        rows.append((3 + i % 2, 10**12 + i * 31, key, value, headers,
                     datetime.datetime.fromtimestamp(ts / 1000, datetime.UTC), ts))
    # A partition whose records all have a key and a value and no header, and one where none has a key.
    for i in range(60):
        ts = 1_700_000_000_000 + i
        moment = datetime.datetime.fromtimestamp(ts / 1000, datetime.UTC)
        rows.append((5, i, rng.randbytes(i % 9), rng.randbytes(64), None, moment, ts))
        rows.append((6, i, None, rng.randbytes(64) if i % 2 else None, [] if i % 3 else None, moment, ts))
    df = spark.createDataFrame([r[:6] for r in rows], "partition int, offset long, key binary, value binary, "
                               "headers array<struct<key: string, value: binary>>, timestamp timestamp")
    expected = [r[0] for r in df.selectExpr(digests.RECORD_DIGEST).collect()]
    got: list[int] = []
    for partition in (3, 4, 5, 6):  # the copier computes one partition's records at a time
        mine = [r for r in rows if r[0] == partition]
        got += record_digest.digests_of(partition, np.array([r[1] for r in mine]), [r[2] for r in mine],
                                        [r[3] for r in mine], [r[4] for r in mine],
                                        np.array([r[6] for r in mine])).tolist()
    by_partition = [r for p in (3, 4, 5, 6) for r in rows if r[0] == p]
    assert got == [expected[rows.index(r)] for r in by_partition]
