"""Offset syncs: which upstream (source) offsets landed at which downstream (target) offsets.

MM2 samples one (upstream, downstream) pair every `offset.lag.max` records, which is why its translated
group offsets re-read records after a failover. The stream keeps exact translation without keeping every
pair: per source partition it keeps at most `limit` anchors (anchors.py) and resolves any offset between
two anchors from the provenance headers of the mirrored records themselves (translation.py). Beside the
anchors, one position per partition says how far the flow has read the source (`upstream_next`,
exclusive), where its next record will land (`downstream_next`), and where the newest batch's first
record landed (so a reader sees a replay before the driver has recorded its anchor). A partition whose source
deleted records before the flow read them (retention, deleteRecords) has one loss record: how many records were
lost in all and the newest LOSS_RANGES ranges.

Both live in one compacted topic per flow on the target, `mirrorflow-offset-syncs.{source}.internal`.
An anchor is keyed by its slot, so compaction keeps at most `limit` of them per partition; a position
by its partition. Wire format (Kafka protocol types, big-endian; strings are int16 length + UTF-8;
-1 stands for "none" on the wire only):
  anchor key      {kind: int16 = 2, topic: string, partition: int32, slot: int16}
  anchor value    {version: int16 = 1, upstream: int64, downstream: int64, flags: int16 (1 barrier, 2 origin,
                  4 coarse: anchors.py C, 8 imported: anchors.py I), run: int64 (anchors.py D)} (version 0, written
                  when run is 0, ends after flags)
  position key    {kind: int16 = 1, topic: string, partition: int32}
  position value  {version: int16 = 1, upstream_next: int64, downstream_next: int64,
                   batch_upstream: int64, batch_downstream: int64, flags: int16 (1 replay, 2 origin)}
                  (version 0 ends after downstream_next)
  loss key        {kind: int16 = 3, topic: string, partition: int32}
  loss value      {version: int16 = 0, lost: int64, count: int16, count x (first: int64, end: int64)}
  topic key       {kind: int16 = 4, topic: string, partition: int32 = 0}
  topic value     {version: int16 = 0, topic_id: string}: the incarnation (Kafka's topic ID) the topic's
                  positions, anchors and losses are about; a topic re-created under the same name has another.
  reset key       {kind: int16 = 5, topic: string = "", partition: int32 = 0}
  reset value     {version: int16 = 0, at_ms: int64}: `mirrorflow reset` moved positions; a stream whose Spark
                  checkpoint predates it starts a new one at the positions.
  release key     {kind: int16 = 6, topic: string = "", partition: int32 = 0}
  release value   {version: int16 = 0, at_ms: int64}: the last holder of the flow's lease stopped cleanly (every
                  write acknowledged); tombstoned by the next holder when it starts (flow_lease, W3).
  writers key     {kind: int16 = 7, topic: string = "", partition: int32 = 0}
  writers value   {version: int16 = 0, slots: int32}: the stream's writes use the transactional ids of task slots
                  0..slots-1 (kafka/writers.transactional_id); a new holder fences them all. Without this record the
                  flow's writers may be those of versions before slots, one per source partition: fenced once.
  run key/value   {kind: int16 = 0, ...}: written by mirrorflow before anchors (one record per run of
                  consecutive offsets, never bounded); read once, turned into anchors and tombstoned.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from mirrorflow.rules import wire
from mirrorflow.rules.anchors import Anchor

_RUN, _POSITION, _ANCHOR, _LOSS, _INCARNATION, _RESET, _RELEASE, _WRITERS = 0, 1, 2, 3, 4, 5, 6, 7
LOSS_RANGES = 8
_BARRIER, _ORIGIN, _COARSE, _IMPORTED, _REPLAY = 1, 2, 4, 8, 1
TopicPartition = tuple[str, int]


def topic_name(source_alias: str, separator: str = ".") -> str:
    return f"mirrorflow-offset-syncs{separator}{source_alias}{separator}internal"


def is_offset_syncs_topic(topic: str) -> bool:
    return topic.startswith("mirrorflow-offset-syncs")


def _partition_key(kind: int, topic: str, partition: int) -> bytes:
    return struct.pack(">h", kind) + wire.string(topic) + struct.pack(">i", partition)


@dataclass(frozen=True)
class AnchorRecord:
    topic: str
    partition: int
    slot: int
    anchor: Anchor | None  # None: the slot's tombstone

    def key(self) -> bytes:
        return _partition_key(_ANCHOR, self.topic, self.partition) + struct.pack(">h", self.slot)

    def value(self) -> bytes | None:
        a = self.anchor
        if a is None:
            return None
        flags = ((_BARRIER if a.barrier else 0) | (_ORIGIN if a.origin else 0) | (_COARSE if a.coarse else 0)
                 | (_IMPORTED if a.imported else 0))
        if a.run:
            return struct.pack(">hqqhq", 1, a.upstream, a.downstream, flags, a.run)
        return struct.pack(">hqqh", 0, a.upstream, a.downstream, flags)


@dataclass(frozen=True)
class Position:
    """Where the flow stands in a source partition: every record below `upstream_next` is on the target, and the
    next copy lands at `downstream_next` (None: not known, nothing written since the remote partition began; -1 on
    the wire)."""

    topic: str
    partition: int
    upstream_next: int
    downstream_next: int | None
    # The newest batch's first mirrored record: a barrier if the batch may replay, the origin if it is the first.
    batch_first: Anchor | None = None

    def key(self) -> bytes:
        return _partition_key(_POSITION, self.topic, self.partition)

    def value(self) -> bytes:
        first = self.batch_first
        flags = (_REPLAY if first.barrier else 0) | (_ORIGIN if first.origin else 0) if first is not None else 0
        downstream_next = -1 if self.downstream_next is None else self.downstream_next
        return struct.pack(">hqqqqh", 1, self.upstream_next, downstream_next,
                           first.upstream if first else -1, first.downstream if first else -1, flags)


@dataclass(frozen=True)
class Loss:
    """Source records deleted before the flow read them. Invariants: `lost` is the size of the union of every
    range ever added (adding a range already covered by the newest ones changes nothing: a replayed batch finds
    the same gap); `ranges` holds the newest LOSS_RANGES of them, [first, end), oldest first, adjacent ones
    merged."""

    topic: str
    partition: int
    lost: int = 0
    ranges: tuple[tuple[int, int], ...] = ()

    def add(self, first: int, end: int) -> Loss:
        if any(a <= first and end <= b for a, b in self.ranges):
            return self
        ranges = list(self.ranges)
        if ranges and ranges[-1][1] == first:
            first = ranges.pop()[0]
            return Loss(self.topic, self.partition, self.lost + end - self.ranges[-1][1],
                        (*ranges, (first, end))[-LOSS_RANGES:])
        return Loss(self.topic, self.partition, self.lost + end - first, (*ranges, (first, end))[-LOSS_RANGES:])

    def key(self) -> bytes:
        return _partition_key(_LOSS, self.topic, self.partition)

    def value(self) -> bytes:
        return struct.pack(f">hqh{2 * len(self.ranges)}q", 0, self.lost, len(self.ranges),
                           *(o for r in self.ranges for o in r))


@dataclass(frozen=True)
class Incarnation:
    """Which incarnation of a source topic (Kafka's topic ID) the flow's state for that topic is about."""

    topic: str
    topic_id: str | None  # None: the tombstone

    def key(self) -> bytes:
        return _partition_key(_INCARNATION, self.topic, 0)

    def value(self) -> bytes | None:
        return None if self.topic_id is None else struct.pack(">h", 0) + wire.string(self.topic_id)


@dataclass(frozen=True)
class Reset:
    """The newest `mirrorflow reset` of the flow (one record per flow)."""

    at_ms: int

    def key(self) -> bytes:
        return _partition_key(_RESET, "", 0)

    def value(self) -> bytes:
        return struct.pack(">hq", 0, self.at_ms)


@dataclass(frozen=True)
class Release:
    """The flow's lease was given up cleanly at `at_ms` (None: the tombstone its next holder writes)."""

    at_ms: int | None

    def key(self) -> bytes:
        return _partition_key(_RELEASE, "", 0)

    def value(self) -> bytes | None:
        return None if self.at_ms is None else struct.pack(">hq", 0, self.at_ms)


@dataclass(frozen=True)
class Writers:
    """How many task slots' transactional ids the flow's stream has used (the most ever)."""

    slots: int

    def key(self) -> bytes:
        return _partition_key(_WRITERS, "", 0)

    def value(self) -> bytes:
        return struct.pack(">hi", 0, self.slots)


@dataclass(frozen=True)
class OffsetRun:
    """The record of mirrorflow versions before anchors: upstream u..u+n-1 landed at d..d+n-1."""

    topic: str
    partition: int
    upstream: int
    downstream: int
    length: int

    def key(self) -> bytes:
        return _partition_key(_RUN, self.topic, self.partition) + struct.pack(">q", self.upstream)

    def value(self) -> bytes:
        return struct.pack(">hqq", 0, self.downstream, self.length)


def tombstoned(key: bytes) -> tuple[type | None, int | None]:
    """What a tombstone with this key deletes: the record type it keyed (None: one a reader keeps no state of),
    and for an offset run its upstream offset."""
    (kind,) = struct.unpack_from(">h", key, 0)
    if kind == _RUN:
        return OffsetRun, struct.unpack_from(">q", key, len(key) - 8)[0]
    return {_POSITION: Position, _LOSS: Loss, _INCARNATION: Incarnation}.get(kind), None


def decode(key: bytes, value: bytes | None) -> tuple[TopicPartition,
                                                     AnchorRecord | Position | OffsetRun | Loss | Incarnation
                                                     | Reset | Release | Writers | None]:
    """The partition an offset-syncs entry is about, and what it holds (None: a tombstone of a position or run)."""
    (kind,) = struct.unpack_from(">h", key, 0)
    topic, at = wire.read_string(key, 2)
    (partition,) = struct.unpack_from(">i", key, at)
    at += 4
    if kind == _ANCHOR:
        (slot,) = struct.unpack_from(">h", key, at)
        if value is None:
            return (topic, partition), AnchorRecord(topic, partition, slot, None)
        version, upstream, downstream, flags = struct.unpack_from(">hqqh", value)
        anchor = Anchor(upstream, downstream, barrier=bool(flags & _BARRIER), origin=bool(flags & _ORIGIN),
                        coarse=bool(flags & _COARSE), imported=bool(flags & _IMPORTED),
                        run=struct.unpack_from(">q", value, 20)[0] if version >= 1 else 0)
        return (topic, partition), AnchorRecord(topic, partition, slot, anchor)
    if kind == _RELEASE:
        return (topic, partition), Release(None if value is None else struct.unpack_from(">q", value, 2)[0])
    if value is None:
        return (topic, partition), None
    if kind == _POSITION:
        (version,) = struct.unpack_from(">h", value, 0)
        _, upstream_next, downstream_next = struct.unpack_from(">hqq", value, 0)
        first = None
        if version >= 1:
            fu, fd, flags = struct.unpack_from(">qqh", value, 18)
            first = Anchor(fu, fd, barrier=bool(flags & _REPLAY), origin=bool(flags & _ORIGIN)) if fd >= 0 else None
        return (topic, partition), Position(topic, partition, upstream_next,
                                           downstream_next if downstream_next >= 0 else None, first)
    if kind == _WRITERS:
        return (topic, partition), Writers(struct.unpack_from(">i", value, 2)[0])
    if kind == _RESET:
        return (topic, partition), Reset(struct.unpack_from(">q", value, 2)[0])
    if kind == _INCARNATION:
        topic_id, _ = wire.read_string(value, 2)
        return (topic, partition), Incarnation(topic, topic_id)
    if kind == _LOSS:
        _, lost, count = struct.unpack_from(">hqh", value, 0)
        bounds = struct.unpack_from(f">{2 * count}q", value, 12)
        return (topic, partition), Loss(topic, partition, lost, tuple(zip(bounds[::2], bounds[1::2], strict=True)))
    if kind == _RUN:
        (upstream,) = struct.unpack_from(">q", key, at)
        _, downstream, length = struct.unpack(">hqq", value)
        return (topic, partition), OffsetRun(topic, partition, upstream, downstream, length)
    raise ValueError(f"unknown offset-sync record kind {kind}")


def anchors_of_runs(runs: Iterable[OffsetRun]) -> list[Anchor]:
    """Anchors equivalent to the old dense runs: each run's first and last record. A run that does not continue
    its predecessor on both sides may follow records the runs never named (a failed attempt): a barrier."""
    out: list[Anchor] = []
    previous: OffsetRun | None = None
    for run in sorted(runs, key=lambda r: r.downstream):
        continues = (previous is not None and run.upstream > previous.upstream + previous.length - 1
                     and run.downstream == previous.downstream + previous.length)
        out.append(Anchor(run.upstream, run.downstream, barrier=not continues, origin=previous is None))
        if run.length > 1:
            out.append(Anchor(run.upstream + run.length - 1, run.downstream + run.length - 1))
        previous = run
    return out
