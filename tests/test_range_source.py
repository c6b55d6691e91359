"""The stream's source (spark/range_source) against a real broker, in this process: the end offsets each trigger
plans, read afresh or while the previous batch copied (batch_plan P7)."""

from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import Producer
from mirrorflow.model import config
from mirrorflow.rules import batch_plan, source_reads
from mirrorflow.spark.range_source import RangeReader, SourcePlan
from pyspark.sql.streaming.datasource import ReadMaxRows
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
