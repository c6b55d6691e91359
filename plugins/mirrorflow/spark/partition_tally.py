"""A task's tally of one source partition as the writer goes (spark/stream_writer), folded into the PartitionReport
the driver receives (rules/partition_report)."""

from __future__ import annotations

import numpy as np

from mirrorflow.rules import digests
from mirrorflow.rules.anchors import Anchor
from mirrorflow.rules.digests import CellDigest
from mirrorflow.rules.partition_report import PartitionReport
from mirrorflow.status import metrics

TopicPartition = tuple[str, int]


class PartitionTally:
    """What a task did with one source partition so far: counts, positions, latencies and digest cells. Bound: one
    entry per digest cell the task's ranges touch, and (until `report`) one latency per reported record."""


    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.records = self.bytes = self.skipped = self.refused = self.filtered = self.syncs = 0
        self.upstream_next: int | None = None  # partition_report T1
        self.downstream_next: int | None = None
        self.first: tuple[int, int] | None = None  # (upstream, downstream) of the first and last mirrored record
        self.last: tuple[int, int] | None = None
        self.replay = False
        self.first_refused: int | None = None
        self.first_offset: int | None = None  # the first source offset the batch read
        self.latency = metrics.Distribution()
        self.age = metrics.Distribution()
        self.last_timestamp: int | None = None
        self.stuck: str | None = None  # why the target did not take the partition's records in time
        self.aborted = False  # transactional: rolled back with the task's transaction, for another partition
        self.cells: dict[int, list[int]] = {}  # cell -> [records, refused, xor] of the batch (digests.py)
        # ms from a record's timestamp to its acknowledgement, folded at row(): every record's with exact delivery
        # reports, else those of the reported records (_PartitionWrite: each run's last, each cell's first)
        self.latencies: list[int] = []
        self.target_firsts: dict[int, int] = {}  # cell -> the target offset of its first copy (set once settled)
        self.gaps: list[tuple[int, int]] = []  # [begin, end) deleted inside the ranges read (Gap)

    def report(self) -> PartitionReport:
        self.latency.add_many(self.latencies)
        self.latencies = []
        first, last, latency, age, firsts = self.first, self.last, self.latency, self.age, self.target_firsts
        return PartitionReport(
            self.tp[0], self.tp[1], self.first_offset, self.records, self.bytes, self.skipped, self.refused,
            self.first_refused, self.filtered, self.upstream_next, self.downstream_next,
            Anchor(*first) if first else None, Anchor(*last) if last else None, self.replay, self.syncs,
            latency.minimum, latency.maximum, latency.total,
            tuple(latency.buckets), age.minimum, age.maximum,
            age.total, self.last_timestamp, self.stuck, self.aborted,
            tuple(CellDigest(c, n, refused, xor, firsts.get(c)) for c, (n, refused, xor) in sorted(self.cells.items())),
            tuple(self.gaps))

    def digest(self, offsets: np.ndarray, record_digests: np.ndarray, refused: list[tuple[int, int]]) -> None:
        """Fold a run of the partition's records in; `refused`: (offset, digest) of those refused (not written)."""
        for cell, records, xor in digests.cell_digests(offsets, record_digests):
            into = self.cells.setdefault(cell, [0, 0, 0])
            into[0] += records
            into[2] = int(np.int64(into[2]) ^ np.int64(xor))
        for offset, d in refused:
            into = self.cells[offset // digests.CELL]
            into[0] -= 1
            into[1] += 1
            into[2] = int(np.int64(into[2]) ^ np.int64(d))

    def discard(self) -> None:
        """Nothing of the batch counts (its records are written again): no position, no mirrored record."""
        self.upstream_next = self.downstream_next = None
        self.first = self.last = None
        self.records = self.bytes = self.skipped = self.refused = 0
        self.first_refused = None
        self.cells.clear()
        self.latencies = []
        self.target_firsts = {}
