"""The stream's last view of its source, kept on the target: what a runbook has when the source is gone.

Topic `mirrorflow-source-view.{source}.internal` on the flow's target (one flow per source alias and target, as the
offset syncs), one partition, compacted, one key. Every status period the stream's driver writes the planner's
newest read of the source's ends (rules/source_reads) and its `mirrored-through` time (status.metrics, invariant
C). What the flow mirrored is never taken from here: the offset syncs say it.

  V1  `as_of` is the read's (source_reads R1): no later than the moment its ends were asked for, so every record
      above a partition's end here was appended after `as_of`, and, when the view is `complete`, every record the
      source acknowledged before `as_of` is below an end here.
  V2  Every record between a position the offset syncs hold now and the view's end of that partition is on the
      source and not on the target, so `not_mirrored(positions)` is a lower bound of what the target lacks, where
      a position commits with its records (records fenced, the default, and exactly-once; with
      `mirrorflow.records.fenced = false` the target may hold up to one batch above its positions). What the
      source took after the view is unknown until it answers.
  V3  `mirrored_through` is at or before `as_of`; `acknowledged_through(positions)` is the latest time before
      which every record the source acknowledged is on the target by these facts: `as_of` when the view is
      complete and the positions reach every end of it (V1, V2), else `mirrored_through`.
Bound: one live record per flow; a reader reads only the partition's newest record.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from mirrorflow.errors import OperationalError
from mirrorflow.kafka import admin_sync
from mirrorflow.kafka.link import FlowLink

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.ms": "600000", "min.cleanable.dirty.ratio": "0.1",
                  "max.message.bytes": "16777216"}


def topic(source: str) -> str:
    return f"mirrorflow-source-view.{source}.internal"


@dataclass(frozen=True)
class SourceView:
    as_of: float  # V1: wall-clock seconds
    ends: Mapping[TopicPartitionKey, int]
    mirrored_through: float | None = None  # metrics invariant C, as the driver last computed it (V3)
    complete: bool = False  # an end for every partition the flow replicated when the ends were read (V1)

    def not_mirrored(self, positions: Mapping[TopicPartitionKey, int]) -> int:
        """V2: records below the ends of this view that are above the flow's positions now."""
        return sum(max(end - positions.get(tp, 0), 0) for tp, end in self.ends.items())

    def acknowledged_through(self, positions: Mapping[TopicPartitionKey, int]) -> float | None:
        """V3."""
        if self.complete and self.not_mirrored(positions) == 0:
            return self.as_of
        if self.mirrored_through is None:
            return None
        return min(self.mirrored_through, self.as_of)

    def value(self) -> bytes:
        ends: dict[str, dict[str, int]] = {}
        for (t, p), end in sorted(self.ends.items()):
            ends.setdefault(t, {})[str(p)] = end
        return json.dumps({"as_of": self.as_of, "mirrored_through": self.mirrored_through,
                           "complete": self.complete, "ends": ends}, separators=(",", ":")).encode()

    @classmethod
    def parse(cls, value: bytes) -> SourceView:
        doc = json.loads(value)
        return cls(float(doc["as_of"]), {(t, int(p)): int(e) for t, ps in doc["ends"].items() for p, e in ps.items()},
                   doc.get("mirrored_through"), bool(doc.get("complete", False)))


class ViewWriter:
    """The driver's writer of its view (idempotent, compressed: one record holds every partition's end)."""

    def __init__(self, link: FlowLink) -> None:
        self.link = link
        self._producer: Producer | None = None
        self._writing: threading.Thread | None = None  # at most one write in flight

    def offer(self, view: SourceView) -> bool:
        """Write the view on a thread of its own, so the driver's loop never waits on the target (the first write
        creates the topic: up to the admin timeout while a target broker is down). A view offered while the last
        one is still being written is dropped, False: the next is newer."""
        if self._writing is not None and self._writing.is_alive():
            return False
        self._writing = threading.Thread(target=self._write_or_warn, args=(view,), name="source-view", daemon=True)
        self._writing.start()
        return True

    def _write_or_warn(self, view: SourceView) -> None:
        try:
            self.write(view)
        except (KafkaException, OperationalError, BufferError) as exc:
            log.warning("flow %s: the source view cannot be written to %s: %s", self.link.name,
                        self.link.flow.target, exc)

    def write(self, view: SourceView) -> None:
        """Queue the view; delivery is checked at the next write or `close` (a lost view only makes it older)."""
        if self._producer is None:
            link = self.link
            admin_sync.ensure_internal_topic(link.target_admin, link.target.alias, topic(link.source.alias),
                                             link.flow.number("offset-syncs.topic.replication.factor"), _TOPIC_CONFIGS)
            self._producer = link.durable_producer(**{"compression.type": "zstd", "linger.ms": 0,
                                                      "message.max.bytes": int(_TOPIC_CONFIGS["max.message.bytes"])})
        self._producer.poll(0)
        self._producer.produce(topic(self.link.source.alias), view.value(), self.link.name.encode(), partition=0)

    def close(self, timeout_s: float = 10.0) -> None:
        if self._writing is not None:
            self._writing.join(timeout_s)
        if self._producer is not None:
            self._producer.flush(timeout_s)
            self._producer = None


def newest(link: FlowLink, timeout_s: float = 15.0) -> SourceView | None:
    """The flow's newest view on its target, None if it has none (a stream that never ran since this was added)."""
    settings: dict[str, Any] = {**link.settings("target", "consumer"), "group.id": "mirrorflow-view-reader",
                                "enable.auto.commit": False, "enable.partition.eof": True}
    consumer = Consumer(settings)
    tp = TopicPartition(topic(link.source.alias), 0)
    try:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
        except KafkaException:
            return None  # no such topic yet
        if high <= low:
            return None
        consumer.assign([TopicPartition(tp.topic, 0, high - 1)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is None and msg.key() == link.name.encode() and msg.value():
                return SourceView.parse(msg.value())  # type: ignore[arg-type]
            if msg.error() is not None:
                return None  # end of the partition without a view of this flow
        return None
    finally:
        consumer.close()
