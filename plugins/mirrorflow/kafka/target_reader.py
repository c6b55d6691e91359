"""Reads the mirrors of source partitions back from the target, by target offset (translation.TargetReader).

`TargetRecords.search` runs the translation searches of many partitions side by side (translation.Steps): at each
step one assignment of every partition a search reads next, at most WAVE at a time, and fetches until each has
what its read asks for. A round's fetch requests then grow with its steps (a few: brackets are short near the head),
not with its partitions; `PartitionReader.chunk` reads one partition at a time.

Every record the stream writes carries a provenance header naming its source cluster, topic, partition and
offset (its last one, for records that crossed several hops); records of other writers, of backfill repairs
written without offset syncs aside, do not name this flow's source partition and are passed over.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from mirrorflow.errors import OperationalError
from mirrorflow.kafka.internal_log import BOUNDED_FETCH, fetched
from mirrorflow.rules import provenance
from mirrorflow.rules.translation import Mirrors, Read, Steps

_IDLE_TIMEOUT_S = 30.0
WAVE = 2_000  # partitions one assignment reads at most (what they prefetch, librdkafka bounds: 64 MiB by default)
Key = TypeVar("Key", bound=Hashable)
Answer = TypeVar("Answer")


@dataclass
class Search(Generic[Answer]):
    """A translation search over one remote partition: `steps` yields the reads it needs (translation.Steps)."""

    remote_topic: str
    source_topic: str
    partition: int
    steps: Steps[Answer]


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
                                   "fetch.queue.backoff.ms": 0, **BOUNDED_FETCH})
        self.reads = 0  # consumer polls made: what a translation cost
        self.assignments = 0  # reads of many partitions at once (`search`'s steps)

    def partition(self, remote_topic: str, source_topic: str, partition: int) -> PartitionReader:
        return PartitionReader(self, remote_topic, source_topic, partition)

    def search(self, searches: Mapping[Key, Search[Answer]]) -> dict[Key, Answer]:
        """Every search's answer, their reads made side by side, one partition's read per assignment."""
        answers: dict[Key, Answer] = {}
        pending: dict[Key, tuple[PartitionReader, Steps[Answer], Read]] = {}

        def advance(key: Key, reader: PartitionReader, steps: Steps[Answer], got: Mirrors | None) -> None:
            try:
                pending[key] = (reader, steps, next(steps) if got is None else steps.send(got))
            except StopIteration as done:
                answers[key] = done.value

        for key, s in searches.items():
            advance(key, self.partition(s.remote_topic, s.source_topic, s.partition), s.steps, None)
        while pending:
            wave: dict[tuple[str, int], Key] = {}
            for key, (reader, _, _) in pending.items():
                tp = (reader.remote_topic, reader.partition)
                if tp not in wave and len(wave) < WAVE:
                    wave[tp] = key
            got = self._read_many({tp: (pending[key][0], pending[key][2]) for tp, key in wave.items()})
            for tp, key in wave.items():
                reader, steps, _ = pending.pop(key)
                advance(key, reader, steps, got[tp])
        return answers

    def _read_many(self, reads: Mapping[tuple[str, int], tuple[PartitionReader, Read]]
                   ) -> dict[tuple[str, int], Mirrors]:
        """What each read asks for (Read), all partitions assigned at once; a partition stops being fetched
        once it has its answer."""
        consumer = self._consumer
        out: dict[tuple[str, int], Mirrors] = {tp: [] for tp in reads}
        past_end: set[tuple[str, int]] = set()
        answered: set[tuple[str, int]] = set()
        self.assignments += 1
        try:
            consumer.assign([TopicPartition(t, p, read.start) for (t, p), (_, read) in reads.items()])
            progress = time.monotonic()
            while len(answered) < len(reads):
                msgs = fetched(consumer, 10_000, 0.5)
                self.reads += 1
                for msg in msgs:
                    tp = (msg.topic() or "", msg.partition() or 0)
                    if tp not in reads or tp in past_end or tp in answered:
                        continue
                    error = msg.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            past_end.add(tp)
                        continue
                    reader, read = reads[tp]
                    offset = msg.offset() or 0
                    if offset >= read.end:
                        past_end.add(tp)
                        continue
                    if offset < read.start:  # reset to the log start: the read's start was past the end
                        continue
                    upstream = reader._source_offset(msg.headers())
                    if upstream is not None:
                        out[tp].append((offset, upstream))
                done = [tp for tp in reads if tp not in answered and (out[tp] or tp in past_end)]
                if done:
                    answered.update(done)
                    consumer.pause([TopicPartition(t, p) for t, p in done])
                if msgs:
                    progress = time.monotonic()
                elif time.monotonic() - progress > self.idle_timeout_s:
                    stuck = sorted(set(reads) - answered)
                    named = ", ".join(f"{t}-{p} at offset {reads[(t, p)][1].start}" for t, p in stuck[:5])
                    raise OperationalError(f"cannot read {len(stuck)} partition(s) on the target ({named}"
                                           f"{', ...' if len(stuck) > 5 else ''}): no record for "
                                           f"{self.idle_timeout_s:.0f} s")
        except KafkaException as exc:
            raise OperationalError(f"cannot read {len(reads)} partition(s) on the target: "
                                   f"{exc.args[0].str()}") from None
        finally:
            if answered:  # a partition stays paused through unassign: the next assignment of it would read nothing
                consumer.resume([TopicPartition(t, p) for t, p in answered])
            consumer.unassign()
        return out

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
        """One read of this partition alone: a step of `TargetRecords.search` over one partition."""
        return self.records._read_many({(self.remote_topic, self.partition): (self, Read(start, end))})[
            (self.remote_topic, self.partition)]
