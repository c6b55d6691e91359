"""The audit's comparison of one source partition's range with its copies on the target (pure: numpy arrays in,
a PartitionAudit out). The reads that fill the arrays are jobs/audit_task's.

Each source record of the range is classified once:

  mirrored    it has a copy on the target;
  missing     no copy, and the flow's offset syncs say the flow has read past it;
  behind      no copy, and the flow has not read it yet (the stream is behind: not counted as missing);
  duplicated  more than one copy;
  differing   some copy's key, value, headers, timestamp or partition differs from the source;
  refused     a provenance hop names the target's very topic the record would be written to: the stream
              refuses it (it would loop), so it is counted here, not expected on the target.

Copies of offsets in the range with no source record (compacted or expired since) are counted as `unexpected`,
and so are copies of a refused record.

Invariants, each tested:
  A. every source record of a range is counted exactly once as mirrored, missing, behind or refused;
  B. missing and duplicated ranges are maximal runs of consecutive source records, in offset order;
  C. `compare` gives what classifying every source record one by one in offset order (Tally.record) gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mirrorflow.jobs.audit_report import EXAMPLES, Difference, PartitionAudit

FIELDS = ("key", "value", "headers", "timestamp", "partition")
NULL_FIELD = 0x5DEECE66D  # a null key or value's hash: no byte string is hashed to it but by a 2^-64 chance


@dataclass(frozen=True)
class Side:
    """Records of one side as arrays, one row each: the source offset it is (a copy: the source offset its
    provenance names), its field hashes (key, value, headers, timestamp: int64 columns), the partition it lies in,
    and its own offset there."""

    offsets: np.ndarray  # int64
    fields: np.ndarray  # int64, shape (n, 4)
    partitions: np.ndarray  # int32
    at: np.ndarray  # int64

    @staticmethod
    def empty() -> Side:
        return Side(np.zeros(0, np.int64), np.zeros((0, 4), np.int64), np.zeros(0, np.int32), np.zeros(0, np.int64))

    @staticmethod
    def join(parts: list[Side]) -> Side:
        if not parts:
            return Side.empty()
        return Side(np.concatenate([p.offsets for p in parts]), np.concatenate([p.fields for p in parts]),
                    np.concatenate([p.partitions for p in parts]), np.concatenate([p.at for p in parts]))

    def __len__(self) -> int:
        return len(self.offsets)

    def row(self, i: int) -> tuple[Any, ...]:
        """Record i as (key, value, headers, timestamp, partition, at)."""
        return (*(int(x) for x in self.fields[i]), int(self.partitions[i]), int(self.at[i]))


class _Runs:
    """Maximal runs of consecutive source records with one property; the first EXAMPLES kept, all counted."""

    def __init__(self) -> None:
        self.first: list[list[int]] = []
        self.count = 0
        self.open = False

    def add(self, offset: int) -> None:
        if self.open:
            if self.count <= EXAMPLES:
                self.first[-1][1] = offset
            return
        self.count += 1
        self.open = True
        if self.count <= EXAMPLES:
            self.first.append([offset, offset])

    def cut(self) -> None:
        self.open = False


class Tally:
    """One source partition's counts, as its records are classified in offset order."""

    def __init__(self, remote: str, mirrored: int | None) -> None:
        self.remote, self.mirrored = remote, mirrored
        self.source_records = self.mirrored_records = self.copies = self.unexpected = 0
        self.missing = self.duplicated = self.differing = self.behind = self.refused = 0
        self.missing_ranges, self.duplicated_ranges = _Runs(), _Runs()
        self.differences: list[Difference] = []

    def record(self, offset: int, source: tuple[Any, ...] | None, copies: list[tuple[Any, ...]],
               refused: bool = False) -> None:
        """Classify one source offset: its source record's row (None: no source record) and its copies' rows."""
        if source is None:
            self.unexpected += len(copies)
            return
        self.source_records += 1
        if refused:
            self.refused += 1
            self.unexpected += len(copies)
            self.cut()
            return
        self.copies += len(copies)
        if not copies:
            self.duplicated_ranges.cut()
            if self.mirrored is None or offset >= self.mirrored:
                self.behind += 1
                self.missing_ranges.cut()
            else:
                self.missing += 1
                self.missing_ranges.add(offset)
            return
        self.missing_ranges.cut()
        self.mirrored_records += 1
        if len(copies) > 1:
            self.duplicated += 1
            self.duplicated_ranges.add(offset)
        else:
            self.duplicated_ranges.cut()
        fields: list[str] = []
        for copy in copies:
            fields += [f for f, a, b in zip(FIELDS, source, copy, strict=False) if a != b and f not in fields]
        if fields:
            self.differing += 1
            if len(self.differences) < EXAMPLES:
                at = next(c for c in copies if c[:len(FIELDS)] != source[:len(FIELDS)])
                self.differences.append(Difference(offset, tuple(fields), f"{self.remote}-{at[4]}@{at[5]}"))

    def cut(self) -> None:
        self.missing_ranges.cut()
        self.duplicated_ranges.cut()

    def audit(self, topic: str, partition: int, start: int, end: int) -> PartitionAudit:
        return PartitionAudit(
            topic, partition, start, end, self.remote, self.mirrored, source_records=self.source_records,
            mirrored_records=self.mirrored_records, copies=self.copies, unexpected=self.unexpected,
            missing=self.missing, missing_ranges=tuple((a, b) for a, b in self.missing_ranges.first),
            missing_range_count=self.missing_ranges.count, duplicated=self.duplicated,
            duplicated_ranges=tuple((a, b) for a, b in self.duplicated_ranges.first),
            duplicated_range_count=self.duplicated_ranges.count, differing=self.differing,
            differences=tuple(self.differences), behind=self.behind, refused=self.refused)


def compare(tally: Tally, source: Side, refused: np.ndarray, copies: Side, start: int, end: int) -> None:
    """Classify every record of `source` (ascending offsets in [start, end); `refused`: bool per record) against
    `copies` (any order; those naming an offset outside [start, end) are not this range's). A record with one copy
    equal in every field is counted in bulk; the others one by one, in offset order (invariant C)."""
    inside = (copies.offsets >= start) & (copies.offsets < end)
    order = np.lexsort((copies.at[inside], copies.offsets[inside]))
    kept = Side(copies.offsets[inside][order], copies.fields[inside][order], copies.partitions[inside][order],
                copies.at[inside][order])
    first = np.searchsorted(kept.offsets, source.offsets, "left")
    last = np.searchsorted(kept.offsets, source.offsets, "right")
    counts = last - first
    tally.unexpected += len(kept) - int(counts.sum())  # copies of offsets with no source record
    one = np.minimum(first, max(len(kept) - 1, 0))
    if len(kept):
        same = ((kept.fields[one] == source.fields).all(axis=1) & (kept.partitions[one] == source.partitions))
    else:
        same = np.zeros(len(source), bool)
    clean = (counts == 1) & same & ~refused
    n = int(clean.sum())
    tally.source_records += n
    tally.mirrored_records += n
    tally.copies += n
    before = -1
    for i in np.flatnonzero(~clean).tolist():
        if i != before + 1:
            tally.cut()  # a clean record lies between: it ends every run
        tally.record(int(source.offsets[i]), source.row(i), [kept.row(j) for j in range(first[i], last[i])],
                     bool(refused[i]))
        before = i
    if before != len(source) - 1:
        tally.cut()
