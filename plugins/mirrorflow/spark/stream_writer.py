"""The executor side of the stream: writes one task's records to the target.

The copier (spark/copier: the stream's micro-batches, a backfill's ranges) hands it runs of one source partition's
records, in offset order. This module produces those records with confluent-kafka (partition, key, value, headers
and timestamp kept; a provenance header appended), waits until the target acknowledged every one (a delivery
report each, or under transactions the commit: see _PartitionWrite), then records each partition's position in
the offset syncs (with the batch's first record, so a reader sees a replay at once); the driver turns the
reports into anchors. It yields one PartitionReport per source partition for the driver's progress and metrics.
What it writes of a partition, the position it records and how a task's writes end are rules/partition_write's
decisions (PW1-PW8); its producers are spark/writer_producers', its writer seats spark/writer_seats', their
settings and transactional ids kafka/writers'.

Delivery (`spec.transactional`: exactly-once, and at-least-once unless `mirrorflow.records.fenced = false`):
  transactional  a task's records and its partitions' offset syncs are committed in one transaction (one per
                 Slice while the task lingers: copier C6).
  idempotent     idempotent producer, acks=all; syncs are written only after the data is acknowledged, and
                 commit in a transaction of the task slot's id (below), which fences them (flow_lease, W4).
The stream's transactional producers: one per writer seat or task slot (a retried task or a second instance fences
the earlier writer of that slot), kept by the Python worker across batches. An at-least-once backfill writes its
syncs with the idempotent producer.
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
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, KafkaException, Producer

from mirrorflow.errors import MirrorError, RetryableError
from mirrorflow.kafka import offset_sync_log, writers
from mirrorflow.kafka.flow_lease import DELIVERY_TIMEOUT_MS, LeaseSuperseded
from mirrorflow.kafka.write_failures import PURGED, STUCK, partition_state, refused_message
from mirrorflow.rules import digests, partition_write, provenance
from mirrorflow.rules.offset_syncs import Position
from mirrorflow.rules.partition_report import PartitionReport
from mirrorflow.rules.partition_write import (
    copies_moved_back,
    first_anchor,
    next_position,
    queue_fills_unsent,
    records_to_write,
    reported_records,
    unflushed_allowance,
)
from mirrorflow.spark.partition_tally import PartitionTally
from mirrorflow.spark.writer_producers import (
    confirm_lease,
    discard,
    idempotent_producer,
    transactional_producer,
)
from mirrorflow.spark.writer_seats import task_attempt
from mirrorflow.spark.writer_spec import Gap, PassedOver, Run, Slice, WriterSpec

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_CAUSES_PER_TASK = 3  # stuck partitions of a task whose cause is looked up in the target's metadata
_FLUSH_LOG_S = 30.0
_METADATA_WAIT_S = 15.0  # remote topics are confirmed visible before the first write: this is a margin


def mirror_runs(spec: WriterSpec, runs: Iterator[tuple[TopicPartition, Run | PassedOver | Gap | Slice]],
                topics: AbstractSet[str]) -> Iterator[PartitionReport]:
    """Mirror a task's runs of records (a partition's runs in offset order) to the remote `topics` (those of its
    ranges), then yield one summary row per source partition."""
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
                        producer, kept = transactional_producer(spec, topics)
                        producer.begin_transaction()
                        committed = _committed_positions(spec)
                    else:
                        producer = idempotent_producer(spec, topics)
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
        discard(spec)
        raise RetryableError(str(exc)) from None  # the driver finds the lease lost and stops (or regains it)
    except KafkaException as exc:
        discard(spec)  # its transaction state is unknown: the task that next has the slot starts afresh
        kept = kept or any(s[1] for s in syncs)
        err: KafkaError = exc.args[0]
        if err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED):
            if kept:  # Not fatal: a worker on another host had the slot since (local workers leave a mark).
                raise RetryableError(f"flow {spec.flow}: the task slot's transactional producer was fenced by another "
                                     f"worker of this flow since its last batch: {err.str()}") from None
            raise MirrorError(f"flow {spec.flow}: fenced: another writer initialised this flow's transactional ids "
                              f"on {spec.target} (a second instance of the flow, or a task of a stopped one): "
                              f"{err.str()}") from None
        if err.code() == KafkaError.INVALID_PRODUCER_EPOCH:
            # Not fatal: the coordinator aborted a transaction that outlived transaction.timeout.ms; the
            # restarted task's fresh producer resumes from the committed position.
            raise RetryableError(f"flow {spec.flow}: {spec.target} aborted a transaction (it outlived transaction."
                                 f"timeout.ms = {writers.TRANSACTION_TIMEOUT_MS} ms?): {err.str()}") from None
        raise
    except BaseException:
        discard(spec)
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
        syncs.append(transactional_producer(spec, frozenset()))
        syncs_producer = syncs[0][0]
        syncs_producer.begin_transaction()
    for w in settled:
        w.record_syncs(syncs_producer)
    _flush(syncs_producer, spec, settled)
    unsynced = next((w for w in settled if w.sync_failures), None)
    if unsynced is not None:  # not fatal: the batch is written again (a replay) and its syncs with it
        raise RetryableError(f"flow {spec.flow}: {unsynced.tp[0]}-{unsynced.tp[1]}: the offset syncs were not "
                             f"acknowledged by {spec.target}: {unsynced.sync_failures[0]}")
    if syncs_producer is not producer:
        confirm_lease(spec)
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
    confirm_lease(spec)
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
    outcome = partition_write.task_outcome({tp: None if err is None else err.code() for tp, err in errors.items()},
                                           purged=PURGED, halted=halted)
    if outcome.action == "retry":  # Not fatal: the query restarts, fences, resumes from the positions.
        why = next((err for err in errors.values() if err is not None), "no record of it was refused or timed out")
        raise RetryableError(f"flow {spec.flow}: a transaction failed on {spec.target}: {why}")
    if outcome.action == "commit":
        for w in writes:
            w.record_syncs()
        confirm_lease(spec)
        try:
            producer.commit_transaction()  # flushes the syncs with the records
            return [w.summary.report() for w in writes]
        except KafkaException as exc:
            if exc.args[0].code() not in STUCK or not exc.args[0].txn_requires_abort():
                raise
            # Every record was acknowledged: the offset syncs or the commit itself were not. Not fatal: the query
            # restarts, fences (aborting this transaction) and resumes from the committed positions.
            raise RetryableError(f"flow {spec.flow}: {spec.target} did not commit a transaction in time: "
                                 f"{exc.args[0].str()}") from None
    try:
        producer.abort_transaction(DELIVERY_TIMEOUT_MS / 1000)
    except KafkaException as exc:
        # The target did not finish the abort in time (its markers to every partition of the transaction). Not
        # fatal: the query restarts and its fencing waits the abort out; the partitions resume from their positions.
        raise RetryableError(f"flow {spec.flow}: {spec.target} did not abort a transaction in time: "
                             f"{exc.args[0].str()}") from None
    return [(w.stuck(err, causes) if w.tp in outcome.stuck and (err := errors[w.tp]) is not None
             else w.aborted()).report() for w in writes]


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
        self.summary = PartitionTally(tp)
        self.remote = None if tp in spec.paused else spec.remote.get(tp[0])
        # The partition's position (None: nothing on the target yet), and where its next copy lands, as the syncs say.
        self.upstream_next: int | None = spec.upstream_next.get(tp)
        self.downstream_next: int | None = spec.downstream_next.get(tp)
        if committed is not None and tp not in spec.unsynced and (
                self.upstream_next is None or committed.upstream_next > self.upstream_next):
            self.upstream_next, self.downstream_next = committed.upstream_next, committed.downstream_next
        self.exact = not spec.transactional or spec.exact_reports or task_attempt() > 0
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
        confirm_lease(spec)
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
        plan = records_to_write(offsets, self.upstream_next, spec.copied.get(self.tp, ()), part.headers,
                                lambda h: provenance.returns_to(h, spec.target, remote))
        writes, refused = plan.writes, plan.refused
        summary.skipped += plan.skipped
        if refused:
            if summary.first_refused is None:
                summary.first_refused = offsets[refused[0]]
            summary.refused += len(refused)
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
                confirm_lease(spec)  # W1 between confirmations: at most 64 records (a cached answer: a clock read)
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
        return queue_fills_unsent(len(self.task_writes), writers.queue_kbytes(settings), writers.batch_size(settings))

    def failure(self) -> KafkaError | None:
        """Once flushed: why the target did not take the partition's records in time (it is stuck), or None (every
        report a success, or nothing to write); a record the target refused stops the flow (MirrorError)."""
        spec, tp, remote = self.spec, self.tp, self.remote
        if remote is None:
            return None  # a topic the pattern matched but the flow does not replicate, or a paused partition
        failure = partition_write.write_failure(
            [f[0].code() for f in self.failures], [f[2] for f in self.failures], stuck=STUCK, purged=PURGED,
            too_large=KafkaError.MSG_SIZE_TOO_LARGE)
        if failure is not None and not failure.refused:
            return self.failures[failure.index][0]
        if failure is not None:
            err, size, framed, index = self.failures[failure.index]
            where = f"flow {spec.flow}: {spec.source} topic {tp[0]} partition {tp[1]} offset {self.written[index]}"
            raise MirrorError(refused_message(
                where, err, size, framed, source=spec.source, target=spec.target, topic=tp[0], remote=remote,
                provenance=spec.provenance, source_admin_settings=spec.source_admin_settings,
                target_admin_settings=spec.target_admin_settings))
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
            confirm_lease(self.spec)
            ends = ((written[0], acked[0]), (written[-1], acked[len(written) - 1])) if written else None
            _record_syncs(self.spec, producer or self.producer, self.tp, self.summary, ends, self._sync_delivered,
                          self.downstream_next, whole)

    def stuck(self, err: KafkaError, causes: list[int]) -> PartitionTally:
        """Nothing of the partition's batch counts: no offset syncs (idempotent: what landed is written again
        when the driver resumes the partition, a replay; transactional: the transaction aborted). `causes`: how many
        more stuck partitions of the task get their cause looked up in the target's metadata."""
        cause = self.cause(self.producer) if causes[0] > 0 else "cause not looked up (see the task's others)"
        causes[0] -= 1
        self.summary.stuck = f"{err.str()}; {cause}"
        self.summary.discard()
        return self.summary

    def aborted(self) -> PartitionTally:
        """Transactional: the task's transaction aborted for another partition; nothing of this one counts."""
        if self.remote is not None:
            self.summary.aborted = True
            self.summary.discard()
        return self.summary

    def cause(self, producer: Producer) -> str:
        """What the target's metadata says of the remote partition (it holds records back)."""
        return partition_state(producer, self.remote or self.tp[0], self.tp[1])

    def _sync_delivered(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self.sync_failures.append(err.str())

    @property
    def unacknowledged(self) -> int:
        """Reported records not reported yet (with sparse reports, a partition waiting still shows)."""
        return self.reports - len(self.acked) - len(self.failures)


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
                confirm_lease(spec)  # the wait may be long: W1 before the record is handed over
        except KafkaException as exc:
            # A remote topic or partition the driver just created: this producer's metadata is older.
            if exc.args[0].code() not in (KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
                raise
            deadline = deadline or time.monotonic() + _METADATA_WAIT_S
            if time.monotonic() > deadline:
                # Not fatal: the restarted query's first batch finds out whether the remote topic was deleted.
                raise RetryableError(f"{topic} partition {partition} does not exist on the target") from None
            producer.list_topics(topic, timeout=5)
            time.sleep(0.2)


def _record_syncs(spec: WriterSpec, producer: Producer, tp: TopicPartition, summary: PartitionTally,
                  ends: tuple[tuple[int, int], tuple[int, int]] | None,
                  delivered: Callable[[KafkaError | None, Any], None], previous: int | None,
                  whole: bool = True) -> None:
    """`ends`: (upstream, downstream) of the first and the last record the task wrote, if any; `previous`: where
    the partition's next record was to land (its position's downstream_next; None: none yet); `whole`: the range
    was read to its end (partition_write PW2)."""
    if summary.upstream_next is None:
        return
    if ends and copies_moved_back(ends[0][1], previous):
        # Not fatal, and before any offset sync moves backwards: the restarted query's first batch holds the topic.
        raise RetryableError(f"flow {spec.flow}: {tp[0]}-{tp[1]}: copies landed at {ends[0][1]}, below the flow's next "
                             f"target offset {previous}: the remote topic was re-created or truncated")
    summary.upstream_next, summary.downstream_next = next_position(
        summary.upstream_next, spec.ends.get(tp), whole, ends[1][1] if ends else None, previous)
    first = None
    if ends:
        summary.first, summary.last = ends
        summary.replay = spec.replay or task_attempt() > 0
        first = first_anchor(ends[0], previous, summary.replay, spec.transactional)
    position = Position(tp[0], tp[1], summary.upstream_next, summary.downstream_next, first)
    _produce(producer, spec.syncs_topic, 0, position.key(), position.value(), int(time.time() * 1000), None, delivered)
    summary.syncs = 1


def _flush(producer: Producer, spec: WriterSpec, writes: list[_PartitionWrite]) -> None:
    """Wait until the target acknowledged (or expired, W2) everything produced, confirming the lease every second
    (W1: a writer that lost it purges what it has not sent); every _FLUSH_LOG_S name the partitions still waiting
    and what the target's metadata says of them."""
    begun = logged = time.monotonic()
    held = unflushed_allowance([(w.summary.records, w.summary.bytes) for w in writes],
                               writers.batch_size(spec.producer_settings))
    while len(producer) > held and producer.poll(0.1) > 0:  # each answer is a delivery event: the queue moves
        confirm_lease(spec)
    while producer.flush(1.0) > 0:
        confirm_lease(spec)
        if time.monotonic() - logged < _FLUSH_LOG_S:
            continue
        logged = time.monotonic()
        waited = logged - begun
        stuck = [w for w in writes if w.unacknowledged > 0]
        named = "; ".join(f"{w.remote}-{w.tp[1]}: {w.unacknowledged} records, {w.cause(producer)}"
                          for w in stuck[:5]) + (f"; and {len(stuck) - 5} more partitions" if len(stuck) > 5 else "")
        log.warning("flow %s: target %s has not acknowledged for %.0f s: %s; waiting",
                    spec.flow, spec.target, waited, named or "the offset syncs")


_LARGE_RECORD_BYTES = 4096


def _committed_positions(spec: WriterSpec) -> Mapping[TopicPartition, Position]:
    """After a task retry, a previous attempt may have committed: ask the target (once a task), not the driver."""
    if task_attempt() == 0:
        return {}
    return offset_sync_log.read(spec.consumer_settings, spec.syncs_topic).positions


