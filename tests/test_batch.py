"""Backfill and the completeness audit on real clusters and real Spark (in this process, local[2]).

A "broken mirror" is a remote topic written by hand the way the stream writes it (same partition, key, value,
headers, timestamp, and this hop's provenance header), with a dropped range, a duplicated range, a changed
value and a changed header; its offset syncs position says the flow has read it, as the stream would.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import PORTS, REPO, deployment
from mirrorflow import audit, backfill, config, offset_syncs
from mirrorflow.offset_syncs import Position
from mirrorflow.provenance import HEADER, Provenance
from mirrorflow.ranges import Window
from streams import StreamProcess, config_text, create_topic, end_offsets, producer, read_partition, wait_for

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
    from mirrorflow import spark_session

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
    p = producer(BETA)
    for part, pairs in copies.items():
        for offset, r in pairs:
            hop = (HEADER, Provenance("quarry", topic, part, offset).encode())
            p.produce(remote, r["value"], r["key"], partition=part, headers=[*(r["headers"] or []), hop],
                      timestamp=r["timestamp"])
    for part, upstream_next in read_to.items():
        position = Position(topic, part, upstream_next, -1)
        p.produce(offset_syncs.topic_name("quarry"), position.value(), position.key(), partition=0)
    assert p.flush(30) == 0


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _dag_audit(cfg_path: Path, window_end: datetime) -> tuple[str, dict[str, Any]]:
    """Run the flow's audit DAG (dag.test) for the hour ending at `window_end`: its state and its report XCom."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with deployment(cfg_path) as bag:
        dag = bag.dags["mirrorflow_audit__quarry_to_depot"]
        run = dag.test(logical_date=window_end)
    with create_session() as session:
        row = session.query(XComModel).filter_by(dag_id=dag.dag_id, run_id=run.run_id, key="report").one()
        return str(run.state), row.value if isinstance(row.value, dict) else __import__("json").loads(row.value)


def test_backfill_into_an_empty_target_twice_writes_each_record_once_and_the_stream_continues_after_it(
        cfg_path: Path, spark: Any, tmp_path: Path) -> None:
    cfg = config.load(cfg_path)
    source = _produce_source("bf.seed", 3, 100, _ms(HOUR))
    first = backfill.run(cfg, FLOW, topics=r"bf\.seed", from_offsets={"bf.seed": {0: -2, 1: -2, 2: 0}}, spark=spark)
    print("\n" + first.table())
    assert first.written == 300 and {p.mode for p in first.partitions} == {backfill.SEED}
    second = backfill.run(cfg, FLOW, topics=r"bf\.seed", from_offsets={"bf.seed": {0: 0, 1: 0, 2: 0}}, spark=spark)
    assert second.written == 0, second.table()
    for part in range(3):
        copies = read_partition(BETA, "quarry.bf.seed", part)
        assert [Provenance.parse(dict(m.headers())[HEADER]).offset for m in copies] == list(range(100))
        for m, r in zip(copies, source[part], strict=True):
            assert (m.key(), m.value(), m.timestamp()[1], m.partition()) == (r["key"], r["value"], r["timestamp"], part)
            assert [h for h in m.headers() if h[0] != HEADER] == (r["headers"] or [])

    report = audit.run(cfg, FLOW, topics=r"bf\.seed", spark=spark)
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
        wait_for(lambda: sum(end_offsets(BETA, "quarry.bf.seed") or [0]) >= 330, 240, "the 30 new records", stream)
    finally:
        assert stream.stop() == 0, stream.output()[-3000:]
    for part in range(3):
        offsets = [Provenance.parse(dict(m.headers())[HEADER]).offset for m in read_partition(BETA, "quarry.bf.seed", part)]
        assert offsets == list(range(110)), part
