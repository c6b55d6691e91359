"""Heartbeats: MM2's `heartbeats` records, emitted on a flow's target while its stream runs.

A heartbeat for flow A->B says "A reaches B" at a time. The stream writes one to B's `heartbeats` topic
every `emit.heartbeats.interval.seconds`. Heartbeats topics are replicated like any other topic (as
`B.heartbeats`, `C.B.heartbeats`, ...), so every cluster holds evidence of the paths that reach it
(see topology.py).

Wire format (checked against MM2's Heartbeat class; Kafka protocol types, strings are int16 length + UTF-8):
  key    {source cluster alias: string, target cluster alias: string}
  value  {version: int16 = 0, timestamp: int64 (ms)}
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mirrorflow.errors import OperationalError
from mirrorflow.kafka import admin_sync, clients
from mirrorflow.kafka.internal_log import read_to_ends
from mirrorflow.model.config import Cluster, Flow
from mirrorflow.rules import wire
from mirrorflow.rules.policy import HEARTBEATS_TOPIC

log = logging.getLogger(__name__)
_VERSION = 0



def age_s(timestamp_ms: int, now_s: float) -> float:
    """Seconds since a record's timestamp, never negative: the timestamp is another host's clock (the producer's),
    which may run ahead of this one's."""
    return max(now_s - timestamp_ms / 1000, 0.0)

@dataclass(frozen=True)
class Heartbeat:
    source: str
    target: str
    timestamp_ms: int

    def key(self) -> bytes:
        return wire.string(self.source) + wire.string(self.target)

    def value(self) -> bytes:
        return struct.pack(">hq", _VERSION, self.timestamp_ms)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Heartbeat:
        source, at = wire.read_string(key, 0)
        target, _ = wire.read_string(key, at)
        _, timestamp = struct.unpack_from(">hq", value, 0)
        return cls(source, target, timestamp)


def newest(consumer_settings: Mapping[str, Any], topic: str) -> dict[tuple[str, str], Heartbeat]:
    """The newest heartbeat per (source, target) in one heartbeats topic."""
    return newest_in(consumer_settings, {topic: 1}).get(topic, {})


def newest_in(consumer_settings: Mapping[str, Any], topics: Mapping[str, int]
              ) -> dict[str, dict[tuple[str, str], Heartbeat]]:
    """The newest heartbeat per (source, target) in each of a cluster's heartbeats topics (topic -> partition
    count), read with one consumer. Compaction bounds each topic (see admin_sync.COMPACTED)."""
    out: dict[str, dict[tuple[str, str], Heartbeat]] = {}
    partitions = [(t, p) for t, n in topics.items() for p in range(n)]
    for msg in read_to_ends(consumer_settings, partitions, "heartbeats"):
        topic, value = msg.topic() or "", msg.value()
        if value is None:
            continue
        try:
            beat = Heartbeat.decode(msg.key() or b"", value)
        except (ValueError, struct.error):
            log.warning("%s: offset %d is not a heartbeat; ignored", topic, msg.offset())
            continue
        newest = out.setdefault(topic, {})
        seen = newest.get((beat.source, beat.target))
        if seen is None or beat.timestamp_ms >= seen.timestamp_ms:
            newest[(beat.source, beat.target)] = beat
    return out


class HeartbeatEmitter:
    """A background thread writing the flow's heartbeat to its target; an outage is logged, never fatal."""

    def __init__(self, flow: Flow, target: Cluster) -> None:
        self.flow, self.target = flow, target
        self.interval = max(0.1, float(flow.number("emit.heartbeats.interval.seconds")))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeats {flow.name}", daemon=True)
        self._failing = False

    def start(self) -> None:
        admin_sync.ensure_internal_topic(clients.admin(self.target), self.target.alias, HEARTBEATS_TOPIC,
                                         self.flow.number("heartbeats.topic.replication.factor"),
                                         admin_sync.COMPACTED)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        producer = clients.producer(self.target, **{"acks": "all", "linger.ms": 0})
        while not self._stop.is_set():
            beat = Heartbeat(self.flow.source, self.flow.target, int(time.time() * 1000))
            try:
                producer.produce(HEARTBEATS_TOPIC, beat.value(), beat.key(), partition=0)
                if producer.flush(max(self.interval, 5.0)) > 0:
                    raise OperationalError("not acknowledged")
                if self._failing:
                    log.info("flow %s: heartbeats to %s resumed", self.flow.name, self.target.alias)
                self._failing = False
            except (OperationalError, BufferError) as exc:
                if not self._failing:
                    log.warning("flow %s: heartbeat to %s failed (%s); retrying", self.flow.name,
                                self.target.alias, exc)
                self._failing = True
            self._stop.wait(self.interval)
        producer.flush(5)
