"""The audit's reads, in Spark's executors: each task reads its source ranges and their remote partitions with
librdkafka (as the stream's copier reads, but with consumers of its own), hashes every record's fields on both sides
and compares them there (jobs/audit_tally). Only one PartitionAudit per range reaches the driver.

  R1  A source range [start, end) is read until a record at or past `end`, or an end-of-partition event at or past
      it (a range ending in transaction markers has no record to wait for), with the flow's isolation level.
  R2  A remote partition is read read_committed from the range's target floor to its end when the read begins
      (its high watermark then, or an end-of-partition event where the last stable offset is below it): the copy
      of every record the flow's offset syncs say it has read was committed before the audit planned the range,
      so none of them can come later.
  R3  A copy is attributed by its last provenance header from the flow's source; that header is this hop's only when
      it is the last one, and then it is left out of the copy's headers (a copy with anything after it differs).
      Copies of other topics are not the range's; copies of another partition of the topic are counted unexpected.
      A record with no provenance header of the flow's source (a copy by the mirror the flow took over from, or
      that takes over from it) is attributed by content (rules/takeover K7); one equal to no source record of the
      span is not the range's (so a copy the old mirror changed leaves its source record missing, not differing).
  R4  Records deleted on either side while they are read are not there: a read resumes at the log start (a log
      that now ends before the read's next offset fails the task: truncated or re-created since the plan).
  R5  A read that brings nothing for STALL_S fails the task (Spark tries it again), naming the partition.
Bound: a task holds the arrays of at most SPAN_MAX source offsets of one range at a time (48 bytes a record on each
side); a longer range is compared a span at a time, its remote partition read once a span.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import xxhash
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from mirrorflow.errors import RetryableError
from mirrorflow.jobs.audit_report import PartitionAudit
from mirrorflow.jobs.audit_tally import NULL_FIELD, Side, Tally, compare
from mirrorflow.jobs.ranges import SourceRange
from mirrorflow.kafka import readers
from mirrorflow.kafka.internal_log import fetched
from mirrorflow.rules import provenance, record_digest, takeover
from mirrorflow.rules.takeover import Content

STALL_S = 120.0
SPAN_MAX = 4_000_000
_CONSUME_MAX = 10_000
_UNREADABLE_HEADERS = 0x2545F4914F6CDD1D  # headers whose keys are not UTF-8 (the client cannot give them)
_xxh64 = xxhash.xxh64_intdigest


@dataclass(frozen=True)
class AuditSpec:
    """What every task needs: the flow's clusters' consumer settings and how it reads."""

    flow: str
    source: str
    target: str
    source_settings: Mapping[str, Any]
    target_settings: Mapping[str, Any]
    reads_committed: bool


def slots(ranges: Sequence[SourceRange], tasks: int) -> list[list[SourceRange]]:
    """The ranges dealt to `tasks` slots, largest first, each to the slot with the fewest offsets so far."""
    out: list[list[SourceRange]] = [[] for _ in range(max(1, min(tasks, len(ranges))))]
    load = [0] * len(out)
    for r in sorted(ranges, key=lambda r: (-r.size, r.topic, r.partition, r.start)):
        i = load.index(min(load))
        out[i].append(r)
        load[i] += r.size
    return [s for s in out if s]


def audit_slots(spec: AuditSpec, slots_: Sequence[Sequence[SourceRange]], own: Iterator[int]
                ) -> Iterator[PartitionAudit]:
    """mapPartitions body over `sparkContext.range(len(slots))`: audit the ranges of this task's slot."""
    source = Consumer(_config(spec.source_settings, spec.flow, spec.reads_committed))
    target = Consumer(_config(spec.target_settings, spec.flow, True))
    try:
        for index in own:
            for r in slots_[index]:
                yield audit_range(spec, source, target, r)
    finally:
        source.close()
        target.close()


def audit_range(spec: AuditSpec, source: Consumer, target: Consumer, r: SourceRange) -> PartitionAudit:
    """The range's audit, SPAN_MAX source offsets at a time (the remote partition read again for each)."""
    tally = Tally(r.remote, r.mirrored)
    for start in range(r.start, r.end, SPAN_MAX):
        end = min(r.end, start + SPAN_MAX)
        records, refused = _source_side(spec, source, replace(r, start=start, end=end))
        copies, misplaced = (_copies(spec, target, r, start, end, records) if r.target_floor is not None
                             else (Side.empty(), 0))
        tally.unexpected += misplaced if start == r.start else 0
        compare(tally, records, refused, copies, start, end)
    return replace(tally.audit(r.topic, r.partition, r.start, r.end), lost=r.lost, lost_ranges=r.lost_ranges)


def _config(settings: Mapping[str, Any], flow: str, read_committed: bool) -> dict[str, Any]:
    return {**readers.reader_config(settings, flow, read_committed), "group.id": f"mirrorflow-audit-{flow}"}


def _source_side(spec: AuditSpec, consumer: Consumer, r: SourceRange) -> tuple[Side, np.ndarray]:
    parts: list[Side] = []
    refused: list[np.ndarray] = []
    for ms, at in _read(consumer, r.topic, r.partition, r.start, r.end, spec.source):
        headers = [_headers(m) for m in ms]
        parts.append(_side(ms, at, at, r.partition, headers))
        refused.append(np.fromiter((bool(h) and h is not _UNREADABLE and provenance.returns_to(h, spec.target, r.remote)
                                    for h in headers), bool, len(ms)) if any(headers) else np.zeros(len(ms), bool))
    return Side.join(parts), (np.concatenate(refused) if refused else np.zeros(0, bool))


def _copies(spec: AuditSpec, consumer: Consumer, r: SourceRange, start: int, end: int, source: Side
            ) -> tuple[Side, int]:
    """R3: the remote partition's records from the floor on that this flow's provenance attributes to offsets
    [start, end) of `r` (those without one by content, against `source`: the span's records), and how many name
    another partition of its topic."""
    assert r.target_floor is not None
    hop_start = provenance.prefix(spec.source)
    topic_start = provenance.prefix(spec.source, r.topic)
    skip = len(topic_start)
    parts: list[Side] = []
    unlabelled: list[Side] = []  # in target order
    misplaced = 0
    for ms, at in _read(consumer, r.remote, r.partition, r.target_floor, None, spec.target):
        kept: list[Message] = []
        kept_at: list[int] = []
        offsets: list[int] = []
        own: list[list[tuple[str, bytes | None]] | None] = []
        other: list[Message] = []
        other_at: list[int] = []
        other_headers: list[list[tuple[str, bytes | None]] | None] = []
        for m, m_at in zip(ms, at, strict=True):
            headers = _headers(m)
            if not headers or headers is _UNREADABLE:
                other.append(m)
                other_at.append(m_at)
                other_headers.append(headers)
                continue
            last = len(headers) - 1
            key, value = headers[last]
            if key == provenance.HEADER and value is not None and value.startswith(topic_start):
                hop = last  # the common case: this hop's header is the last one
            else:
                found = next((i for i in range(last, -1, -1) if headers[i][0] == provenance.HEADER
                              and (v := headers[i][1]) is not None and v.startswith(hop_start)), None)
                if found is None:
                    other.append(m)
                    other_at.append(m_at)
                    other_headers.append(headers)
                    continue
                hop, value = found, headers[found][1]
                assert value is not None
                if not value.startswith(topic_start):
                    continue
            named, _, offset_text = value[skip:].partition(b"/")
            try:
                partition, offset = int(named), int(offset_text)
            except ValueError:
                continue
            if partition != r.partition:
                misplaced += 1
                continue
            if not start <= offset < end:
                continue
            kept.append(m)
            kept_at.append(m_at)
            offsets.append(offset)
            own.append(headers[:hop] if hop == last else headers)
        if kept:
            parts.append(_side(kept, offsets, kept_at, r.partition, own))
        if other:
            unlabelled.append(_side(other, [-1] * len(other), other_at, r.partition, other_headers))
    if unlabelled:
        parts.append(_by_content(Side.join(unlabelled), source))
    return Side.join(parts), misplaced


def _by_content(copies: Side, source: Side) -> Side:
    """R3: the copies equal to a record of `source`, as copies of it (rules/takeover K7). Only the source records
    some copy equals are looked at one by one."""
    copy_prints, source_prints = _fingerprints(copies.fields), _fingerprints(source.fields)
    equal = np.isin(copy_prints, source_prints)
    wanted = np.flatnonzero(np.isin(source_prints, copy_prints[equal]))
    found = takeover.attribute(copy_prints[equal].tolist(),
                               [Content(int(source.offsets[i]), int(source_prints[i])) for i in wanted])
    at = np.flatnonzero(equal)[[i for i, o in enumerate(found) if o is not None]]
    offsets = np.array([o for o in found if o is not None], np.int64)
    return Side(offsets, copies.fields[at], copies.partitions[at], copies.at[at])


def _fingerprints(fields: np.ndarray) -> np.ndarray:
    """One number a row of field hashes (what a copy keeps: key, value, headers, timestamp)."""
    mixed = np.zeros(len(fields), np.uint64)
    with np.errstate(over="ignore"):  # multiplication modulo 2^64 is the point
        for column, odd in zip(fields.T, _MIXERS, strict=True):
            mixed = (mixed ^ column.view(np.uint64)) * np.uint64(odd)
    return mixed.view(np.int64)


_MIXERS = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93)  # odd 64-bit constants


_UNREADABLE: list[tuple[str, bytes | None]] = []


def _headers(m: Message) -> list[tuple[str, bytes | None]] | None:
    try:
        return m.headers()  # type: ignore[return-value]
    except UnicodeDecodeError:
        return _UNREADABLE


def _side(ms: Sequence[Message], offsets: Sequence[int], at: Sequence[int], partition: int,
          headers: Sequence[list[tuple[str, bytes | None]] | None]) -> Side:
    """The records `ms` of one partition, at offsets `at` there, as the source offsets `offsets` (see Side)."""
    n = len(ms)
    fields = np.empty((n, 4), np.int64)
    fields[:, 0] = _hashes([m.key() for m in ms])
    fields[:, 1] = _hashes([m.value() for m in ms])
    any_headers = any(h or h is _UNREADABLE for h in headers)  # _UNREADABLE is an empty list
    fields[:, 2] = (np.array([_UNREADABLE_HEADERS if h is _UNREADABLE else record_digest.headers_hash(h) if h else 0
                              for h in headers], np.uint64).view(np.int64) if any_headers else 0)
    fields[:, 3] = [m.timestamp()[1] for m in ms]
    return Side(np.array(offsets, np.int64), fields, np.full(n, partition, np.int32), np.array(at, np.int64))


def _hashes(blobs: list[bytes | None]) -> np.ndarray:
    if None not in blobs:
        return np.fromiter(map(_xxh64, blobs), np.uint64, len(blobs)).view(np.int64)  # type: ignore[arg-type]
    return np.fromiter((NULL_FIELD if b is None else _xxh64(b) for b in blobs), np.uint64, len(blobs)).view(np.int64)


def _read(consumer: Consumer, topic: str, partition: int, start: int, end: int | None, cluster: str
          ) -> Iterator[tuple[list[Message], list[int]]]:
    """The records of [start, end) (R1), or from `start` to the partition's end when the read begins (R2), in runs
    of at most _CONSUME_MAX, with their offsets."""
    tp = TopicPartition(topic, partition, start)
    consumer.assign([tp])
    try:
        if end is None:
            end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)[1]
        if start >= end:
            return
        at = start  # the next offset to come
        last = time.monotonic()
        while True:
            ms = fetched(consumer, _CONSUME_MAX, 1.0)  # what is there: consume(n) waits for n or its timeout
            if time.monotonic() - last > STALL_S:
                raise RetryableError(f"{cluster} {topic}-{partition}: nothing read for {STALL_S:.0f} s from offset "
                                     f"{at} on (the audit task is tried again)")
            records: list[Message] = []
            offsets: list[int] = []
            done = False
            for m in ms:
                if m.partition() != partition or m.topic() != topic:
                    continue  # a client's event, or one of a partition read before
                err = m.error()
                if err is None:
                    offset = m.offset() or 0
                    at = offset + 1
                    if at > end:
                        done = True
                        break
                    records.append(m)
                    offsets.append(offset)
                elif err.code() == KafkaError._PARTITION_EOF:
                    last = time.monotonic()
                    done = (m.offset() or 0) >= end or m.offset() == at  # at the end, or as far as the log goes
                    if done:
                        break
                elif err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                    low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                    if low <= at:  # not deleted below it: the log ends before it (truncated, re-created)
                        raise RetryableError(f"{cluster} {topic}-{partition}: offset {at} is past the log's end "
                                             "(truncated or re-created since the audit was planned)")
                    at = low
                    consumer.seek(TopicPartition(topic, partition, low))  # R4
                else:
                    raise KafkaException(err)
            if records:
                last = time.monotonic()
                yield records, offsets
            if done:
                return
    finally:
        consumer.unassign()
