"""The stream's source (spark/range_source) against a real broker, in this process: the end offsets each trigger
plans, read afresh or while the previous batch copied (batch_plan P7)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from mirrorflow.model import config
from mirrorflow.rules import batch_plan, offset_bases, source_reads
from mirrorflow.rules.batch_plan import Range
from mirrorflow.spark import offset_log, range_source
from mirrorflow.spark.range_source import RangeReader, SourcePlan
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from support.clusters import PORTS
from support.streams import QUIET, create_topic

pytestmark = pytest.mark.kafka

ALPHA = f"127.0.0.1:{PORTS['alpha']}"


def _produce(topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": ALPHA, "linger.ms": 5, **QUIET})
    for i in range(n):
        p.produce(topic, b"r%d" % i, partition=0)
    assert p.flush(30) == 0


def _trigger(reader: RangeReader, start: dict[tuple[str, int], int], cap: int) -> dict[tuple[str, int], int]:
    end = batch_plan.decode(reader.latestOffset(batch_plan.encode(start), ReadMaxRows(cap)))
    if reader._ahead is not None:  # a read ahead is in before the next trigger, as while a batch copies
        reader._ahead.result(30)
    return end


def test_a_stream_a_batch_behind_plans_from_ends_read_ahead_and_one_that_keeps_up_from_fresh_ends(
        local_clusters: config.MirrorConfig) -> None:
    topic = "source.ahead"
    create_topic(ALPHA, topic, 1)
    _produce(topic, 250)
    reader = RangeReader(SourcePlan("alpha->beta", "alpha", {"bootstrap.servers": ALPHA, **QUIET}, re.escape(topic),
                                    read_committed=False, slots=1, max_records=100, starting="earliest"))
    tp = (topic, 0)

    def reported() -> source_reads.EndsRead:
        read = source_reads.parse_report(reader.reportLatestOffset())
        assert read is not None and read.complete
        return read

    try:
        assert _trigger(reader, {tp: 0}, 100) == {tp: 100}  # 150 left: a whole batch, so its ends are read ahead
        first = reported()
        produced = time.time()
        _produce(topic, 10_000)
        # Planned from the ends read ahead (250): the batch is as full as fresh ends would make it. The report says
        # the ends are as of the read ahead, before the 10,000 were produced (range_source S5).
        assert _trigger(reader, {tp: 100}, 100) == {tp: 200}
        ahead = reported()
        assert ahead.ends == {tp: 250} and first.as_of <= ahead.as_of < produced
        # 50 left by those ends, less than a batch: the next trigger reads afresh and sees every record.
        assert _trigger(reader, {tp: 200}, 100) == {tp: 300}
        fresh = reported()
        assert fresh.ends == {tp: 10_250} and ahead.as_of <= fresh.as_of <= time.time()
    finally:
        reader.stop()


def test_an_idle_flows_ends_are_read_again_only_after_the_read_budget_allows_and_every_trigger_once_a_batch_runs(
        local_clusters: config.MirrorConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = "source.idle"
    create_topic(ALPHA, topic, 1)
    _produce(topic, 10)
    monkeypatch.setattr(range_source, "IDLE_READ_SHARE", 1e-4)  # a read of ~1 ms of CPU: ~10 s of quiet
    reader = RangeReader(SourcePlan("alpha->beta", "alpha", {"bootstrap.servers": ALPHA, **QUIET}, re.escape(topic),
                                    read_committed=False, slots=1, max_records=100, starting="earliest"))
    tp = (topic, 0)
    try:
        assert _trigger(reader, {tp: 0}, 100) == {tp: 10}
        assert reader._quiet_until == 0.0  # a batch runs: the next trigger reads again
        assert _trigger(reader, {tp: 10}, 100) == {tp: 10}  # nothing new: the flow is idle (S6)
        quiet_s = reader._quiet_until - time.monotonic()
        assert 0 < quiet_s < 120, quiet_s
        _produce(topic, 5)
        assert _trigger(reader, {tp: 10}, 100) == {tp: 10}  # within the quiet spell: no read, no batch
        time.sleep(max(0.0, reader._quiet_until - time.monotonic()))
        assert _trigger(reader, {tp: 10}, 100) == {tp: 15}  # the spell over: the next read finds the records
        assert reader._quiet_until < time.monotonic()
    finally:
        reader.stop()


def test_a_watcher_stays_assigned_from_spell_to_spell_and_a_record_arriving_ends_the_spell_at_once(
        local_clusters: config.MirrorConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = "source.watched"
    create_topic(ALPHA, topic, 3)
    _produce(topic, 10)
    monkeypatch.setattr(range_source, "IDLE_READ_SHARE", 1e-6)  # every spell the longest, and watched
    settings = {"bootstrap.servers": ALPHA, **QUIET}
    reader = RangeReader(SourcePlan("alpha->beta", "alpha", settings, re.escape(topic), read_committed=False, slots=1,
                                    max_records=100, starting="earliest", watch_settings=settings))
    start = {(topic, 0): 10, (topic, 1): 0, (topic, 2): 0}
    try:
        assert _trigger(reader, start, 100) == start  # idle: a spell of WATCHED_MAX_S begins, watched
        assert reader._watching and reader._quiet_until - time.monotonic() > range_source.WATCHED_MAX_S - 5
        assert _trigger(reader, start, 100) == start
        watched = reader._watched
        reader._quiet_until = 0.0  # the spell over: the read finds the same ends, and the watcher stays as it was
        assert _trigger(reader, start, 100) == start
        assert reader._watching and reader._watched is watched
        p = Producer({"bootstrap.servers": ALPHA, **QUIET})
        p.produce(topic, b"late", partition=2)
        assert p.flush(30) == 0
        produced = time.monotonic()
        while (end := _trigger(reader, start, 100)) == start:
            assert time.monotonic() - produced < 5, "the watcher did not end the spell"
            time.sleep(0.1)
        assert end == {**start, (topic, 2): 1} and not reader._watching
        print(f"the spell ended {time.monotonic() - produced:.2f} s after the record was acknowledged")
    finally:
        reader.stop()


def test_a_flow_of_more_partitions_than_watch_max_has_no_watcher_and_idle_spells_of_at_most_quiet_max(
        local_clusters: config.MirrorConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """S6's bound: no consumer of the planner waits on thousands of partitions (a broker keeps a waiting fetch on a
    watch list of each of its partitions); here WATCH_MAX_PARTITIONS is 2 for a flow of 3."""
    topic = "source.unwatched"
    create_topic(ALPHA, topic, 3)
    _produce(topic, 10)
    monkeypatch.setattr(range_source, "IDLE_READ_SHARE", 1e-6)  # long spells: watched, were it not for the bound
    monkeypatch.setattr(range_source, "WATCH_MAX_PARTITIONS", 2)
    settings = {"bootstrap.servers": ALPHA, **QUIET}
    reader = RangeReader(SourcePlan("alpha->beta", "alpha", settings, re.escape(topic), read_committed=False, slots=1,
                                    max_records=100, starting="earliest", watch_settings=settings))
    start = {(topic, 0): 10, (topic, 1): 0, (topic, 2): 0}
    try:
        assert _trigger(reader, start, 100) == start
        assert not reader._watching and reader._watcher is None
        assert 0 < reader._quiet_until - time.monotonic() <= range_source.QUIET_MAX_S
    finally:
        reader.stop()


def test_a_batch_in_which_one_partition_of_200_moved_logs_that_partition_and_its_base_and_replays_the_same(
        local_clusters: config.MirrorConfig, tmp_path: Path) -> None:
    topic = "source.bases"
    create_topic(ALPHA, topic, 200)
    p = Producer({"bootstrap.servers": ALPHA, "linger.ms": 5, **QUIET})
    for partition in (0, 1, 2):
        p.produce(topic, b"r", partition=partition)
    assert p.flush(30) == 0
    plan = SourcePlan("alpha->beta", "alpha", {"bootstrap.servers": ALPHA, **QUIET}, re.escape(topic),
                      read_committed=False, slots=2, max_records=None, starting="earliest",
                      bases_path=str(tmp_path / offset_log.BASES))
    reader, restarted = RangeReader(plan), RangeReader(plan)
    start = {(topic, q): 0 for q in range(200)}
    try:
        first = reader.latestOffset(batch_plan.encode(start), ReadAllAvailable())
        assert offset_bases.base_number(first) == 0 and first[offset_bases.MOVED_KEY] == {}  # the first: a base
        assert offset_log.read_base(tmp_path / offset_log.BASES, 0).offsets == {
            **start, (topic, 0): 1, (topic, 1): 1, (topic, 2): 1}
        p.produce(topic, b"r", partition=7)
        assert p.flush(30) == 0
        second = reader.latestOffset(first, ReadAllAvailable())
        assert second == {offset_bases.BASE_KEY: 0, offset_bases.MOVED_KEY: {topic: {"7": 1}}}
        assert reader.latestOffset(second, ReadAllAvailable()) is second  # nothing new: the same entry (B2)
        # Idle, the read is reported against the base: what moved since it, which the driver reads back whole.
        report = reader.reportLatestOffset()
        read = source_reads.parse_report(report, lambda n: offset_log.read_base(tmp_path / offset_log.BASES, n).offsets)
        assert read == reader._read and read is not None and read.ends[(topic, 7)] == 1
        if read.complete:  # (a read that lacks many partitions just then, without a leader, is reported whole)
            assert report is not None and (report["base"], report["ends_moved"]) == (0, f"{topic} 7:1")
        # A replay after a restart plans the batch from the same entry exactly as it was planned.
        assert ([s.ranges for s in restarted.partitions(first, second)]
                == [s.ranges for s in reader.partitions(first, second)] == [(Range(topic, 7, 0, 1),)])
    finally:
        reader.stop()
        restarted.stop()


def test_each_flow_registers_its_source_under_a_name_of_its_own_the_same_at_every_start() -> None:
    names = {flow: range_source.source_name(flow) for flow in ("a->b", "b->a", "a->c", "a.b->c", "a->b.c")}
    assert len(set(names.values())) == len(names)
    assert all(n.startswith("mirrorflow_ranges_") and n.isidentifier() for n in names.values())
    assert range_source.source_name("a->b") == names["a->b"]
    sources = [range_source.source_class(SourcePlan(flow, flow.split("->")[0], {}, "t", read_committed=False,
                                                     slots=1, max_records=1, starting="earliest"))
               for flow in ("a->b", "b->a")]
    assert [s.name() for s in sources] == [names["a->b"], names["b->a"]]
