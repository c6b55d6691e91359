"""The bounded source ranges the batch jobs (audit, backfill) cover, and where their copies can lie on the target.

A range is the source offsets [start, end) of one partition the flow replicates (its heartbeats topics only when
asked: the audit's).
From a time window [from, to): start is the first offset whose timestamp is at or after `from`, end the first
at or after `to`, or the partition's end (its last stable offset under `read_committed`) when `to` is open or
later than every record. From explicit offsets (`{"topic": {"0": 10}}`, -2 for the earliest): only the
partitions named, each up to its end or `to`.

Beside the range, what the flow's offset syncs say: how far the flow has read the partition (`mirrored`,
None if never) and the lowest target offset a copy of the range can have (`target_floor`): the exact
translation of `start` (no copy of a record at or after `start` lies below it; the remote partition's start for a
flow taken over from another mirror, whose copies its syncs do not bound), lowered to the first target record at or
after `from` when a window is given, which also covers copies the syncs never recorded.

Invariants, each tested:
  A. parse_time accepts epoch milliseconds and ISO 8601 (naive means UTC) and nothing else;
  B. below(r, p) never widens r, and leaves nothing at or above p;
  C. 0 <= start <= end for every planned range.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from confluent_kafka import IsolationLevel
from confluent_kafka.admin import AdminClient, OffsetSpec

from mirrorflow.errors import ConfigError
from mirrorflow.kafka import admin_sync, offset_sync_log
from mirrorflow.kafka.link import FlowLink
from mirrorflow.kafka.target_reader import Search, TargetRecords
from mirrorflow.model import selection
from mirrorflow.model.config import Flow
from mirrorflow.rules import translation
from mirrorflow.rules.filters import java_regex_to_python

EARLIEST = -2


@dataclass(frozen=True)
class Window:
    """A time window [from_ms, to_ms); None is open."""

    from_ms: int | None = None
    to_ms: int | None = None

    def label(self) -> str:
        if self.from_ms is None and self.to_ms is None:
            return "every retained record"
        return f"{clock(self.from_ms) if self.from_ms is not None else 'the start'} to " \
               f"{clock(self.to_ms) if self.to_ms is not None else 'now'}"


EVERYTHING = Window()


@dataclass(frozen=True)
class SourceRange:
    topic: str
    partition: int
    start: int
    end: int  # exclusive
    remote: str
    mirrored: int | None  # the flow has read the partition up to here (exclusive); None: never
    # No copy of a record in the range lies below this offset of the remote partition; None: no such partition.
    target_floor: int | None
    lost: int = 0  # records the source deleted before the flow read them, as the flow recorded them
    lost_ranges: tuple[tuple[int, int], ...] = ()  # the newest of them, [first, end)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def size(self) -> int:
        """Offsets in the range (records, transaction markers and compacted-away offsets alike)."""
        return self.end - self.start


def below(r: SourceRange, position: int) -> SourceRange:
    """The part of `r` below `position`: what a batch job may write while the stream owns the rest."""
    end = max(min(r.end, position), r.start)
    return replace(r, end=end)


def parse_time(text: str, what: str = "time") -> int:
    """Milliseconds since the epoch from `1732190400000` or ISO 8601 (`2026-11-21T10:00:00Z`; naive is UTC)."""
    value = text.strip()
    if re.fullmatch(r"\d{10,16}", value):
        return int(value)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"{what} {text!r} is neither epoch milliseconds nor ISO 8601 "
                          "(e.g. 2026-11-21T10:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def parse_offsets(text: str) -> dict[str, dict[int, int]]:
    """`{"topic": {"0": 10, "1": -2}}` (Spark's startingOffsets form, -2: earliest) as topic -> partition -> offset."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"the start offsets are not JSON: {exc}") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError('the start offsets must be an object like {"orders": {"0": 10, "1": -2}}')
    out: dict[str, dict[int, int]] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict) or not parts:
            raise ConfigError(f'start offsets: topic {topic}: expected {{"partition": offset, ...}}')
        for p, o in parts.items():
            if not str(p).isdigit() or not isinstance(o, int) or isinstance(o, bool) or (o < 0 and o != EARLIEST):
                raise ConfigError(f"start offsets: topic {topic}: partition {p!r} -> {o!r}: expected a "
                                  "partition number and an offset >= 0 (or -2 for the earliest)")
            out.setdefault(topic, {})[int(p)] = o
    return out


def plan(link: FlowLink, *, topics: str | None = None, window: Window = EVERYTHING,
         from_offsets: Mapping[str, Mapping[int, int]] | None = None, allow_empty: bool = False,
         heartbeats: bool = False) -> list[SourceRange]:
    """Every range the request covers, sorted by topic and partition. Reads both clusters' offsets and the syncs.
    No partition at all is a ConfigError unless `allow_empty` (a flow with nothing on its source yet). The flow's
    heartbeats topics are covered only if `heartbeats`."""
    flow, source, target = link.flow, link.source, link.target
    source_admin, target_admin = link.source_admin, link.target_admin
    counts, _ = admin_sync.partition_counts(source_admin, source.alias)
    partitions = link.replicated_partitions(counts, topic_filter(topics), heartbeats)
    if from_offsets is not None:
        partitions = _named(flow, counts, partitions, from_offsets)
    if not partitions and allow_empty:
        return []
    if not partitions:
        raise ConfigError(f"flow {flow.name}: no topic on {source.alias} matches"
                          f"{' topics regex ' + topics if topics else ''} among the topics the flow replicates")
    isolation = IsolationLevel.READ_COMMITTED if link.reads_committed else IsolationLevel.READ_UNCOMMITTED
    earliest = admin_sync.offsets(source_admin, source.alias, partitions, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
    latest = admin_sync.offsets(source_admin, source.alias, partitions, OffsetSpec.latest(),  # type: ignore[no-untyped-call]
                                isolation)
    ends = _at_time(source_admin, source.alias, partitions, window.to_ms, latest)
    if from_offsets is not None:
        starts = {(t, p): earliest[(t, p)] if from_offsets[t][p] == EARLIEST else from_offsets[t][p]
                  for t, p in partitions}
    elif window.from_ms is not None:
        starts = _at_time(source_admin, source.alias, partitions, window.from_ms, ends)
    else:
        starts = earliest
    remote = {t: link.remote_topic(t) for t, _ in partitions}
    floors = _target_floors(target_admin, target.alias, [(remote[t], p) for t, p in partitions], window.from_ms)
    syncs_state = offset_sync_log.read(link.settings("target", "consumer"), link.syncs_topic)
    clipped = {(t, p): min(max(starts[(t, p)], earliest[(t, p)]), ends[(t, p)]) for t, p in partitions}
    syncs = {tp: translation.PartitionSyncs(tuple(syncs_state.anchor_list(tp)), syncs_state.positions.get(tp))
             for tp in partitions}
    records = TargetRecords(link.settings("target", "consumer"), flow.source)
    try:
        translated = records.search({tp: Search(remote[tp[0]], tp[0], tp[1],
                                                translation.target_offsets_steps(syncs[tp], [clipped[tp]]))
                                     for tp in partitions if syncs[tp].anchors})
    finally:
        records.close()
    out = []
    for t, p in partitions:
        position = syncs[(t, p)].position
        floor = floors[(remote[t], p)]
        at = translated[(t, p)][clipped[(t, p)]] if (t, p) in translated else None
        # A mirror taken over from (imported anchors) may have copied a record below the copy its syncs name (it
        # went back after a restart): every record is read there, from the remote partition's start.
        anchors = syncs[(t, p)].anchors
        imported = bool(anchors) and anchors[0].imported and window.from_ms is None
        if floor is not None and at is not None and at.offset is not None and not imported:
            floor = at.offset if window.from_ms is None else min(floor, at.offset)
        loss = syncs_state.losses.get((t, p))
        out.append(SourceRange(t, p, clipped[(t, p)], ends[(t, p)], remote[t],
                               position.upstream_next if position else None, floor, loss.lost if loss else 0,
                               loss.ranges if loss else ()))
    return out


def topic_filter(topics: str | None) -> Callable[[str], bool]:
    """A batch job's topics: one Java regex matching whole names, like every topic filter of the flow's config."""
    if topics is None:
        return lambda topic: True
    try:
        pattern = re.compile(java_regex_to_python(topics))
    except (ConfigError, re.error) as exc:
        raise ConfigError(f"topics regex {topics!r} is not valid: {exc}") from None
    return lambda topic: pattern.fullmatch(topic) is not None


def _named(flow: Flow, counts: Mapping[str, int], partitions: Sequence[tuple[str, int]],
           from_offsets: Mapping[str, Mapping[int, int]]) -> list[tuple[str, int]]:
    covered = set(partitions)
    out = []
    for topic, parts in sorted(from_offsets.items()):
        for p in sorted(parts):
            if (topic, p) not in covered:
                if topic not in counts:
                    why = f"no topic {topic} on {flow.source}"
                elif selection.replicates(flow, topic) and p >= counts[topic]:
                    why = f"{flow.source} topic {topic} has {counts[topic]} partitions"
                else:
                    why = f"{flow.source} topic {topic} is not replicated by the flow (or the topics regex excludes it)"
                raise ConfigError(f"start offsets: {topic} partition {p}: {why}")
            out.append((topic, p))
    return out


def _at_time(admin: AdminClient, alias: str, partitions: Sequence[tuple[str, int]], at_ms: int | None,
             otherwise: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """The first offset at or after `at_ms` per partition, or `otherwise` (none is, or no time)."""
    if at_ms is None:
        return dict(otherwise)
    found = admin_sync.offsets(admin, alias, partitions, OffsetSpec.for_timestamp(at_ms))
    return {tp: min(o, otherwise[tp]) if o >= 0 else otherwise[tp] for tp, o in found.items()}


def _target_floors(admin: AdminClient, alias: str, partitions: Sequence[tuple[str, int]],
                   from_ms: int | None) -> dict[tuple[str, int], int | None]:
    """The target's start of each remote partition, or its first record at or after `from_ms`; None if it is
    missing."""
    counts, _ = admin_sync.partition_counts(admin, alias)
    present = [(t, p) for t, p in partitions if p < counts.get(t, 0)]
    floors: dict[tuple[str, int], int | None] = {tp: None for tp in partitions}
    starts = admin_sync.offsets(admin, alias, present, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
    floors.update(starts)
    if from_ms is not None:
        ends = admin_sync.offsets(admin, alias, present, OffsetSpec.latest())  # type: ignore[no-untyped-call]
        floors.update(_at_time(admin, alias, present, from_ms, ends))
    return floors


def clock(ms: int) -> str:
    """A time for a report line, in UTC."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
