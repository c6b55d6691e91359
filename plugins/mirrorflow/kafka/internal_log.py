"""A long-lived, incremental reader of one partition of a compacted internal topic (MM2's KafkaBasedLog).

Offset syncs, checkpoints and flow states are read by processes that live for hours: each `catch_up()`
reads only what was appended since the last one, up to the end the topic has when it is called, and the
caller folds it into a bounded state of its own. A read fails only when it makes no progress for
`idle_timeout_s`, however long the topic is.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from mirrorflow.errors import OperationalError


def fetched(consumer: Consumer, limit: int, timeout_s: float) -> list[Message]:
    """What the consumer has now: waits up to `timeout_s` for the first message or event only, then takes what is
    already fetched (a plain `consume(limit, timeout)` waits out its timeout unless `limit` messages arrive)."""
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    return [first, *consumer.consume(limit - 1, 0)]


# What a reader of a whole log may hold in librdkafka, prefetched and in flight; its defaults (a 64 MiB queue, fetches
# of 50 MiB) held hundreds of MiB while a checkpoint task read a large offset-syncs topic.
BOUNDED_FETCH = {"queued.max.messages.kbytes": 16_384, "fetch.max.bytes": 8 << 20}

# _DESTROY_BROKER: the broker dropped out of the cluster's metadata while it restarts (its handle is decommissioned
# with the request in flight); it is back within a metadata refresh or two.
_LEADER_MOVING = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TRANSPORT,
                  KafkaError._DESTROY_BROKER)


def _reader_settings(consumer_settings: Mapping[str, Any]) -> dict[str, Any]:
    # A transactional writer's partition ends in a commit marker, never returned: the read learns it reached the end
    # from the next, empty fetch, which the broker holds for fetch.wait.max.ms (500 ms by default) per partition read.
    # The reader is assigned only while it catches up, so a short wait costs no idle fetching.
    return {**consumer_settings, "group.id": "mirrorflow-internal-reader", "enable.auto.commit": False,
            "isolation.level": "read_committed", "enable.partition.eof": True, "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 20, **BOUNDED_FETCH}


def _watermarks(consumer: Consumer, tp: TopicPartition, idle_timeout_s: float) -> tuple[int, int] | None:
    """The partition's log start and end; None while the topic does not exist. A leader election (a broker
    restarting, a topic just created) is waited out for up to `idle_timeout_s`, as a consumer would."""
    deadline = time.monotonic() + idle_timeout_s
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=idle_timeout_s)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
                return None
            if error.code() not in _LEADER_MOVING or time.monotonic() >= deadline:
                raise
        time.sleep(0.5)


def read_to_ends(consumer_settings: Mapping[str, Any], partitions: Sequence[tuple[str, int]], what: str, *,
                 idle_timeout_s: float = 30.0, spans: Mapping[tuple[str, int], tuple[int, int | None]] | None = None,
                 isolation: str = "read_committed") -> Iterator[Message]:
    """Every committed record of several partitions, each from its start to the end it had when reading began;
    `spans` narrows a partition to [start, end) within that (end None: to its end).

    One consumer for all of them: a cluster's hundreds of heartbeats topics are one read, not a connection (and a
    SASL handshake) each. A partition that does not exist reads as empty; the read fails only when it makes no
    progress for `idle_timeout_s`."""
    consumer = Consumer({**_reader_settings(consumer_settings), "isolation.level": isolation})
    try:
        ends: dict[tuple[str, int], int] = {}
        assignment = []
        for topic, partition in partitions:
            marks = _watermarks(consumer, TopicPartition(topic, partition), idle_timeout_s)
            if marks is not None and spans is not None and (topic, partition) in spans:
                start, end = spans[(topic, partition)]
                marks = (max(marks[0], start), marks[1] if end is None else min(marks[1], end))
            if marks is not None and marks[1] > marks[0]:
                ends[(topic, partition)] = marks[1]
                assignment.append(TopicPartition(topic, partition, marks[0] if marks[0] > 0 else OFFSET_BEGINNING))
        if not assignment:
            return
        consumer.assign(assignment)
        progress = time.monotonic()
        while ends:  # invariant: the partitions still short of the end they had when the read began
            if time.monotonic() - progress > idle_timeout_s:
                raise OperationalError(f"{what}: no progress for {idle_timeout_s:.0f} s on "
                                       f"{', '.join(f'{t}[{p}]' for t, p in sorted(ends)[:5])}"
                                       f"{' …' if len(ends) > 5 else ''}")
            for msg in fetched(consumer, 10_000, 1.0):
                key = (msg.topic() or "", msg.partition() or 0)
                if key not in ends:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() in (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART):
                        _done(consumer, ends, key)  # read to its end, or deleted since its watermarks were read
                    continue
                progress = time.monotonic()  # only a partition still short of its end counts as progress
                offset = msg.offset() or 0
                if offset >= ends[key]:  # past the end's markers or holes: not the read's
                    _done(consumer, ends, key)
                    continue
                if offset + 1 >= ends[key]:
                    _done(consumer, ends, key)
                yield msg
    except KafkaException as exc:
        raise OperationalError(f"{what}: {exc.args[0].str()}") from None
    finally:
        consumer.close()


def _done(consumer: Consumer, ends: dict[tuple[str, int], int], key: tuple[str, int]) -> None:
    del ends[key]
    consumer.pause([TopicPartition(*key)])  # fetches nothing more, so the others' records are all that arrive


class InternalLog:
    def __init__(self, consumer_settings: Mapping[str, Any], topic: str, what: str, *, partition: int = 0,
                 idle_timeout_s: float = 30.0) -> None:
        self.topic, self.what, self.partition, self.idle_timeout_s = topic, what, partition, idle_timeout_s
        self._settings = _reader_settings(consumer_settings)
        self._consumer: Consumer | None = None
        self.next_offset: int | None = None  # the next offset to read; None before the first record
        self.read_records = 0

    def catch_up(self) -> Iterator[Message]:
        """Every committed record appended since the last call, up to the end the partition has now."""
        tp = TopicPartition(self.topic, self.partition)
        try:
            if self._consumer is None:
                self._consumer = Consumer(self._settings)
            consumer = self._consumer
            ends = _watermarks(consumer, tp, self.idle_timeout_s)
            if ends is None:
                return
            low, high = ends
            start = low if self.next_offset is None else max(self.next_offset, low)
            if high <= start:
                return
            consumer.assign([TopicPartition(self.topic, self.partition, start if start > 0 else OFFSET_BEGINNING)])
            try:
                progress = time.monotonic()
                while True:
                    if time.monotonic() - progress > self.idle_timeout_s:
                        raise OperationalError(f"{self.what} {self.topic}: no progress for {self.idle_timeout_s:.0f} s "
                                               f"at offset {self.next_offset} of {high}")
                    done = False
                    for msg in fetched(consumer, 10_000, 1.0):
                        error = msg.error()
                        if error is not None:
                            if error.code() == KafkaError._PARTITION_EOF:
                                done = True
                                # Past a trailing commit marker: the next catch-up has nothing to read until more
                                # is appended, and does not fetch to find that out.
                                self.next_offset = max(self.next_offset or 0, msg.offset() or 0)
                            continue
                        progress = time.monotonic()
                        self.next_offset = (msg.offset() or 0) + 1
                        self.read_records += 1
                        yield msg
                    if done or (self.next_offset or 0) >= high:
                        return
            finally:
                consumer.unassign()  # no fetching between catch-ups
        except KafkaException as exc:
            raise OperationalError(f"{self.what} {self.topic}: {exc.args[0].str()}") from None

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
