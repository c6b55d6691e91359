"""The executor side of the stream: writes one task's records to the target.

The copier (spark/copier: the stream's micro-batches, a backfill's ranges) hands it runs of one source partition's
records, in offset order. This module produces those records with confluent-kafka (partition, key, value, headers
and timestamp kept; a provenance header appended), waits until the target acknowledged every one (a delivery
report each, or under transactions the commit: see _PartitionWrite), then records each partition's position in
the offset syncs (with the batch's first record, so a reader sees a replay at once); the driver turns the
summaries into anchors. It yields one summary row per source partition for the driver's progress and metrics.

Delivery (`spec.transactional`: exactly-once, and at-least-once unless `mirrorflow.records.fenced = false`):
  transactional  a task's records and its partitions' offset syncs are committed in one transaction (one per
                 Slice while the task lingers: copier C6).
  idempotent     idempotent producer, acks=all; syncs are written only after the data is acknowledged, and
                 commit in a transaction of the task slot's id (below), which fences them (flow_lease, W4).
The stream's transactional producers: one per task slot (`transactional.id` derived from the flow and the task's
index in the batch, so a retried task or a second instance fences the earlier writer of that slot), kept by the
Python worker across batches. An at-least-once backfill writes its syncs with the idempotent producer.
Either way records below the partition's committed position (already in the target, known from
the offset syncs) are skipped, so a replayed batch never writes them twice when transactional.
Every record is handed over only under a confirmed lease and expires if not sent within
DELIVERY_TIMEOUT_MS (flow_lease, W1 and W2). A partition whose records the target did not take in that time
(no leader, a quota, a full disk, too few in-sync replicas) is *stuck*: its records of the batch count for
nothing (no offset syncs), its summary says why, and the driver pauses it while every other partition goes on.
Transactional, the task's transaction aborts with it: the task's other partitions are *aborted* (their summaries
say so) and the driver writes them again at once, the stuck one paused.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import hashlib
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, KafkaException, Producer

from mirrorflow.errors import ConfigError, MirrorError, OperationalError
from mirrorflow.kafka import offset_sync_log
from mirrorflow.kafka.flow_lease import DELIVERY_TIMEOUT_MS, LeaseGuard, LeaseSuperseded
from mirrorflow.kafka.link import FlowLink
from mirrorflow.rules import batch_plan, digests, provenance
from mirrorflow.rules.anchors import Anchor
from mirrorflow.rules.digests import CellDigest
from mirrorflow.rules.offset_syncs import Position
from mirrorflow.rules.partition_report import PartitionReport
from mirrorflow.status import metrics

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# Records the target did not take within DELIVERY_TIMEOUT_MS (librdkafka retried until then), or a transaction
# the coordinator aborted (it outlived transaction.timeout.ms): the partition is stuck, not the flow broken.
_STUCK = {KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError.INVALID_PRODUCER_EPOCH,
          KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, KafkaError.LEADER_NOT_AVAILABLE,
          KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.REQUEST_TIMED_OUT, KafkaError.KAFKA_STORAGE_ERROR,
          KafkaError._TRANSPORT, KafkaError.THROTTLING_QUOTA_EXCEEDED}
_PURGED = {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}
_CAUSES_PER_TASK = 3  # stuck partitions of a task whose cause is looked up in the target's metadata
_FLUSH_LOG_S = 30.0
_METADATA_WAIT_S = 15.0  # remote topics are confirmed visible before the first write: this is a margin


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

    def lingers(self) -> bool:
        """Whether its tasks still read on past their ranges' ends (copier C6): a deadline not passed yet, and the
        driver has not ended the batch's linger early (end_linger)."""
        if self.linger_until is None or time.time() >= self.linger_until:
            return False
        claims = seat_claims(self)
        return claims is None or not (claims / _LINGER_ENDED).exists()

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


def mirror_runs(spec: WriterSpec, runs: Iterator[tuple[TopicPartition, Run | PassedOver | Gap | Slice]]
                ) -> Iterator[PartitionReport]:
    """Mirror a task's runs of records (a partition's runs in offset order), then yield one summary row per source
    partition."""
    writes: dict[TopicPartition, _PartitionWrite] = {}
    producer: Producer | None = None
    kept = False  # transactional: the producer was initialised by an earlier task of this worker
    committed: Mapping[TopicPartition, Position] = {}
    halted = [False]  # transactional: the transaction failed, nothing more of the task is produced
    syncs: list[tuple[Producer, bool]] = []  # fence_syncs: the slot's producer for the offset syncs, and whether kept
    try:
        for tp, part in runs:
            if isinstance(part, Slice):
                if producer is not None and spec.transactional and not halted[0]:
                    _commit_slice(spec, producer, list(writes.values()))
                continue
            write = writes.get(tp)
            if write is None:
                if producer is None:  # a task without records (fewer source partitions than tasks) has none
                    if spec.transactional:
                        producer, kept = _transactional_producer(spec)
                        producer.begin_transaction()
                        committed = _committed_positions(spec)
                    else:
                        producer = _idempotent_producer(spec)
                write = writes[tp] = _PartitionWrite(spec, tp, producer, committed.get(tp), halted, writes)
            if isinstance(part, PassedOver):
                write.pass_over(part)
            elif isinstance(part, Gap):
                write.summary.gaps.append((part.begin, part.end))
            else:
                write.write(part)
        rows = []
        if producer is not None and spec.transactional:
            rows = _settle_transaction(spec, producer, list(writes.values()), halted[0])
            if not kept:
                rows[0] = dataclasses.replace(rows[0], producer_inits=1)
        elif producer is not None:
            rows = _settle(spec, producer, list(writes.values()), syncs)
            if syncs and not syncs[0][1]:
                rows[0] = dataclasses.replace(rows[0], producer_inits=1)
    except LeaseSuperseded as exc:
        for p in (producer, *(s[0] for s in syncs)):
            if p is not None:
                p.purge(in_queue=True, in_flight=False, blocking=False)  # nothing queued may still go out
        _discard(spec)
        raise RuntimeError(str(exc)) from None  # the driver finds the lease lost and stops (or regains it)
    except KafkaException as exc:
        _discard(spec)  # its transaction state is unknown: the task that next has the slot starts afresh
        kept = kept or any(s[1] for s in syncs)
        err: KafkaError = exc.args[0]
        if err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED):
            if kept:  # Not fatal: a worker on another host had the slot since (local workers leave a mark).
                raise RuntimeError(f"flow {spec.flow}: the task slot's transactional producer was fenced by another "
                                   f"worker of this flow since its last batch: {err.str()}") from None
            raise MirrorError(f"flow {spec.flow}: fenced: another writer initialised this flow's transactional ids "
                              f"on {spec.target} (a second instance of the flow, or a task of a stopped one): "
                              f"{err.str()}") from None
        if err.code() == KafkaError.INVALID_PRODUCER_EPOCH:
            # Not fatal: the coordinator aborted a transaction that outlived transaction.timeout.ms; the
            # restarted task's fresh producer resumes from the committed position.
            raise RuntimeError(f"flow {spec.flow}: {spec.target} aborted a transaction (it outlived "
                               f"transaction.timeout.ms = {TRANSACTION_TIMEOUT_MS} ms?): {err.str()}") from None
        raise
    except BaseException:
        _discard(spec)
        raise
    yield from rows


def _settle(spec: WriterSpec, producer: Producer, writes: list[_PartitionWrite],
            syncs: list[tuple[Producer, bool]]) -> list[PartitionReport]:
    """Idempotent records: every write acknowledged (one flush for the task), then each partition's offset syncs
    recorded, unless the target did not take its records in time (stuck). With `spec.fence_syncs` (the stream, W4)
    the task's offset syncs commit in one transaction of the task slot's id (appended to `syncs`, with whether an
    earlier task kept it), so a writer that lost the lease cannot land one after the next holder fenced the id."""
    causes = [_CAUSES_PER_TASK]  # stuck partitions whose cause is still looked up
    _flush(producer, spec, writes)
    summaries, settled = [], []
    for w in writes:
        err = w.failure()
        if err is not None:
            summaries.append(w.stuck(err, causes))
            continue
        settled.append(w)
        summaries.append(w.summary)
    syncs_producer = producer
    if spec.fence_syncs and any(w.has_syncs for w in settled):
        syncs.append(_transactional_producer(spec))
        syncs_producer = syncs[0][0]
        syncs_producer.begin_transaction()
    for w in settled:
        w.record_syncs(syncs_producer)
    _flush(syncs_producer, spec, settled)
    unsynced = next((w for w in settled if w.sync_failures), None)
    if unsynced is not None:  # not fatal: the batch is written again (a replay) and its syncs with it
        raise RuntimeError(f"flow {spec.flow}: {unsynced.tp[0]}-{unsynced.tp[1]}: the offset syncs were not "
                           f"acknowledged by {spec.target}: {unsynced.sync_failures[0]}")
    if syncs_producer is not producer:
        _confirm_lease(spec)
        syncs_producer.commit_transaction(60)
    return [summary.report() for summary in summaries]


def _commit_slice(spec: WriterSpec, producer: Producer, writes: list[_PartitionWrite]) -> None:
    """Transactional, at a Slice: every write acknowledged, then the positions reached so far recorded and the
    transaction committed, and the next begun. A slice with a record the target did not take commits nothing: the
    task's end settles it (its partitions stuck, or the transaction aborted)."""
    _flush(producer, spec, writes)
    if any(w.failures or len(w.acked) != w.reports for w in writes):
        return
    for w in writes:
        w.record_syncs(whole=False)
    _confirm_lease(spec)
    producer.commit_transaction()
    producer.begin_transaction()


def _settle_transaction(spec: WriterSpec, producer: Producer, writes: list[_PartitionWrite],
                        halted: bool) -> list[PartitionReport]:
    """Transactional: every write acknowledged, then the offset syncs added and the task's transaction committed.
    If the target did not take a partition's records in time, the transaction aborts: those partitions are stuck,
    the others aborted (written again at once by the driver). `halted`: the transaction failed while the task was
    still producing (what it had not produced yet is aborted too)."""
    causes = [_CAUSES_PER_TASK]
    _flush(producer, spec, writes)
    errors = {w.tp: w.failure() for w in writes}
    failed = {tp: err for tp, err in errors.items() if err is not None and err.code() not in _PURGED}
    purged = [err for tp, err in errors.items() if err is not None and tp not in failed]
    if not failed and (purged or halted):  # Not fatal: the query restarts, fences, resumes from the positions.
        why = purged[0] if purged else "no record of it was refused or timed out"
        raise RuntimeError(f"flow {spec.flow}: a transaction failed on {spec.target}: {why}")
    if not failed:
        for w in writes:
            w.record_syncs()
        _confirm_lease(spec)
        try:
            producer.commit_transaction()  # flushes the syncs with the records
            return [w.summary.report() for w in writes]
        except KafkaException as exc:
            if exc.args[0].code() not in _STUCK or not exc.args[0].txn_requires_abort():
                raise
            # Every record was acknowledged: the offset syncs or the commit itself were not. Not fatal: the query
            # restarts, fences (aborting this transaction) and resumes from the committed positions.
            raise RuntimeError(f"flow {spec.flow}: {spec.target} did not commit a transaction in time: "
                               f"{exc.args[0].str()}") from None
    producer.abort_transaction(DELIVERY_TIMEOUT_MS / 1000)
    return [(w.stuck(failed[w.tp], causes) if w.tp in failed else w.aborted()).report() for w in writes]


class _Summary:
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
            latency.minimum if latency.count else None, latency.maximum if latency.count else None, latency.total,
            tuple(latency.buckets), age.minimum if age.count else None, age.maximum if age.count else None,
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


class _PartitionWrite:
    """One source partition's records within one task: produced as they come, settled at the end.

    Delivery reports: `exact` (idempotent records; transactional, a task retried or a query's first batch after a
    failure: exact_reports) asks one per record; otherwise only the partition's first record in the task, the first
    of each digest cell and the last of each run report (a per-record callback cost about a sixth of the copy's
    CPU). The transaction's commit then acknowledges the rest: a record refused without a report fails the commit,
    the query restarts, and its first batch has exact reports to say which partition is stuck or which record the
    target refused.
    """

    def __init__(self, spec: WriterSpec, tp: TopicPartition, producer: Producer,
                 committed: Position | None = None, halted: list[bool] | None = None,
                 task_writes: Mapping[TopicPartition, _PartitionWrite] | None = None) -> None:
        """`committed`: transactional, the position a failed attempt of this task committed (the target's word);
        `halted`: shared by the task's writes, set once its transaction failed; `task_writes`: every write of the
        task (they share its producer's queue)."""
        self.spec, self.tp, self.producer = spec, tp, producer
        self.halted = halted if halted is not None else [False]
        self.task_writes = task_writes if task_writes is not None else {tp: self}
        self.summary = _Summary(tp)
        self.remote = None if tp in spec.paused else spec.remote.get(tp[0])
        self.upstream_next = spec.upstream_next.get(tp, -1)
        self.downstream_next = spec.downstream_next.get(tp, -1)  # where the syncs say its next record lands
        if committed is not None and tp not in spec.unsynced and committed.upstream_next > self.upstream_next:
            self.upstream_next = committed.upstream_next
            self.downstream_next = -1 if committed.downstream_next is None else committed.downstream_next
        self.exact = not spec.transactional or spec.exact_reports or _task_attempt() > 0
        self.written: list[int] = []  # upstream offsets, in produce order
        # Write index -> downstream offset of each reported record (exact: every one, in delivery order = produce
        # order in a partition). Bound: the task's records (exact), else its runs plus its cells.
        self.acked: dict[int, int] = {}
        self.unfolded: list[int] = []  # indexes acked since record_syncs last folded them into the digest cells
        self.reports = 0  # delivery reports asked for
        self.last_cell: int | None = None  # the digest cell of the last record written (its first is reported)
        # (error, key + value size, size with every header, index in write order)
        self.failures: list[tuple[KafkaError, int, int, int]] = []
        self.header_bytes: dict[int, int] = {}  # write index -> header bytes, for records of _LARGE_RECORD_BYTES
        self.sync_failures: list[str] = []  # the partition's offset-sync records the target did not take
        self.synced = 0  # records written when its position was last recorded (a Slice's)

    def _delivered(self, err: KafkaError | None, msg: Any, index: int | None = None) -> None:
        """A delivery report: of the record at write `index`, or (exact) of the next one in write order."""
        if index is None:
            index = len(self.acked) + len(self.failures)
        if err is not None:
            size = len(msg.value() or b"") + len(msg.key() or b"")
            headers = self.header_bytes.get(index)
            self.failures.append((err, size, size if headers is None else size + headers, index))
            return
        self.acked[index] = msg.offset()
        self.unfolded.append(index)
        self.summary.latencies.append(int(time.time() * 1000) - msg.timestamp()[1])

    def pass_over(self, part: PassedOver) -> None:
        """A range the task does not read (PassedOver): counted as filtered, as if read and passed over."""
        if self.summary.first_offset is None:
            self.summary.first_offset = part.from_offset
        self.summary.upstream_next = part.until_offset
        self.summary.filtered += part.until_offset - part.from_offset

    def write(self, part: Run) -> None:
        summary, spec, remote = self.summary, self.spec, self.remote
        _confirm_lease(spec)
        offsets = part.offsets
        n = len(offsets)
        summary.upstream_next = offsets[-1] + 1
        if summary.first_offset is None:
            summary.first_offset = offsets[0]
        if remote is None:
            summary.filtered += n
            return
        if self.halted[0]:
            return  # aborted with the task's transaction: written again by the next query
        headers = part.headers
        # Offsets ascend in a run: those below the position are in the target already.
        lo = bisect.bisect_left(offsets, self.upstream_next)
        copied = spec.copied.get(self.tp)
        todo = range(lo, n) if not copied else batch_plan.uncovered(offsets, lo, copied)
        summary.skipped += n - len(todo)
        refused = [i for i in todo if headers[i] and provenance.returns_to(headers[i], spec.target, remote)
                   ] if any(headers) else []
        if refused:
            if summary.first_refused is None:
                summary.first_refused = offsets[refused[0]]
            summary.refused += len(refused)
            skip = set(refused)
            writes = [i for i in todo if i not in skip]
        else:
            writes = list(todo)
        if writes:
            self._produce_run(part, writes)
        if not self.halted[0]:
            now = int(time.time() * 1000)
            ages = now - (part.timestamps[writes] if len(writes) < n else part.timestamps)
            summary.age.add_many(ages)
            if len(ages):
                summary.last_timestamp = int(now - ages[-1])
            record_digests = part.digests
            summary.digest(np.asarray(offsets, dtype=np.int64), record_digests,
                           [(offsets[i], int(record_digests[i])) for i in refused])

    def _produce_run(self, part: Run, writes: list[int]) -> None:
        """Produce the run's records at `writes` (indexes, ascending), every one under a confirmed lease."""
        spec, producer, written = self.spec, self.producer, self.written
        remote: str = self.remote  # type: ignore[assignment]  # only a replicated partition's runs are produced
        partition = self.tp[1]
        offsets, keys, values, headers = part.offsets, part.keys, part.values, part.headers
        stamps = part.timestamps.tolist()
        base = len(written)
        reported: dict[int, int] = {}
        if not self.exact:
            reported, self.last_cell = reported_records(offsets, writes, self.last_cell)
        with_provenance = spec.provenance
        hop = provenance.prefix(spec.source, self.tp[0]).replace(b"%", b"%%") + b"%d/%d"  # Provenance.encode()
        header = provenance.HEADER
        produce, exact, delivered = producer.produce, self.exact, self._delivered
        stop = None
        for i in writes:
            if i & 63 == 63:
                _confirm_lease(spec)  # W1 between confirmations: at most 64 records (a cached answer: a clock read)
            hdrs = headers[i]
            if with_provenance:
                hdrs = [*(hdrs or ()), (header, hop % (partition, offsets[i]))]
            k = reported.get(i)
            report = delivered if exact else None if k is None else functools.partial(delivered, index=base + k)
            try:
                # Positional: confluent-kafka parses keywords at about 1 µs a call (topic, value, key, partition,
                # on_delivery, callback, timestamp, headers).
                produce(remote, values[i], keys[i], partition, report, None, stamps[i], hdrs)  # type: ignore[arg-type]
            except (BufferError, KafkaException):
                try:  # the local queue is full, or the remote partition is new to the producer: wait
                    _produce(producer, remote, partition, keys[i], values[i], stamps[i], hdrs, report, spec,
                             self._queue_fills_unsent())
                except KafkaException as exc:
                    # A partition's records timed out: the transaction can only abort, and produce() refuses more.
                    if not spec.transactional or not (exc.args[0].txn_requires_abort()
                                                     or exc.args[0].code() == KafkaError._STATE):
                        raise
                    self.halted[0] = True
                    stop = bisect.bisect_left(writes, i)
                    break
        done = writes if stop is None else writes[:stop]
        self.reports += len(done) if exact else sum(1 for k in reported.values() if k < len(done))
        written.extend(offsets[i] for i in done)
        self.summary.records = len(written)
        if len(done) == len(offsets):
            self.summary.bytes += sum(map(len, filter(None, values))) + sum(map(len, filter(None, keys)))
        else:
            self.summary.bytes += sum(len(values[i] or b"") + len(keys[i] or b"") for i in done)
        # A delivery report has no headers: what an error message about a large reported record needs.
        for k, i in enumerate(done) if exact else ((k, i) for i, k in reported.items() if k < len(done)):
            if len(values[i] or b"") + len(keys[i] or b"") >= _LARGE_RECORD_BYTES:
                hdrs = headers[i]
                if with_provenance:
                    hdrs = [*(hdrs or ()), (header, hop % (partition, offsets[i]))]
                self.header_bytes[base + k] = sum(len(h) + len(v or b"") for h, v in hdrs or ())

    def _queue_fills_unsent(self) -> bool:
        """queue_fills_unsent for the task's producer: asked only when its queue is full."""
        settings = self.spec.producer_settings
        queue_kbytes = _whole(settings.get("queue.buffering.max.kbytes", _QUEUE_KBYTES), _QUEUE_KBYTES)
        return queue_fills_unsent(len(self.task_writes), queue_kbytes, _batch_size(settings))

    def failure(self) -> KafkaError | None:
        """Once flushed: why the target did not take the partition's records in time (it is stuck), or None (every
        report a success, or nothing to write); a record the target refused stops the flow (MirrorError)."""
        spec, tp, remote = self.spec, self.tp, self.remote
        if remote is None:
            return None  # a topic the pattern matched but the flow does not replicate, or a paused partition
        if self.failures and all(f[0].code() in _STUCK or f[0].code() in _PURGED for f in self.failures):
            # Purged: a transaction that failed (another partition's records timed out) drops what it still held.
            return next((f[0] for f in self.failures if f[0].code() in _STUCK), self.failures[0][0])
        if self.failures:
            # The broker refuses a whole batch for one oversized record: name the largest one.
            err, size, framed, index = max(self.failures, key=lambda f: f[2]) if any(
                f[0].code() == KafkaError.MSG_SIZE_TOO_LARGE for f in self.failures) else self.failures[0]
            raise MirrorError(_failure_message(spec, tp, remote, self.written[index], err, size, framed))
        if len(self.acked) != self.reports:
            raise MirrorError(f"flow {spec.flow}: {tp[0]}-{tp[1]}: {self.reports - len(self.acked)} "
                              "records have no delivery report after flush")
        return None

    @property
    def has_syncs(self) -> bool:
        return self.remote is not None and self.tp not in self.spec.unsynced and self.summary.upstream_next is not None

    def record_syncs(self, producer: Producer | None = None, whole: bool = True) -> None:
        """Once every record is acknowledged: the partition's position (transactional: in the task's transaction),
        through `producer` if given (a transactional one for an idempotent write's syncs). `whole`: the task read
        the partition's range to its end (not a Slice's position: only as far as its last record)."""
        if self.remote is None or (not whole and self.synced == len(self.written)):
            return
        self.synced = len(self.written)
        written, acked = self.written, self.acked
        firsts = self.summary.target_firsts
        # The first copy of each cell is reported (in exact mode, every one). Only the reports since the last fold:
        # a Slice's partition folded its whole batch's again each time (a lingering minute at 5,000 records/s spent
        # about a quarter of the worker's main thread sorting them). A partition's reports come in write order, so
        # a cell's first folded report is its first copy.
        for index in sorted(self.unfolded):
            firsts.setdefault(written[index] // digests.CELL, acked[index])
        self.unfolded.clear()
        if self.tp not in self.spec.unsynced:
            _confirm_lease(self.spec)
            ends = ((written[0], acked[0]), (written[-1], acked[len(written) - 1])) if written else None
            _record_syncs(self.spec, producer or self.producer, self.tp, self.summary, ends, self._sync_delivered,
                          self.downstream_next, whole)

    def stuck(self, err: KafkaError, causes: list[int]) -> _Summary:
        """Nothing of the partition's batch counts: no offset syncs (idempotent: what landed is written again
        when the driver resumes the partition, a replay; transactional: the transaction aborted). `causes`: how many
        more stuck partitions of the task get their cause looked up in the target's metadata."""
        cause = _leader(self.producer, self) if causes[0] > 0 else "cause not looked up (see the task's others)"
        causes[0] -= 1
        self.summary.stuck = f"{err.str()}; {cause}"
        self.summary.discard()
        return self.summary

    def aborted(self) -> _Summary:
        """Transactional: the task's transaction aborted for another partition; nothing of this one counts."""
        if self.remote is not None:
            self.summary.aborted = True
            self.summary.discard()
        return self.summary

    def _sync_delivered(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self.sync_failures.append(err.str())

    @property
    def unacknowledged(self) -> int:
        """Reported records not reported yet (with sparse reports, a partition waiting still shows)."""
        return self.reports - len(self.acked) - len(self.failures)


def reported_records(offsets: list[int], writes: list[int], last_cell: int | None) -> tuple[dict[int, int], int]:
    """Sparse delivery reports: of a run's records to write (`writes`: indexes into its ascending `offsets`), those
    that report, as {index: position in `writes`}, and the digest cell of the run's last one. They are the run's
    last record and the first written of each digest cell the run enters (not `last_cell`, the cell the
    partition's previous run ended in): so the partition's first record in the task, each cell's first copy (the
    digest units' target offsets) and the last (the offset syncs') are reported."""
    reported = {writes[-1]: len(writes) - 1}
    first_cell, end_cell = offsets[writes[0]] // digests.CELL, offsets[writes[-1]] // digests.CELL
    for cell in range(first_cell, end_cell + 1):
        k = bisect.bisect_left(writes, bisect.bisect_left(offsets, cell * digests.CELL))
        if cell != last_cell and k < len(writes) and offsets[writes[k]] // digests.CELL == cell:
            reported[writes[k]] = k
    return reported, end_cell


def _produce(producer: Producer, topic: str, partition: int, key: bytes | None, value: bytes | None,
             ts: int, headers: Any, delivered: Any, spec: WriterSpec | None = None, unsent_fill: bool = False) -> None:
    """`unsent_fill`: the queue may be full of batches none of which is due (queue_fills_unsent)."""
    deadline = 0.0
    while True:
        try:
            producer.produce(topic, value, key, partition=partition, timestamp=ts, headers=headers,
                             on_delivery=delivered)
            return
        except BufferError:  # the local queue is full: wait for the target to take more (or expire it)
            # Batches waiting out their linger (a transactional writer's is 5 s) are freed by no answer: a flush
            # sends them now. Only with no answer in 50 ms when few partitions share the queue: a flush makes every
            # queued batch due, and the broker thread spins while one waits behind its partition's request.
            if unsent_fill or producer.poll(0.05) == 0:
                producer.flush(0.05)
            if spec is not None:
                _confirm_lease(spec)  # the wait may be long: W1 before the record is handed over
        except KafkaException as exc:
            # A remote topic or partition the driver just created: this producer's metadata is older.
            if exc.args[0].code() not in (KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
                raise
            deadline = deadline or time.monotonic() + _METADATA_WAIT_S
            if time.monotonic() > deadline:
                # Not fatal: the restarted query's first batch finds out whether the remote topic was deleted.
                raise RuntimeError(f"{topic} partition {partition} does not exist on the target") from None
            producer.list_topics(topic, timeout=5)
            time.sleep(0.2)


def _record_syncs(spec: WriterSpec, producer: Producer, tp: TopicPartition, summary: _Summary,
                  ends: tuple[tuple[int, int], tuple[int, int]] | None,
                  delivered: Callable[[KafkaError | None, Any], None], previous: int, whole: bool = True) -> None:
    """`ends`: (upstream, downstream) of the first and the last record the task wrote, if any; `previous`: where
    the partition's next record was to land (its position's downstream_next, or -1); `whole`: the range was read
    to its end."""
    if summary.upstream_next is None:
        return
    if whole:  # transaction markers and aborted records after the last visible record are read too
        summary.upstream_next = max(summary.upstream_next, spec.ends.get(tp, -1))
    if ends and ends[0][1] < previous:
        # Not fatal, and before any offset sync moves backwards: the restarted query's first batch holds the topic.
        raise RuntimeError(f"flow {spec.flow}: {tp[0]}-{tp[1]}: copies landed at {ends[0][1]}, below the flow's next "
                           f"target offset {previous}: the remote topic was re-created or truncated")
    summary.downstream_next = ends[1][1] + 1 if ends else (previous if previous >= 0 else None)
    first = None
    if ends:
        summary.first, summary.last = ends
        summary.replay = spec.replay or _task_attempt() > 0
        first = first_anchor(ends[0], previous, summary.replay, spec.transactional)
    position = Position(tp[0], tp[1], summary.upstream_next, summary.downstream_next, first)
    _produce(producer, spec.syncs_topic, 0, position.key(), position.value(), int(time.time() * 1000), None, delivered)
    summary.syncs = 1


def first_anchor(first: tuple[int, int], previous: int, replay: bool, transactional: bool) -> Anchor:
    """The anchor of a batch's first copy (upstream, downstream) of a partition whose next copy was to land at
    `previous` (-1: none yet, so this is its origin). A barrier (translation never reads across it) after a replay,
    and, for idempotent writes, where something landed between `previous` and it: records of a writer that lost
    the lease but still sent a request it had built (flow_lease, W4). Transactional writes leave a commit marker at
    `previous`, so there a gap is normal."""
    landed_between = not transactional and 0 <= previous < first[1]
    return Anchor(first[0], first[1], barrier=replay or landed_between, origin=previous < 0)


def _confirm_lease(spec: WriterSpec) -> None:
    if spec.lease_member is not None:
        LeaseGuard.confirm(spec.flow, spec.lease_member, spec.target_admin_settings, spec.lease_own_ids)


def _task_attempt() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.attemptNumber() if ctx is not None else 0


def _flush(producer: Producer, spec: WriterSpec, writes: list[_PartitionWrite]) -> None:
    """Wait until the target acknowledged (or expired, W2) everything produced, confirming the lease every second
    (W1: a writer that lost it purges what it has not sent); every _FLUSH_LOG_S name the partitions still waiting
    and what the target's metadata says of them."""
    begun = logged = time.monotonic()
    held = unflushed_allowance([(w.summary.records, w.summary.bytes) for w in writes],
                               _batch_size(spec.producer_settings))
    while len(producer) > held and producer.poll(0.1) > 0:  # each answer is a delivery event: the queue moves
        _confirm_lease(spec)
    while producer.flush(1.0) > 0:
        _confirm_lease(spec)
        if time.monotonic() - logged < _FLUSH_LOG_S:
            continue
        logged = time.monotonic()
        waited = logged - begun
        stuck = [w for w in writes if w.unacknowledged > 0]
        named = "; ".join(f"{w.remote}-{w.tp[1]}: {w.unacknowledged} records, {_leader(producer, w)}"
                          for w in stuck[:5]) + (f"; and {len(stuck) - 5} more partitions" if len(stuck) > 5 else "")
        log.warning("flow %s: target %s has not acknowledged for %.0f s: %s; waiting",
                    spec.flow, spec.target, waited, named or "the offset syncs")


def unflushed_allowance(partitions: Sequence[tuple[int, int]], batch_size: int) -> int:
    """How many records a producer may still hold when a flush begins: a batch per partition written, each
    (records, bytes) so far giving its records per `batch_size` bytes (at least one).

    Invariant: a partition counts at most librdkafka's batch.num.messages default (10,000). Why wait at all: a flush
    makes every queued batch due at once, and an idempotent producer sends one request per partition at a time
    (5 messages in flight), so while the rest of a partition's queue waits for that answer its broker thread polls
    without a timeout. Below the allowance what is queued is about one batch a partition, sent in one round trip."""
    return sum(min(10_000, max(1, batch_size * records // bytes_)) if bytes_ > 0 else 1
               for records, bytes_ in partitions)


def queue_fills_unsent(partitions: int, queue_kbytes: int, batch_size: int) -> bool:
    """Whether a producer writing `partitions` partitions may find its queue (`queue_kbytes`) full while no batch
    in it is due: one batch filling (under `batch_size` bytes) per partition may take the whole queue.

    Invariant: true from queue_kbytes * 1024 / batch_size partitions on (64 with the writer's defaults), false below.
    A backlog over many partitions copies each partition's range at once and leaves its last batch filling: 1,200
    partitions of 1,667 records of 1 KiB left 0.68 MiB a partition lingering, and a 64 MiB queue full of them."""
    return partitions * batch_size >= queue_kbytes * 1024


def _batch_size(target_settings: Mapping[str, Any]) -> int:
    """The writer's batch.size, as producer_config gives it."""
    return _whole(target_settings.get("batch.size", _BATCH_SIZE), _BATCH_SIZE)


def _whole(value: Any, default: int) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return default


def _leader(producer: Producer, write: _PartitionWrite) -> str:
    """The cause as the target's metadata shows it: no leader, or the leader and its in-sync replicas."""
    try:
        topic = producer.list_topics(write.remote, timeout=5).topics.get(write.remote)
    except KafkaException as exc:
        return f"metadata unavailable ({exc.args[0].str()})"
    part = topic.partitions.get(write.tp[1]) if topic is not None and topic.error is None else None
    if part is None:
        return "the partition is unknown to the target"
    if part.leader < 0:
        return f"no leader ({part.error.str() if part.error else 'leader not available'})"
    return f"leader broker {part.leader}, in sync {len(part.isrs)} of {len(part.replicas)} replicas" + (
        f" ({part.error.str()})" if part.error else ": the leader is up, so a quota, a full disk or too few "
                                                     "in-sync replicas hold the writes (its log says which)")


_LARGE_RECORD_BYTES = 4096
# A record batch of one record: the batch header (61 bytes) and the record's own varint framing (at most ~40).
RECORD_FRAMING_BYTES = 128


def _failure_message(spec: WriterSpec, tp: TopicPartition, remote: str, offset: int, err: KafkaError,
                     size: int, framed: int) -> str:
    where = f"flow {spec.flow}: {spec.source} topic {tp[0]} partition {tp[1]} offset {offset}"
    if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        source_limit = _max_message_bytes(spec.source_admin_settings, tp[0])
        target_limit = _max_message_bytes(spec.target_admin_settings, remote)
        headers = " and the provenance header" if spec.provenance else ""
        with_headers = f" ({framed} with its headers{headers})" if framed > size else ""
        # The config sync copies the source's max.message.bytes: a remote topic raised by hand must be kept out.
        return (f"{where}: a record of {size} bytes{with_headers} is too large for "
                f"{spec.target} topic {remote} (max.message.bytes {target_limit} on {spec.target}, {source_limit} on "
                f"{spec.source}): set {remote}'s max.message.bytes to at least {framed + RECORD_FRAMING_BYTES} and "
                "add max.message.bytes to config.properties.exclude, so that the config sync keeps it")
    return f"{where}: {spec.target} topic {remote} refused the record: {err.str()}"


def _max_message_bytes(settings: Mapping[str, Any], topic: str) -> str:
    from confluent_kafka.admin import AdminClient, ConfigResource

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        admin = AdminClient(dict(settings))  # kept referenced until the answer: a dropped client aborts it
        entries = admin.describe_configs([resource])[resource].result(timeout=10)
        return str(entries["max.message.bytes"].value)
    except Exception:  # the message is already an error report; an unknown limit must not hide it
        return "unknown"


# Producers live as long as the Python worker (Spark reuses workers across tasks).
_PRODUCERS: dict[str, Producer] = {}
# Batching and compression: the target's `producer.*` settings win (a WAN link wants compression).
_BATCH_SIZE = 1_048_576
_QUEUE_KBYTES = 65_536  # librdkafka buffers up to 1 GiB by default; 64 MiB per worker bounds memory, produce() waits
_PRODUCER_TUNING = {"linger.ms": 5, "batch.size": _BATCH_SIZE, "compression.type": "none",
                    "queue.buffering.max.kbytes": _QUEUE_KBYTES}
# What the delivery guarantees rest on: never a target's setting.
_PRODUCER_FIXED = {"acks": "all", "enable.idempotence": True, "message.max.bytes": 100_000_000,
                   "message.timeout.ms": DELIVERY_TIMEOUT_MS}  # flow_lease W2
# The writer's own, or another name for one of the above (delivery.timeout.ms is message.timeout.ms).
_PRODUCER_DROPPED = {"delivery.timeout.ms", "transactional.id", "transaction.timeout.ms",
                     "max.in.flight.requests.per.connection", "retries"}


# A transactional writer's batch leaves when full, or at the commit's flush (each Slice: at most SLICE_S apart at a
# trickle), so a long linger costs its records no latency. A short one cost CPU: librdkafka lets an idempotent
# partition have 5 messages (so one request) in flight, and while it is, a next batch past its linger made the broker
# thread poll without a timeout until the answer came (17,559 polls in 1 s in the plain benchmark; with 1 s, 259).
# 1 s was not enough: a backlog's queue (64 MiB a worker, about a second's copy) ages past it behind those requests.
_TRANSACTIONAL_LINGER_MS = 5000


def producer_config(target_settings: Mapping[str, Any], transactional_id: str | None = None) -> dict[str, Any]:
    """A writer producer's librdkafka settings: the target's producer settings over the writer's batching defaults,
    under what delivery rests on (acks, idempotence, the W2 timeout) and, given one, the transactional id (then
    lingering at least _TRANSACTIONAL_LINGER_MS)."""
    tuned = {k: v for k, v in target_settings.items() if k not in _PRODUCER_DROPPED}
    transactional = {} if transactional_id is None else {
        "transactional.id": transactional_id, "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
        "linger.ms": max(float(tuned.get("linger.ms", 0)), _TRANSACTIONAL_LINGER_MS)}
    return {**_PRODUCER_TUNING, **tuned, **_PRODUCER_FIXED, **transactional}


def check_producer_tuning(target_settings: Mapping[str, Any], target: str) -> None:
    """Raise ConfigError for a batching setting librdkafka would refuse in the writer (Java allows batch.size 0)."""
    for key, low, high in (("batch.size", 1, None), ("linger.ms", 0, DELIVERY_TIMEOUT_MS - 1)):
        if key not in target_settings:
            continue
        try:
            value = float(target_settings[key])
        except (TypeError, ValueError):
            value = float("nan")
        if not (value >= low and (high is None or value <= high)):  # NaN fails both
            bound = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise ConfigError(f"{target_settings[key]!r}: the stream's writer needs {bound}",
                              key=f"{target}.producer.{key}")


def _idempotent_producer(spec: WriterSpec) -> Producer:
    key = f"{spec.flow}/idempotent"
    producer = _PRODUCERS.get(key)
    if producer is None:
        producer = Producer(producer_config(spec.producer_settings))
        _PRODUCERS[key] = producer
    return producer


def transactional_id(source: str, target: str, slot: int) -> str:
    """Stable per flow and task slot, so that any two writers of one slot fence each other."""
    return f"mirrorflow-{source}-{target}.writer-{slot}"


def driver_transactional_id(source: str, target: str) -> str:
    """The stream driver's own writes (anchors, losses, releases): fenced by the next holder of the lease."""
    return f"mirrorflow-{source}-{target}.driver"


def partition_transactional_id(source: str, target: str, tp: TopicPartition) -> str:
    """The id of versions before task slots: one per flow and source partition (fenced once, after an upgrade)."""
    return f"mirrorflow-{source}-{target}-{tp[0]}-{tp[1]}"


# Which producer of this host last initialised a transactional id: "pid:token", one small file per id. A worker
# keeps its producer for the next task of the same slot only while the mark is still its own (Spark may run that
# task in another worker, whose init fences this producer) and the driver has not fenced the ids since.
_MARKS = Path(tempfile.gettempdir()) / f"mirrorflow-writers-{os.getuid()}"
_LINGER_ENDED = "linger-ended"  # in a batch's claims: the driver ended its linger (end_linger)
_TOKENS: dict[str, tuple[str, int]] = {}  # transactional id -> (this worker's mark, the driver's fencing it followed)


_SEAT: list[int] = []  # the writer seat the worker's running task holds (writer_seat), if any
_PREFERRED_SEAT: dict[str, int] = {}  # flow -> the seat this worker wrote from last (its producer is kept)


def claim_seat(claims: Path, seats: int, task: int, attempt: int, preferred: int | None) -> int:
    """The seat task `task` copies from in a batch whose claims are files in `claims`: one per seat, created once
    (O_EXCL) and holding the index of the task that took it. A first attempt takes `preferred` if still free, else
    the lowest free one; a retried attempt takes the seat its first attempt took (or, if that one died before
    claiming, a free one).
    Invariant: a batch runs one task per seat, each claiming one seat, so every seat is claimed by exactly one
    task and its ranges are copied exactly once, whichever worker runs which task."""
    claims.mkdir(parents=True, exist_ok=True)
    if attempt > 0:
        for claim in claims.glob("seat-*"):
            with contextlib.suppress(OSError, ValueError):
                if int(claim.read_text()) == task:
                    return int(claim.name.removeprefix("seat-"))
    order = [preferred] if preferred is not None and 0 <= preferred < seats else []
    for seat in order + [s for s in range(seats) if s != preferred]:
        try:
            fd = os.open(claims / f"seat-{seat}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(task))
        return seat
    raise RuntimeError(f"every one of the batch's {seats} writer seats is taken: more tasks than seats")


def seat_claims(spec: WriterSpec) -> Path | None:
    """Where the batch's seat claims are (a local master's stream), or None: tasks copy their own slots."""
    return None if spec.batch_key is None else _MARKS / f"seats-{spec.batch_key}"


def end_linger(spec: WriterSpec) -> bool:
    """The driver, wanting the batch over soon (a stop, a new query): its lingering tasks end as if their deadline
    had passed (copier C6) at their next look. True if they can be told: a local master's workers see the driver's
    files; a cluster's tasks linger to their deadline."""
    claims = seat_claims(spec)
    if claims is None:
        return False
    with contextlib.suppress(FileNotFoundError):  # the batch ended meanwhile and its claims were dropped
        claims.mkdir(parents=True, exist_ok=True)
        (claims / _LINGER_ENDED).touch()
    return True


def drop_seat_claims(spec: WriterSpec) -> None:
    """The driver, once the batch's tasks returned (or failed): its claims and its linger's end."""
    claims = seat_claims(spec)
    if claims is not None:
        shutil.rmtree(claims, ignore_errors=True)


@contextlib.contextmanager
def writer_seat(spec: WriterSpec, seats: int, own: list[int]) -> Iterator[list[int]]:
    """The seat (`slots` index) the running task copies and writes from; the seat, not the task slot, names the
    transactional id. Spark hands a batch's task slots to whichever of its idle Python workers comes first, so
    slots changed workers every few batches: the worker re-initialised the slot's producer (about 450 ms, in a
    task of 100 ms at 5,000 records/s), fencing the other's, and re-assigned its consumer (the prefetch lost). A
    worker takes the seat it had, so it keeps both. Only a local master's stream (`spec.batch_key`; the claims
    are files every worker sees): elsewhere a task copies and writes from its `own` slots (one, in a stream)."""
    claims = seat_claims(spec)
    if claims is None:
        yield own
        return
    if len(own) != 1:
        raise RuntimeError(f"flow {spec.flow}: a task of the batch holds {len(own)} slots, not one")
    seat = claim_seat(claims, seats, own[0], _task_attempt(), _PREFERRED_SEAT.get(spec.flow))
    _SEAT[:] = [seat]
    _PREFERRED_SEAT[spec.flow] = seat
    try:
        yield [seat]
    finally:
        _SEAT.clear()


def _writer_index() -> int:
    """The index of the running task's transactional id: its writer seat, else its task slot."""
    return _SEAT[0] if _SEAT else _task_slot()


def _transactional_producer(spec: WriterSpec) -> tuple[Producer, bool]:
    """The transactional producer of the task's writer seat (else its slot), and whether an earlier task of this
    worker initialised it.

    A retried task (attempt > 0) always initialises afresh: that aborts what the failed attempt left open.
    """
    tid = transactional_id(spec.source, spec.target, _writer_index())
    mark = _MARKS / hashlib.sha1(tid.encode()).hexdigest()
    kept = _PRODUCERS.get(tid)
    token, fenced = _TOKENS.get(tid, (None, None))
    if (kept is not None and spec.keep_producers and _task_attempt() == 0 and fenced == spec.fenced
            and _read_mark(mark) == token):
        return kept, True
    _discard(spec, tid)
    _confirm_lease(spec)  # W1 before an id is initialised: a zombie must never fence the lease's holder
    producer = Producer(producer_config(spec.producer_settings, tid))
    producer.init_transactions(60)
    token = f"{os.getpid()}:{uuid.uuid4().hex}"
    _PRODUCERS[tid] = producer
    try:
        _MARKS.mkdir(exist_ok=True)
        staged = mark.with_suffix(f".{os.getpid()}")
        staged.write_text(token)
        staged.replace(mark)
        _TOKENS[tid] = (token, spec.fenced)
    except OSError:
        pass  # no mark, so the producer is not kept: the slot's next task initialises a new one
    return producer, False


def _read_mark(mark: Path) -> str | None:
    try:
        return mark.read_text()
    except OSError:
        return None


def _discard(spec: WriterSpec, tid: str | None = None) -> None:
    """Forget this worker's producer of the task slot (transactional): the slot's next task initialises a new one."""
    if spec.transactional or spec.fence_syncs:
        tid = tid or transactional_id(spec.source, spec.target, _writer_index())
        _PRODUCERS.pop(tid, None)
        _TOKENS.pop(tid, None)


def _task_slot() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


TRANSACTION_TIMEOUT_MS = 600_000
_FENCING_THREADS = 32


def fence(flow: str, target: str, producer_settings: Mapping[str, Any], transactional_ids: list[str],
          keep_alive: Callable[[], object] = lambda: True, threads: int = _FENCING_THREADS) -> None:
    """Abort every transaction a crashed instance of the flow left open, and fence its writers.

    Until then the target's last stable offset stays behind those transactions, and the offset syncs
    committed after them by other tasks would be invisible to a read_committed reader. The ids are
    initialised concurrently; `keep_alive` runs every half second meanwhile (the driver serves its lease).
    """
    def init(tid: str) -> None:
        producer = Producer(producer_config(producer_settings, tid))
        try:
            producer.init_transactions(60)
        except KafkaException as exc:
            raise OperationalError(f"flow {flow}: cannot fence writer {tid} on {target}: {exc.args[0].str()}") from None

    begun = time.monotonic()
    pool = ThreadPoolExecutor(threads, thread_name_prefix="mirrorflow-fence")
    try:
        pending = {pool.submit(init, tid) for tid in transactional_ids}
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_EXCEPTION)
            for future in done:
                future.result()  # the first failure, as it is
            if keep_alive() is False:
                raise OperationalError(f"flow {flow}: the lease was lost while fencing; nothing more is fenced")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # after a failure, the ids not yet begun are not tried
    log.info("flow %s: fenced %d transactional writers in %.1f s", flow, len(transactional_ids),
             time.monotonic() - begun)


def _committed_positions(spec: WriterSpec) -> Mapping[TopicPartition, Position]:
    """After a task retry, a previous attempt may have committed: ask the target (once a task), not the driver."""
    if _task_attempt() == 0:
        return {}
    return offset_sync_log.read(spec.consumer_settings, spec.syncs_topic).positions


