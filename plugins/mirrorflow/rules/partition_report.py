"""What a task reports of each source partition it copied: the one value that crosses from an executor to the
driver (the stream's batch and the backfill), pickled whole by Spark's collect. `None` is "none" in every field.

  T1  `upstream_next` is None when the report does not count (the partition stuck, or aborted with another's
      transaction) or the task read nothing of it; otherwise every record below it is on the target, refused or
      skipped. `downstream_next` is where the partition's next copy lands, None when the task did not learn it.
  T2  `first` and `last` are the batch's first and last mirrored records (source offset, target offset), both None
      when it wrote none; `latency_*` and `age_*` describe `records` records and are None when it wrote none.
  T3  `digests` has the cells the batch wrote in ascending cell order (rules/digests); `gaps` the [begin, end)
      spans the source deleted while the task read, in offset order.
  T4  `producer_inits`, `consumer_inits` and `consumer_uses` are the task's, carried on its first report only.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirrorflow.rules.anchors import Anchor
from mirrorflow.rules.digests import CellDigest

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PartitionReport:
    topic: str
    partition: int
    first_offset: int | None  # the first source offset the batch read
    records: int
    bytes: int
    skipped: int
    refused: int
    first_refused: int | None
    filtered: int  # records read past the range and passed over (paused partitions, held topics)
    upstream_next: int | None  # T1
    downstream_next: int | None
    first: Anchor | None  # T2
    last: Anchor | None
    replay: bool  # the batch may have repeated records already written
    syncs: int  # offset-sync records the task wrote for the partition
    latency_min: int | None  # ms from a record's timestamp to its acknowledgement (T2)
    latency_max: int | None
    latency_sum: int
    latency_buckets: tuple[int, ...]  # status.metrics.BOUNDS_MS
    age_min: int | None  # ms from a record's timestamp to its copy
    age_max: int | None
    age_sum: int
    last_timestamp: int | None  # the newest mirrored record's timestamp (ms)
    stuck: str | None  # why the target did not take the partition's records in time
    aborted: bool  # rolled back with the transaction of another, stuck, partition
    digests: tuple[CellDigest, ...] = ()  # T3
    gaps: tuple[tuple[int, int], ...] = ()
    producer_inits: int = 0  # T4
    consumer_inits: int = 0
    consumer_uses: int = 0

    @property
    def tp(self) -> TopicPartition:
        return self.topic, self.partition
