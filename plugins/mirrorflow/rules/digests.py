"""Content digests the stream records as it writes, so the audit can prove a copy by reading the target alone.

A record's digest is Spark's 64-bit xxhash of what a copy must keep (RECORD_DIGEST): its source partition and
offset, key, value, headers (without this hop's provenance header on the copy) and timestamp. The audit
computes the same expression on each copy, with the source partition and offset its provenance header names.

A digest unit covers the source offsets [first, next) of one partition, within one cell of CELL offsets: how
many records the flow wrote there (`records`), how many it refused (they would loop; never written), the XOR of
the written records' digests, and the lowest target offset of their copies (`target_first`, None if unknown).
The driver folds each settled batch into the partition's open unit (`Ledger`) and emits a unit when its cell is
complete or it has been open for the ledger's interval; it keeps one open unit per partition.

A copy set matches a unit when it has exactly `records` copies whose digests XOR to the unit's: a missing record
changes the count or the XOR, a duplicate the count, a differing field the XOR (a miss needs a 64-bit collision).

Invariants, each tested:
  A. the units emitted for a partition never overlap, and each lies within one cell;
  B. a unit's records and XOR are those of the records added for its offsets;
  C. chain(units, start) starts at or before `start` and its units are contiguous and disjoint.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

CELL = 100_000  # source offsets per cell: a unit never spans two
INTERVAL_S = 300.0  # an open unit with records is emitted after this long, complete or not
RETENTION_MS = 7 * 24 * 3600 * 1000  # the digest topic's: an audit of older records reads both sides

# SQL over a Kafka source row (partition, offset, key, value, headers, timestamp): the source side of the digest.
# Null and empty differ for key and value; no headers and an empty list are the same (a copy always has a list).
_HEADERS = "IF({h} IS NULL OR size({h}) = 0, 0L, xxhash64({h}))"


def digest_sql(partition: str = "partition", offset: str = "offset", headers: str = "headers") -> str:
    return (f"xxhash64({partition}, {offset}, key, key IS NULL, value, value IS NULL, "
            f"{_HEADERS.format(h=headers)}, unix_millis(timestamp))")


RECORD_DIGEST = digest_sql()


def topic_name(source: str) -> str:
    """The flow's digest topic on its target."""
    return f"mirrorflow-digests.{source}.internal"


@dataclass(frozen=True)
class Unit:
    topic: str
    partition: int
    first: int
    next: int  # exclusive
    records: int
    refused: int
    xor: int  # a signed 64-bit integer, as Spark's xxhash64 gives it
    target_first: int | None

    @property
    def cell(self) -> int:
        return self.first // CELL

    def encode(self) -> tuple[bytes, bytes]:
        return f"{self.topic}/{self.partition}/{self.first}".encode(), json.dumps(asdict(self)).encode()

    @staticmethod
    def decode(value: bytes) -> Unit:
        return Unit(**json.loads(value))


@dataclass(frozen=True)
class CellDigest:
    """What one batch wrote in one cell of one partition."""

    cell: int
    records: int
    refused: int
    xor: int
    target_first: int | None


def cell_digests(offsets: np.ndarray, digests: np.ndarray) -> list[tuple[int, int, int]]:
    """(cell, records, xor) per cell, for offsets in ascending order and their records' digests."""
    if len(offsets) == 0:
        return []
    cells = offsets // CELL
    starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]])
    xors = np.bitwise_xor.reduceat(digests.astype(np.int64), starts)
    counts = np.diff(np.r_[starts, len(offsets)])
    return [(int(cells[i]), int(n), int(x)) for i, n, x in zip(starts, counts, xors, strict=True)]


def _xor(a: int, b: int) -> int:
    return int(np.int64(a) ^ np.int64(b))


class Ledger:
    """The driver's open unit per partition. Bound: one open unit per partition the flow has written since its
    last emit (a partition's unit is dropped when it is emitted or its topic forgotten)."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.open: dict[tuple[str, int], tuple[Unit, float]] = {}  # (unit so far, when it opened)

    def add(self, tp: tuple[str, int], begin: int, end: int, cells: Sequence[CellDigest], now: float) -> list[Unit]:
        """Fold in a settled batch that read [begin, end) of the partition; the units it completes or cuts off (also
        those without records: they keep the audit's chain of units unbroken across offsets without records)."""
        done: list[Unit] = []
        by_cell = {c.cell: c for c in cells}
        position = begin
        while position < end:
            cell = position // CELL
            stop = min(end, (cell + 1) * CELL)
            part = by_cell.get(cell)
            current = self.open.get(tp)
            if current is not None and (current[0].next != position or current[0].cell != cell):
                done.append(current[0])  # not contiguous (a replay, a new query): emitted as it is
                current = None
            if current is None:
                unit = Unit(tp[0], tp[1], position, stop, 0, 0, 0, None)
                opened = now
            else:
                unit, opened = replace(current[0], next=stop), current[1]
            if part is not None:
                unit = replace(unit, records=unit.records + part.records, refused=unit.refused + part.refused,
                               xor=_xor(unit.xor, part.xor),
                               target_first=part.target_first if unit.target_first is None else unit.target_first)
            if stop == (cell + 1) * CELL:
                self.open.pop(tp, None)
                done.append(unit)
            else:
                self.open[tp] = (unit, opened)
            position = stop
        return done

    def due(self, now: float) -> list[Unit]:
        """Open units with records that have been open for the interval (emitted; their partitions start afresh)."""
        out = [u for u, opened in self.open.values() if (u.records or u.refused) and now - opened >= self.interval_s]
        for u in out:
            del self.open[(u.topic, u.partition)]
        return out

    def drain(self) -> list[Unit]:
        """Every open unit with records (at a stop)."""
        out = [u for u, _ in self.open.values() if u.records or u.refused]
        self.open.clear()
        return out

    def forget(self, topics: Iterable[str]) -> None:
        gone = set(topics)
        for tp in [tp for tp in self.open if tp[0] in gone]:
            del self.open[tp]


def chain(units: Iterable[Unit], start: int) -> list[Unit]:
    """The longest run of contiguous units from the one that holds `start` (overlapping ones, left by a replay,
    skipped); empty if no unit holds `start`."""
    out: list[Unit] = []
    position = start
    for u in sorted(units, key=lambda u: (u.first, -u.next)):
        if u.next <= position or (out and u.first < position):
            continue
        if u.first > position:
            break
        out.append(u)
        position = u.next
    return out


def read(units: Iterable[bytes]) -> dict[tuple[str, int], list[Unit]]:
    """Units by partition from the digest topic's values."""
    out: dict[tuple[str, int], list[Unit]] = {}
    for value in units:
        u = Unit.decode(value)
        out.setdefault((u.topic, u.partition), []).append(u)
    return out


def matches(unit: Unit, copies: Mapping[str, int] | None) -> bool:
    """`copies`: the count and XOR of the copies found for the unit's offsets (None: none found)."""
    if copies is None:
        return unit.records == 0
    return copies["records"] == unit.records and copies["xor"] == unit.xor
