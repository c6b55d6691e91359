"""What the stream's driver and a backfill hand each writing task (WriterSpec), and the parts of a partition's records
the copier hands the writer (Run, Gap, PassedOver, Slice)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mirrorflow.kafka.link import FlowLink

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class WriterSpec:
    """Everything a task needs, pickled to the executors once per micro-batch."""

    flow: str
    source: str
    target: str
    # librdkafka settings (they hold secrets: never printed): target producer, target consumer,
    # source admin and target admin, the last two only to name size limits in an error.
    producer_settings: Mapping[str, Any] = field(repr=False)
    consumer_settings: Mapping[str, Any] = field(repr=False)
    source_admin_settings: Mapping[str, Any] = field(repr=False)
    target_admin_settings: Mapping[str, Any] = field(repr=False)
    remote: Mapping[str, str]  # source topic -> remote topic, only for topics the flow replicates
    upstream_next: Mapping[TopicPartition, int]  # positions: the upstream offset below which the target has all
    ends: Mapping[TopicPartition, int]  # the micro-batch's end offset of each source partition
    downstream_next: Mapping[TopicPartition, int]  # where the partition's next record lands, as the syncs say
    syncs_topic: str
    provenance: bool
    transactional: bool  # records and offset syncs in one transaction per task (the stream, unless idempotent)
    # Partitions written out of order (a backfill repairing a gap below the flow's position): their records
    # are appended after later ones, so they get no offset syncs, which must stay monotonic for translation.
    unsynced: frozenset[TopicPartition] = frozenset()
    # The first batch of a query may repeat records a failed attempt wrote: its first records are barriers.
    replay: bool = False
    # Transactional: a delivery report per record, not only sparse ones (_PartitionWrite): the first batch after a
    # query failed or was cut short, which names the record or partition that failed a commit without a report.
    exact_reports: bool = False
    lease_member: str | None = None  # the driver's member id in the lease group: every write confirms it (W1)
    lease_own_ids: tuple[str, ...] = ()  # the driver's earlier member ids (never another instance)
    paused: frozenset[TopicPartition] = frozenset()  # stuck partitions the driver pauses: nothing of them written
    fenced: int = 0  # transactional: when the driver last fenced the slots' ids (a producer from before is stale)
    # Not transactional: the offset syncs still commit in a transaction of the task slot's id (the stream: W4).
    fence_syncs: bool = False
    # Transactional: workers keep producers across batches (a local master: the marks below see every worker).
    keep_producers: bool = True
    # The copier's reads (spark/copier): the source's consumer settings (secrets: never printed) and isolation.
    source_consumer_settings: Mapping[str, Any] = field(default_factory=dict, repr=False)
    reads_committed: bool = False
    # A local master's stream: the batch's own name, under which its tasks claim writer seats (writer_seat).
    batch_key: str | None = None
    # A backfill's: per source partition, the offsets the target holds a copy of ([from, until) intervals,
    # ascending): skipped, never written again (batch_plan P5). Bound: the ranges' copied stretches.
    copied: Mapping[TopicPartition, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    # The stream's: until when (time.time()) its tasks read on past their ranges' ends (copier C6); None: not at all.
    linger_until: float | None = None
    # Its batch is full (the source had more than a batch): a lingering task reads on only as far as each
    # partition's end just then, and waits for no record (copier C6).
    behind: bool = False

    @classmethod
    def of(cls, link: FlowLink, **fields: Any) -> WriterSpec:
        """The spec of a write for the link's flow: the link's part (clusters, settings, the offset-syncs topic,
        the flow's provenance and delivery), then `fields`, which may also override any of them."""
        return cls(**{
            "flow": link.name, "source": link.flow.source, "target": link.flow.target,
            "producer_settings": link.settings("target", "producer"),
            "consumer_settings": link.settings("target", "consumer"),
            "source_admin_settings": link.settings("source", "admin"),
            "target_admin_settings": link.settings("target", "admin"),
            "source_consumer_settings": link.settings("source", "consumer"), "reads_committed": link.reads_committed,
            "syncs_topic": link.syncs_topic, "provenance": link.flow.flag("mirrorflow.provenance.header.enabled"),
            "transactional": link.transactional, **fields})


@dataclass
class Run:
    """Consecutive records of one source partition, in offset order, as the writer takes them."""

    offsets: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[list[tuple[str, bytes | None]] | None]
    timestamps: np.ndarray  # ms, int64
    digests: np.ndarray  # digests.RECORD_DIGEST of each record, int64


@dataclass(frozen=True)
class Gap:
    """Source offsets [begin, end) inside a range the task read that the source deleted before they were read
    (retention while the batch ran): the driver records them as lost."""

    begin: int
    end: int


@dataclass(frozen=True)
class PassedOver:
    """Source offsets [from_offset, until_offset) of a partition the task does not read: its topic is not
    replicated (held, or only matched by the subscription pattern) or the partition is paused."""

    from_offset: int
    until_offset: int


@dataclass(frozen=True)
class Slice:
    """A lingering task's point to make what it wrote so far visible (copier C6): transactional, its transaction
    commits there with the offset syncs of its partitions' positions, and a new one begins."""
