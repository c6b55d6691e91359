"""The offset-syncs topic of a flow as its state now: an incremental reader of the records `offset_syncs` defines.

Bounded by the topic's live content (see SyncsState). One long-lived reader per user; `read` reads it once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mirrorflow.kafka.internal_log import InternalLog
from mirrorflow.rules.anchors import Anchor
from mirrorflow.rules.offset_syncs import (
    AnchorRecord,
    Incarnation,
    Loss,
    OffsetRun,
    Position,
    Release,
    Reset,
    TopicPartition,
    Writers,
    anchors_of_runs,
    decode,
    tombstoned,
)


class SyncsState:
    """A flow's offset syncs as the topic says now: positions, anchors by slot, losses, and not yet migrated runs.

    Bounded by the topic's live content: one reset, one release and one writers record, one incarnation per topic,
    at most one position, one loss and `limit` anchors per partition (runs only until the stream migrates them). Kept
    up to date incrementally by `refresh()` (one long-lived reader).
    """

    def __init__(self, consumer_settings: Mapping[str, Any], topic: str, idle_timeout_s: float = 30.0) -> None:
        self.positions: dict[TopicPartition, Position] = {}
        self.anchors: dict[TopicPartition, dict[int, Anchor]] = {}
        self.runs: dict[TopicPartition, dict[int, OffsetRun]] = {}
        self.losses: dict[TopicPartition, Loss] = {}
        self.incarnations: dict[str, str] = {}  # source topic -> its topic ID, as the flow's state knows it
        self.reset: Reset | None = None
        self.release: Release | None = None  # the last holder of the lease stopped cleanly
        self.writers: Writers | None = None  # the task slots the stream's writes have used
        self._log = InternalLog(consumer_settings, topic, "offset syncs", idle_timeout_s=idle_timeout_s)

    def refresh(self) -> SyncsState:
        for msg in self._log.catch_up():
            tp, record = decode(msg.key() or b"", msg.value())
            if isinstance(record, AnchorRecord):
                slots = self.anchors.setdefault(tp, {})
                if record.anchor is None:
                    slots.pop(record.slot, None)
                else:
                    slots[record.slot] = record.anchor
            elif isinstance(record, Position):
                self.positions[tp] = record
            elif isinstance(record, OffsetRun):
                self.runs.setdefault(tp, {})[record.upstream] = record
            elif isinstance(record, Loss):
                self.losses[tp] = record
            elif isinstance(record, Reset):
                self.reset = record
            elif isinstance(record, Release):
                self.release = record if record.at_ms is not None else None
            elif isinstance(record, Writers):
                self.writers = record
            elif isinstance(record, Incarnation) and record.topic_id is not None:
                self.incarnations[record.topic] = record.topic_id
            elif msg.value() is None:
                self._forget_key(tp, msg.key() or b"")
        return self

    def _forget_key(self, tp: TopicPartition, key: bytes) -> None:
        kind, upstream = tombstoned(key)
        if kind is Position:
            self.positions.pop(tp, None)
        elif kind is Loss:
            self.losses.pop(tp, None)
        elif kind is Incarnation:
            self.incarnations.pop(tp[0], None)
        elif kind is OffsetRun and upstream is not None:
            self.runs.get(tp, {}).pop(upstream, None)

    def partitions(self) -> set[TopicPartition]:
        return (set(self.positions) | {tp for tp, a in self.anchors.items() if a}
                | {tp for tp, r in self.runs.items() if r})

    def mirrored_topics(self) -> set[str]:
        """Topics with at least one mirrored record."""
        return ({t for (t, _), a in self.anchors.items() if a} | {t for (t, _), r in self.runs.items() if r}
                | {t for (t, _), p in self.positions.items() if p.batch_first is not None})

    def anchor_list(self, tp: TopicPartition) -> list[Anchor]:
        """The partition's anchors in write order (old runs turned into anchors when not yet migrated)."""
        stored = sorted(self.anchors.get(tp, {}).values(), key=lambda a: a.downstream)
        if not stored and self.runs.get(tp):
            stored = anchors_of_runs(self.runs[tp].values())
        return stored

    def live_records(self) -> int:
        return (len(self.positions) + len(self.losses) + len(self.incarnations)
                + sum(len(a) for a in self.anchors.values()) + sum(len(r) for r in self.runs.values()))

    def close(self) -> None:
        self._log.close()


def read(consumer_settings: Mapping[str, Any], topic: str, timeout_s: float = 30.0) -> SyncsState:
    """The offset syncs once (for commands); a long-lived user keeps a SyncsState and refreshes it."""
    state = SyncsState(consumer_settings, topic, timeout_s)
    try:
        return state.refresh()
    finally:
        state.close()
