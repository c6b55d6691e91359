"""Reads the mirrors of one source partition back from the target, by target offset (translation.TargetReader).

Every record the stream writes carries a provenance header naming its source cluster, topic, partition and
offset (its last one, for records that crossed several hops); records of other writers, of backfill repairs
written without offset syncs aside, do not name this flow's source partition and are passed over.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from mirrorflow.errors import OperationalError
from mirrorflow.kafka.internal_log import fetched
from mirrorflow.rules import provenance

_IDLE_TIMEOUT_S = 30.0


class TargetRecords:
    """One consumer on the target (read_committed), shared by the partitions a round asks about, one at a time."""

    def __init__(self, consumer_settings: Mapping[str, Any], source_alias: str, *,
                 idle_timeout_s: float = _IDLE_TIMEOUT_S) -> None:
        self.source_alias, self.idle_timeout_s = source_alias, idle_timeout_s
        self._consumer = Consumer({**consumer_settings, "group.id": "mirrorflow-target-reader",
                                   "enable.auto.commit": False, "isolation.level": "read_committed",
                                   "enable.partition.eof": True, "auto.offset.reset": "earliest",
                                   # A probe must not wait for more data than the broker has now, nor out a
                                   # backoff left by the previous probe's full queue (1 s by default).
                                   "queued.min.messages": 2_000, "fetch.wait.max.ms": 0,
                                   "fetch.queue.backoff.ms": 0})
        self.reads = 0  # fetches made: what a translation cost

    def partition(self, remote_topic: str, source_topic: str, partition: int) -> PartitionReader:
        return PartitionReader(self, remote_topic, source_topic, partition)

    def close(self) -> None:
        self._consumer.close()


class PartitionReader:
    def __init__(self, records: TargetRecords, remote_topic: str, source_topic: str, partition: int) -> None:
        self.records, self.remote_topic, self.partition = records, remote_topic, partition
        self._prefix = f"{records.source_alias}/{source_topic}/{partition}/".encode()

    def _source_offset(self, headers: Any) -> int | None:
        for key, value in reversed(headers or ()):
            if key == provenance.HEADER and isinstance(value, bytes):
                return int(value[len(self._prefix):]) if value.startswith(self._prefix) else None
        return None

    def chunk(self, start: int, end: int) -> list[tuple[int, int]]:
        consumer = self.records._consumer
        out: list[tuple[int, int]] = []
        try:
            consumer.assign([TopicPartition(self.remote_topic, self.partition, start)])
            progress = time.monotonic()
            while True:
                msgs = fetched(consumer, 2_000, 0.5)
                self.records.reads += 1
                past_end = False
                for msg in msgs:
                    error = msg.error()
                    if error is not None:
                        past_end = past_end or error.code() == KafkaError._PARTITION_EOF
                        continue
                    offset = msg.offset() or 0
                    if offset >= end:
                        past_end = True
                        break
                    upstream = self._source_offset(msg.headers())
                    if upstream is not None:
                        out.append((offset, upstream))
                if msgs:
                    progress = time.monotonic()
                if out or past_end:
                    return out
                if time.monotonic() - progress > self.records.idle_timeout_s:
                    raise OperationalError(f"cannot read {self.remote_topic}-{self.partition} on the target at "
                                           f"offset {start}: no record for {self.records.idle_timeout_s:.0f} s")
        except KafkaException as exc:
            raise OperationalError(f"cannot read {self.remote_topic}-{self.partition} on the target: "
                                   f"{exc.args[0].str()}") from None
        finally:
            consumer.unassign()

    def last_before(self, end: int, start: int) -> tuple[int, int] | None:
        window = 256
        while end > start:
            at = max(start, end - window)
            found, pos = None, at
            while pos < end:
                got = self.chunk(pos, end)
                if not got:
                    break
                found, pos = got[-1], got[-1][0] + 1
            if found is not None:
                return found
            end, window = at, window * 4
        return None
