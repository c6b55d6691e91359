"""What one micro-batch of a stream copies: its end offsets per source partition, and its ranges per task slot.

Policy only, no I/O: the stream's source (spark/range_source) asks the clusters and calls these.

  P1  `admit` never moves a partition past its latest offset, and admits at most `max_records` records in all
      plus one per partition it moves. A partition whose latest offset is below its start (the topic re-created
      or truncated) ends there: the driver sees offsets go back in that batch, and no range is read for it.
  P6  When the cap would leave partitions less than MIN_SHARE records each, or more than PARTITIONS_MAX of them
      have a backlog, the backlogged partitions take turns (`turn`, one more each batch): G turns, G as small as
      lets each turn's partitions share the cap with about MIN_SHARE each and be at most PARTITIONS_MAX, and at
      most one turn per backlogged partition; turn t moves the t mod G-th of G runs of
      consecutive partitions in (topic, partition) order (the n backlogged partitions at positions i with
      floor(i G / n) = t mod G), so a turn writes to about a G-th of the remote topics: a writer's client looks
      a record's topic up among every topic it has written to (spark/writer_producers, the topic bound). Every
      turn moves a partition, any G consecutive turns move every
      backlogged partition (none starves); with the cap large enough, every one moves every batch.
      A batch of at least half the cap counts as `full` (the source has more): a turn's whole backlogs may add
      up to under the cap (58 of 1,200 partitions of 1,667 records: 96,686 under 100,000), and with a turn taken
      for a stream that keeps up, every lingering task read every quiet partition past its range too.
  P7  `fills`: a batch may be planned from end offsets read while the previous batch copied, when those ends
      already hold at least `max_records` records past its start, or backlogs in more than PARTITIONS_MAX
      partitions (P6 moves a turn of them): the stream is a whole batch behind, so the newest records would wait
      for a later batch anyway (a fresh read of 24,000 partitions' ends took about a second before each batch of
      a backlog). Otherwise the ends are read afresh (a stream that keeps
      up copies a record in the batch after it arrives). Ends read earlier are never past the partition's ends now
      (offsets only grow; a topic re-created in between shows in the next fresh read, as one re-created right
      after a read does).
  P2  A partition first seen after the query began (no start) ends its first batch at its log start: it is
      read from there on, the way Kafka's own source starts a new partition at its earliest offset.
  P8  A partition whose log start, when known, is above its start (the source deleted records the flow had not
      read: retention, deleteRecords) is planned from its log start: its backlog counts from there and its end
      is at least the log start, so the deleted span is crossed in one batch (one loss for the driver to record)
      and not a share at a time.
  P3  `slot_ranges` is a pure function of (start, end, slots): a batch replayed from the offset log after a
      crash is planned exactly as it was. Every partition with from < until lies in exactly one slot, and each
      slot's records are within one range of an even share.
  P9  `resumed`: a batch reads each partition from Spark's start of it, or from the position a lingering task of
      the batch before copied it to (spark/copier C6), whichever is further: never a record twice within a
      query, never below Spark's start. A partition whose position is at or past the batch's end gets no range.
  P4  Offsets as JSON (`encode`) have their topics and partitions in sorted order: Spark compares them as text.
  P5  A backfill reads, per partition, the smallest range holding every offset of its request the target has no
      copy of (`uncovered_span`), and writes none of those it has (`uncovered`): offsets are written at most once.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TopicPartition = tuple[str, int]
Offsets = Mapping[TopicPartition, int]


@dataclass(frozen=True, order=True)
class Range:
    """Source offsets [from_offset, until_offset) of one partition, for one task slot to copy."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def records(self) -> int:
        return self.until_offset - self.from_offset


# P6: librdkafka sends one partition per produce request, so a partition moved a few records at a time costs a
# request for each few: 600 partitions moved 76 records a batch copied 51,000 records/s, 833 at once 193,000.
MIN_SHARE = 2_000
# P6: a batch's transactions add its partitions to themselves before their records are sent; one over all 24,000
# partitions of 2,000 new topics (10 records each) timed out records after 20 s, and the retries copied 1,560
# records/s. Batches of 2,400 partitions copied 34,000 records/s there.
PARTITIONS_MAX = 2_400


def turns(backlog: Mapping[TopicPartition, int], max_records: int | None) -> int:
    """G of P6: 1 when the cap leaves each backlogged partition MIN_SHARE records (or its whole backlog) and they are
    at most PARTITIONS_MAX; never more than the backlogged partitions, so that every turn moves one."""
    by_partitions = math.ceil(len(backlog) / PARTITIONS_MAX)
    if max_records is None:
        return max(1, by_partitions)
    wanted = sum(min(size, MIN_SHARE) for size in backlog.values())
    return max(1, by_partitions, min(len(backlog), math.ceil(wanted / max(max_records, 1))))


def admit(start: Offsets, latest: Offsets, log_starts: Offsets, max_records: int | None,
          turn: int = 0) -> dict[TopicPartition, int]:
    """The batch's end offsets (P1, P2, P6, P8): `latest` for every partition the source has now, capped in all to
    `max_records` (None: no cap) and shared out among this `turn`'s partitions in proportion to each one's
    backlog; `log_starts`: the log start of each partition in `latest` but not in `start`, and of any other
    partition whose log start is known."""
    end: dict[TopicPartition, int] = {}
    backlog: dict[TopicPartition, int] = {}
    begin: dict[TopicPartition, int] = {}  # where each backlog counts from (P8: past records deleted unread)
    for tp, last in latest.items():
        if tp not in start:
            end[tp] = log_starts.get(tp, 0)
            continue
        begin[tp] = max(start[tp], min(log_starts.get(tp, start[tp]), last))
        if last > begin[tp]:
            backlog[tp] = last - begin[tp]
        else:  # nothing new; all of it deleted unread (P8); or offsets went back (re-created, truncated: the
            end[tp] = last  # batch shows the driver)
    total = sum(backlog.values())
    if (max_records is None or total <= max_records) and len(backlog) <= PARTITIONS_MAX:
        end.update((tp, begin[tp] + size) for tp, size in backlog.items())
        return end
    g = turns(backlog, max_records)
    n = len(backlog)
    moving = {tp: size for i, (tp, size) in enumerate(sorted(backlog.items())) if i * g // n == turn % g}
    moved = sum(moving.values())
    for tp, size in backlog.items():
        if tp not in moving:
            end[tp] = start[tp]
        elif max_records is None or moved <= max_records:
            end[tp] = begin[tp] + size
        else:
            end[tp] = begin[tp] + min(size, max(1, math.floor(max_records * size / moved)))
    return end


def full(records: int, max_records: int | None, partitions: int = 0) -> bool:
    """P6: whether a batch of `records` over `partitions` is full, so that the source may hold more than it took:
    half the cap, or more than half of PARTITIONS_MAX (a turn of G >= 2 moves more than that)."""
    return 2 * partitions > PARTITIONS_MAX or (max_records is not None and 2 * records >= max_records)


def fills(start: Offsets, latest: Offsets, max_records: int | None) -> bool:
    """P7: whether the partitions of `start` hold a whole batch up to `latest`: at least `max_records` records (no
    cap: never, an uncapped batch takes every record, so it wants the newest ends), or backlogs in more than
    PARTITIONS_MAX partitions (P6 moves a turn of them, capped or not)."""
    records = partitions = 0
    for tp, at in start.items():
        ahead = latest.get(tp, at) - at
        if ahead > 0:
            records += ahead
            partitions += 1
    return partitions > PARTITIONS_MAX or (max_records is not None and records >= max_records)


def slot_ranges(start: Offsets, end: Offsets, slots: int, empty: bool = False) -> list[list[Range]]:
    """The batch's ranges, one list per task slot in use (P3): the ranges in (partition, topic) order, cut into
    consecutive runs of about equal records (a range goes to the slot its middle record falls in), so that a
    partition stays with the same slot from batch to batch while the load is even, and a topic's partitions are
    spread over the slots even when no range holds a record (in (topic, partition) order a lingering batch of empty
    ranges gave one slot every partition of one topic, and its task every record that then came); slots without
    a range are left out. `empty`: a partition with no record in the batch (or whose start is past its end: P9)
    gets an empty range at its start too, since a lingering batch reads on past its ranges' ends (spark/copier
    C6); each range then weighs one record more."""
    ranges = sorted((Range(tp[0], tp[1], start[tp], max(until, start[tp])) for tp, until in end.items()
                     if tp in start and (until > start[tp] or empty)), key=lambda r: (r.partition, r.topic))
    n = max(1, slots)
    extra = 1 if empty else 0
    total = sum(r.records + extra for r in ranges)
    out: list[list[Range]] = [[] for _ in range(n)]
    before = 0
    for r in ranges:
        out[min(n - 1, (2 * before + r.records + extra) * n // (2 * total))].append(r)
        before += r.records + extra
    return [rs for rs in out if rs]


def resumed(start: Offsets, positions: Offsets) -> dict[TopicPartition, int]:
    """P9: each partition of `start` at the later of its start and its position (a partition of `positions` only
    gets none)."""
    return {tp: max(at, positions.get(tp, at)) for tp, at in start.items()}


def encode(offsets: Offsets) -> dict[str, dict[str, int]]:
    """Offsets in the JSON shape of Spark's Kafka source ({topic: {partition: offset}}), sorted (P4)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def decode(offsets: Mapping[str, Mapping[str, int]] | None) -> dict[TopicPartition, int]:
    return {(topic, int(p)): int(o) for topic, parts in (offsets or {}).items() for p, o in parts.items()}


Intervals = Sequence[tuple[int, int]]  # [from, until) offset intervals, ascending and disjoint


def uncovered_span(start: int, end: int, covered: Intervals) -> tuple[int, int] | None:
    """The smallest [from, until) holding every offset of [start, end) outside `covered` (P5); None if none is."""
    lo, hi = start, end
    for a, b in covered:  # ascending: the first intervals can only raise `lo`
        if a <= lo < b:
            lo = b
    for a, b in reversed(covered):  # descending: the last ones can only lower `hi`
        if a < hi <= b:
            hi = a
    return (lo, hi) if lo < hi else None


def uncovered(offsets: Sequence[int], lo: int, covered: Intervals) -> list[int]:
    """The indexes from `lo` on of the ascending `offsets` that fall in no interval of `covered` (P5)."""
    out: list[int] = []
    at = lo
    for a, b in covered:
        first = max(at, bisect.bisect_left(offsets, a))
        out.extend(range(at, first))
        at = max(at, bisect.bisect_left(offsets, b))
    out.extend(range(at, len(offsets)))
    return out

