"""A writer task's report of a partition, the value that crosses from an executor to the driver
(rules/partition_report T1-T4; pure)."""

from __future__ import annotations

import pickle

import numpy as np
from mirrorflow.rules import digests
from mirrorflow.rules.anchors import Anchor
from mirrorflow.rules.digests import CellDigest
from mirrorflow.spark.partition_tally import PartitionTally


def test_a_partition_the_task_wrote_nothing_of_is_reported_with_none_for_none() -> None:
    report = PartitionTally(("orders", 3)).report()
    assert report.tp == ("orders", 3) and report.records == 0
    assert None is report.upstream_next is report.downstream_next is report.first is report.last
    assert None is report.latency_min is report.latency_max is report.age_min is report.last_timestamp
    assert report.digests == () and report.gaps == ()


def test_a_report_names_its_copies_cells_and_gaps_and_crosses_to_the_driver_whole() -> None:
    summary = PartitionTally(("orders", 3))
    offsets = np.arange(digests.CELL - 2, digests.CELL + 3, dtype=np.int64)
    summary.digest(offsets, np.arange(1, 6, dtype=np.int64), refused=[(int(offsets[-1]), 5)])
    summary.first, summary.last, summary.upstream_next, summary.downstream_next = (10, 0), (14, 3), 15, 4
    summary.records, summary.last_timestamp = 4, 1_000
    summary.latencies = [3, 7]
    summary.target_firsts = {0: 0}
    summary.gaps.append((5, 8))
    report = summary.report()
    assert (report.first, report.last, report.upstream_next, report.downstream_next) == (
        Anchor(10, 0), Anchor(14, 3), 15, 4)
    assert (report.latency_min, report.latency_max, report.latency_sum) == (3, 7, 10)
    # The refused record is not written: it leaves its cell's XOR.
    assert report.digests == (CellDigest(0, 2, 0, 1 ^ 2, 0), CellDigest(1, 2, 1, 3 ^ 4, None))
    assert report.gaps == ((5, 8),)
    assert pickle.loads(pickle.dumps(report)) == report
