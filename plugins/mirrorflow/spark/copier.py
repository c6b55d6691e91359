"""The stream's data path on the executors: a task slot's source ranges copied consumer to producer in librdkafka.

Spark plans the micro-batches (spark/range_source: the end offsets, in its offset log); the driver cuts each into
ranges per task slot (rules/batch_plan) and runs `copy_slots` as a Python RDD job, one task per slot. It reads
each range with a librdkafka consumer kept by the Python worker (connections, metadata and fetch sessions survive
from one micro-batch to the next) and hands runs of records to the stream writer, which produces them and yields
one summary row per source partition. No record crosses into the JVM. Where a read of a range stands and when it
closes are rules/range_cursor's decisions (RC1-RC5).

  C1  A range is read from `from` to `until` (exclusive) and no further: records at or past `until` are held
      for the next batch (C4), never handed to the writer of this one; a lingering batch's `until` is where its
      deadline found the partition (C6).
  C2  Records below the partition's log start are gone: the read goes on at the log start; `auto.offset.reset =
      error` makes librdkafka say so instead of jumping to the end. A gap at a range's start shows in the run's
      first offset, one inside a range (retention while it is read) as a Gap in the summary: the driver records
      both as lost.
  C3  A range that makes no progress for STALL_S fails the task (the query restarts from its checkpoint),
      naming the partitions.
  C4  The partitions a task read stay assigned to its worker's consumer (unless they are more than KEPT_MAX: then
      none do), which goes on prefetching them; the next task of that worker keeps a partition only if its next
      record (held, or to be fetched) is exactly where its new range starts, and assigns every other one afresh at
      its range's start. A worker that has run no task for READER_IDLE_S lets all of them go (C1 from there on).
  C5  An end-of-partition event at or past a range's end closes it: every record below was dequeued (a range of
      transaction markers only has no record to wait for).
  C6  A batch that lingers (`spec.linger_until`, a wall-clock deadline) reads every partition of its ranges on
      past the range's end until the deadline, so that records arriving meanwhile are copied without waiting for
      the next batch; at the deadline each partition ends where it got to, or at its range's end if that is
      further (C1 from there on). A task of a full batch (`spec.behind`) ends a partition past its range at its
      end as it finds it, waiting for no record. The summary's `upstream_next` says how far it got; the driver
      starts the partition's next range there. While lingering, a task that has read its ranges makes its copies
      visible (a Slice: a transaction's commit) at most SLICE_S after it read what there is, and at least every
      SLICE_BEHIND_S while records come faster than it reads them; in a full batch (a backlog) its Slices are at
      least SLICE_BEHIND_S apart. The driver may end a batch's linger before its deadline
      (writer_seats.end_linger): the same end, sooner.
Bound: one consumer per flow per Python worker; its prefetch queue is librdkafka's `queued.max.messages.kbytes`;
records dequeued past the ranges' ends are held up to as many bytes as that queue may take: a partition whose
records would take the worker past that is released (unassigned, what it held dropped), and the task that next reads
it assigns it afresh at its range's start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from mirrorflow.errors import MirrorError, RetryableError
from mirrorflow.kafka import readers
from mirrorflow.rules import range_cursor, record_digest
from mirrorflow.rules.batch_plan import Range
from mirrorflow.rules.partition_report import PartitionReport
from mirrorflow.rules.range_cursor import OPEN
from mirrorflow.spark.stream_writer import mirror_runs
from mirrorflow.spark.writer_seats import lingers, writer_seat
from mirrorflow.spark.writer_spec import Gap, PassedOver, Run, Slice, WriterSpec

log = logging.getLogger(__name__)

STALL_S = 120.0  # how long a read may bring nothing before the task gives up (Spark's spark.network.timeout)
_CONSUME_MAX = 10_000  # records per consume() call: the run the writer takes at once
# consume() waits this long to fill its batch: a nearly-done range must not wait, and at a trickle each Slice's
# cycle begins with this wait (10 ms of a 22 ms cycle at 5,000 records/s).
_CONSUME_WAIT_S = 0.003
_NO_PARTITION = ("", -1)  # a Slice's: it is the task's
# C6: a lingering task that has read what there is makes its copies visible at least this often. A Slice's flush and
# commit take about 10 ms for 6 partitions (librdkafka sends a request per partition, and the broker checks each
# partition's first write of a transaction with the coordinator), so Slices follow one another about every 16 ms at a
# trickle: at 50 ms the bench's p50 / p99 at 5,000 records/s were 67 / 120 ms.
SLICE_S = 0.005
# C6: a full batch's Slices at least this far apart: its records waited for a backlog already. Across a 50 ms link a
# read finds less than it asks for at once whenever the link is slower than the copy, so without this floor a
# backlog was committed every 50 ms, and the bench's wan mode beside the target copied at about half the rate.
SLICE_BEHIND_S = 1.0
_LEADER_REQUESTS_MAX, _LEADER_WAIT_S = 8, 5.0  # new topics asked for one by one, more in one request for all
# C4 keeps a task's partitions assigned only up to this many. A broker holds each fetch that waits for records
# (fetch.min.bytes, fetch.wait.max.ms) on a watch list of every partition in it, and drops finished ones only after
# about a thousand have finished (`fetch.purgatory.purge.interval.requests`): idle consumers of 12,000 partitions
# each filled a 1 GiB source broker's heap within minutes.
KEPT_MAX = 1_000

# C4: an idle worker's consumer goes on fetching what it keeps assigned, every fetch.wait.max.ms (5 ms for a few
# partitions): idle flows' workers took 0.05-0.08 of a core here, and their source brokers as much again. After this
# long without a task the partitions go; the next task assigns them afresh (a fetch's round trip more).
READER_IDLE_S = 5.0

_READERS: dict[str, _Reader] = {}  # flow -> this worker's reader (bound: the flows this worker copies)
cache_stats = {"hits": 0, "misses": 0}  # this worker's consumer cache (misses reach the driver: consumer_inits)


def copy_slots(spec: WriterSpec, slots: Sequence[Sequence[Range]], own: Iterable[int]) -> Iterator[PartitionReport]:
    """mapPartitions body over `sparkContext.range(len(slots))`, one slot index per task: copy that slot's ranges
    (a local stream's: the ranges of the writer seat the task's worker takes, writer_seats.writer_seat), then
    yield the writer's reports (rules/partition_report), one per source partition. A Python RDD job, not a
    DataFrame one: no plan to analyse and no Arrow between the JVM and the worker (a trivial job: 23 ms against 63
    here)."""
    uses = dict(cache_stats)
    with _readers_busy(), _without_cycle_collection(), writer_seat(spec, len(slots), list(own)) as seats:
        ranges = [r for seat in seats for r in slots[seat]]
        topics = {spec.remote[r.topic] for r in ranges if r.topic in spec.remote}
        summaries = list(mirror_runs(spec, _runs(spec, ranges), topics))
    if summaries:  # the task's first report says whether it used its worker's consumer and whether it built it (T4)
        summaries[0] = dataclasses.replace(summaries[0], consumer_inits=cache_stats["misses"] - uses["misses"],
                                           consumer_uses=sum(cache_stats.values()) - sum(uses.values()))
    yield from summaries


class _IdleReaders:
    """C4's idle release: a thread of the worker's own lets every reader's partitions go once no task has run
    for READER_IDLE_S. Tasks and the thread take turns under one lock, held by the thread only while it releases."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.busy = 0  # tasks running in this worker (one at a time in a PySpark worker)
        self.ended = time.monotonic()
        self.thread: threading.Thread | None = None
        self.stopped = threading.Event()

    @contextlib.contextmanager
    def task(self) -> Iterator[None]:
        with self.lock:
            self.busy += 1
            if self.thread is None:
                self.thread = threading.Thread(target=self._watch, name="mirrorflow-idle-readers", daemon=True)
                self.thread.start()
        try:
            yield
        finally:
            with self.lock:
                self.busy -= 1
                self.ended = time.monotonic()

    def _watch(self) -> None:
        while not self.stopped.wait(READER_IDLE_S / 5):
            with self.lock:
                if not self.busy and time.monotonic() - self.ended >= READER_IDLE_S:
                    release_idle_readers()


_idle = _IdleReaders()
_readers_busy = _idle.task


def release_idle_readers() -> None:
    """Every reader of this worker lets its partitions go (C4); a reader it cannot release is dropped."""
    for flow, reader in list(_READERS.items()):
        if reader.position:
            try:
                reader.release(list(reader.position))
            except (KafkaException, RuntimeError):
                _drop_reader(flow)


_frozen: list[bool] = []  # this worker's objects are frozen out of the cycle collector (asked once)


@contextlib.contextmanager
def _without_cycle_collection() -> Iterator[None]:
    """Python's cycle collector off while a task copies: every record is a few container objects (a Message, its
    headers) that form no cycle, and the collector's passes over the hundreds of thousands alive in a task took a
    fifth of the worker's CPU (py-spy, plain bench). Reference counting frees them; what the worker had before its
    first task (Spark's, pyarrow's) is frozen out of the collector's passes for good. Whether it is frozen is asked
    once per worker: `gc.get_freeze_count()` walks every frozen object (tens of ms a call in a worker)."""
    if not _frozen:
        if gc.get_freeze_count() == 0:
            gc.freeze()
        _frozen.append(True)
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Reader:
    """A worker's source consumer and what it keeps between tasks (C4): the partitions it read stay assigned, so
    that a next batch continuing a partition finds its records fetched already."""

    def __init__(self, consumer: Consumer, epoch: int, fetch_wait_ms: int, held_max_bytes: int) -> None:
        self.consumer = consumer
        self.epoch = epoch  # the driver's fencing it serves: a new query (restart, new checkpoint) starts afresh
        self.fetch_wait_ms = fetch_wait_ms
        # Bound: the partitions of this worker's last ranges. Each one's offset after the last record dequeued.
        self.position: dict[tuple[str, int], int] = {}
        # Dequeued past a range's end, and their values' bytes. Bound: held_max_bytes in all.
        self.held: dict[tuple[str, int], tuple[list[Message], int]] = {}
        self.held_bytes = 0
        self.held_max_bytes = held_max_bytes
        # Each assigned partition's end as its last end-of-partition event said: every record below it was
        # dequeued. An event is sent once per end, so it is kept for a next range of only markers (C5).
        self.eof: dict[tuple[str, int], int] = {}
        self.topics: set[str] = set()  # whose leaders it asked for; bound: the topics of the flow

    def next_offset(self, tp: tuple[str, int]) -> int:
        held = self.held.get(tp)
        return held[0][0].offset() if held else self.position[tp]  # type: ignore[return-value]

    def prepare(self, read: Mapping[tuple[str, int], Range]) -> None:
        """Keep the partitions whose next record is where their range starts; assign the others there."""
        keep = {tp for tp, r in read.items() if tp in self.position and self.next_offset(tp) == r.from_offset}
        self.release([tp for tp in self.position if tp not in keep])
        new = [tp for tp in read if tp not in keep]
        if new:
            self.consumer.incremental_assign([TopicPartition(t, p, read[(t, p)].from_offset) for t, p in new])
            for tp in new:
                self.position[tp] = read[tp].from_offset
                self.eof.pop(tp, None)
            self._learn_leaders(sorted({t for t, _ in new} - self.topics))

    def _learn_leaders(self, topics: list[str]) -> None:
        """Ask for the leaders of topics this consumer has not read before: librdkafka asks only on its one-second
        scan, so a new topic's first fetch waited about a second (a batch's first record 1,000 ms after its
        assignment; 14-89 ms with the request)."""
        if not topics:
            return
        with contextlib.suppress(KafkaException):  # its own scan asks again within a second
            if len(topics) <= _LEADER_REQUESTS_MAX:
                for topic in topics:
                    self.consumer.list_topics(topic, timeout=_LEADER_WAIT_S)
            else:  # the whole cluster's: every topic in it is known from then on (1.5 s a task over 2,000 topics)
                self.topics.update(self.consumer.list_topics(timeout=_LEADER_WAIT_S).topics)
        self.topics.update(topics)

    def release(self, tps: list[tuple[str, int]]) -> None:
        if not tps:
            return
        self.consumer.incremental_unassign([TopicPartition(*tp) for tp in tps])
        for tp in tps:
            self.position.pop(tp, None)
            self.eof.pop(tp, None)
            self.held_bytes -= self.held.pop(tp, ((), 0))[1]

    def take_held(self, tps: list[tuple[str, int]]) -> list[Message]:
        out: list[Message] = []
        for tp in tps:
            held, size = self.held.pop(tp, ([], 0))
            self.held_bytes -= size
            out += held
        return out

    def hold(self, tp: tuple[str, int], ms: list[Message]) -> None:
        """Keep records past a range's end for the next batch (C4), unless they would take the worker past
        held_max_bytes: then the partition is released. Parking it instead (unassigned, what it held kept) let them grow
        past the bound, one fetched run a partition: 777,852 records held in one task over 1,200 partitions."""
        size = sum(map(len, ms))
        if self.held_bytes + size > self.held_max_bytes:
            self.release([tp])
            return
        held, before = self.held.get(tp, ([], 0))
        held.extend(ms)
        self.held[tp] = held, before + size
        self.held_bytes += size


def _reader(spec: WriterSpec, partitions: int) -> _Reader:
    reader = _READERS.get(spec.flow)
    config = readers.reader_config(spec.source_consumer_settings, spec.flow, spec.reads_committed, partitions)
    wait = int(config["fetch.wait.max.ms"])
    # The wait only grows: a batch with fewer partitions holding records does not rebuild the consumer.
    if reader is not None and (reader.epoch != spec.fenced or reader.fetch_wait_ms < wait):
        _drop_reader(spec.flow)
        reader = None
    if reader is None:
        cache_stats["misses"] += 1
        held_max_bytes = int(config["queued.max.messages.kbytes"]) * 1024  # as much as librdkafka's queue takes
        reader = _READERS[spec.flow] = _Reader(Consumer(config), spec.fenced, wait, held_max_bytes)
    else:
        cache_stats["hits"] += 1
    return reader


def _drop_reader(flow: str) -> None:
    reader = _READERS.pop(flow, None)
    if reader is not None:
        with contextlib.suppress(KafkaException, RuntimeError):
            reader.consumer.close()


def _runs(spec: WriterSpec, ranges: list[Range]
          ) -> Iterator[tuple[tuple[str, int], Run | PassedOver | Gap | Slice]]:
    """The task's records as runs per partition, in offset order within each partition (C1-C4)."""
    read: dict[tuple[str, int], Range] = {}
    lingering = lingers(spec)
    for r in ranges:
        tp = (r.topic, r.partition)
        if r.records == 0 and not (lingering and r.topic in spec.remote and tp not in spec.paused):
            continue  # an empty range is only a partition to linger on (C6)
        if r.topic in spec.remote and tp not in spec.paused:
            read[tp] = r
        else:
            yield tp, PassedOver(r.from_offset, r.until_offset)
    if not read:
        return
    reader = _reader(spec, len(read))
    clean = False
    try:
        reader.prepare(read)
        yield from _read(spec, reader, read)
        if len(reader.position) > KEPT_MAX:
            reader.release(list(reader.position))  # C4's bound: see KEPT_MAX
        clean = True
    finally:
        if not clean:
            _drop_reader(spec.flow)  # its assignment and fetch state are unknown: the next task starts afresh


def _read(spec: WriterSpec, reader: _Reader, read: Mapping[tuple[str, int], Range]
          ) -> Iterator[tuple[tuple[str, int], Run | Gap | Slice]]:
    planned = {tp: r.until_offset for tp, r in read.items()}
    # C6: until the batch's linger deadline every partition reads on past its range's end
    lingering = lingers(spec)
    until = dict.fromkeys(planned, OPEN) if lingering else dict(planned)
    expected = {tp: r.from_offset for tp, r in read.items()}
    open_ = set(until)
    progress = time.monotonic()
    consumer, position, eof = reader.consumer, reader.position, reader.eof
    messages = reader.take_held(list(read))
    first = True
    # C6: when the last Slice was (none yet: what arrived between two batches is committed as soon as it is read),
    # and whether records came since
    sliced, unsliced = float("-inf"), False

    def past_ranges() -> bool:
        return all(range_cursor.read_to(planned[tp], position.get(tp), eof.get(tp)) for tp in open_)

    while open_:
        if lingering and not messages and not lingers(spec):
            lingering = False
            for tp in open_:  # C6: each partition ends where it got to, and no sooner than its range
                until[tp] = range_cursor.linger_end(planned[tp], position.get(tp))
            open_.difference_update([tp for tp in list(open_)
                                     if range_cursor.read_to(until[tp], position.get(tp), eof.get(tp))])
            if not open_:
                break
        if not messages and not first:
            messages = consumer.consume(_CONSUME_MAX, _CONSUME_WAIT_S)
        caught_up = len(messages) < _CONSUME_MAX
        runs: dict[tuple[str, int], tuple[list[Message], list[int]]] = {}  # records and their offsets
        failed: set[tuple[str, int]] = set()
        gaps: list[tuple[tuple[str, int], Gap]] = []
        for tp, chunk in _chunks(messages):
            if chunk[0].error() is not None:
                done, gap = _event(spec, reader, read, open_, until, failed, tp, chunk[0])
                if gap is not None:
                    gaps.append((tp, gap))
                if done:
                    open_.discard(tp)
                continue
            if tp not in position:
                continue  # a partition released since it was fetched
            offsets: list[int] = [m.offset() for m in chunk]  # type: ignore[misc]  # a record's is never None
            position[tp] = offsets[-1] + 1
            if tp not in open_:
                reader.hold(tp, chunk)  # past its range's end (C1): the next batch's, if it continues here
                continue
            # Offsets ascend within a partition: below the range (C1) dropped, at or past its end held.
            c = range_cursor.cut(offsets, expected[tp], until[tp])
            if c.hi > c.lo:
                ms, run_offsets = runs.setdefault(tp, ([], []))
                ms.extend(chunk[c.lo:c.hi])
                run_offsets.extend(offsets[c.lo:c.hi])
            if c.hi < len(chunk):
                reader.hold(tp, chunk[c.hi:])
            if c.closes:
                open_.discard(tp)
        if first:  # C5: a kept partition whose last end event is past its range has nothing more to read
            open_.difference_update([tp for tp in open_ if range_cursor.read_to(until[tp], None, eof.get(tp))])
            first = False
        messages = []
        reader.release(sorted(failed))
        if not runs and time.monotonic() - progress > STALL_S and lingering and past_ranges():
            progress = time.monotonic()  # lingering past every range's end: waiting for records is no stall
        if not runs and time.monotonic() - progress > STALL_S:
            waiting = ", ".join(f"{t}-{p}" for t, p in sorted(open_)[:5])
            raise RetryableError(f"flow {spec.flow}: no record of {spec.source} partition(s) {waiting} within "
                                 f"{STALL_S:.0f} s although the batch's end offsets are past their positions")
        for tp, (ms, run_offsets) in runs.items():
            yield tp, _run(spec, tp, ms, run_offsets)
        yield from gaps
        if runs:
            progress = time.monotonic()  # after the writer took them: its waits are not the source's
            unsliced = True
        since = time.monotonic() - sliced
        if (lingering and unsliced and since >= (SLICE_BEHIND_S if spec.behind else SLICE_S)
                and (caught_up or since >= SLICE_BEHIND_S) and past_ranges()):
            yield _NO_PARTITION, Slice()
            sliced, unsliced = time.monotonic(), False


def _chunks(messages: list[Message]) -> Iterator[tuple[tuple[str, int], list[Message]]]:
    """Consecutive records of one partition together (librdkafka hands a partition's fetch over in a row), each
    event (an error, an end of partition) alone."""
    chunk: list[Message] = []
    key: tuple[str, int] | None = None
    for m in messages:
        if m.error() is not None:
            if chunk:
                yield key, chunk  # type: ignore[misc]
                chunk, key = [], None
            yield (m.topic(), m.partition()), [m]  # type: ignore[misc]
            continue
        tp = (m.topic(), m.partition())
        if tp != key:
            if chunk:
                yield key, chunk  # type: ignore[misc]
            chunk, key = [], tp  # type: ignore[assignment]
        chunk.append(m)
    if chunk:
        yield key, chunk  # type: ignore[misc]


def _event(spec: WriterSpec, reader: _Reader, read: Mapping[tuple[str, int], Range], open_: set[tuple[str, int]],
           until: Mapping[tuple[str, int], int], failed: set[tuple[str, int]], tp: tuple[str, int], m: Message
           ) -> tuple[bool, Gap | None]:
    """An event of the consumer: whether it closes the partition's range, and the records it says are lost."""
    err = m.error()
    assert err is not None
    if err.code() == KafkaError._PARTITION_EOF:
        if tp in reader.position:
            reader.eof[tp] = m.offset() or 0
        end = reader.eof.get(tp, 0)
        return tp in open_ and range_cursor.closes_at_end(end, until[tp], behind=spec.behind,
                                                          planned=read[tp].until_offset,
                                                          position=reader.position.get(tp, end)), None
    if tp not in open_:
        if tp in reader.position:
            failed.add(tp)  # assigned afresh by the task that next reads it
        return False, None
    if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        return _resume_at_log_start(spec, reader, tp, read[tp])
    raise KafkaException(err)


def _run(spec: WriterSpec, tp: tuple[str, int], ms: list[Message], offsets: list[int]) -> Run:
    partition = tp[1]
    keys: list[bytes | None] = [m.key() for m in ms]
    values: list[bytes | None] = [m.value() for m in ms]
    try:
        headers: list[list[tuple[str, bytes | None]] | None] = [m.headers() for m in ms]  # type: ignore[misc]
    except UnicodeDecodeError:
        bad = next(m for m in ms if _undecodable_headers(m))
        raise MirrorError(f"flow {spec.flow}: {spec.source} topic {tp[0]} partition {partition} offset {bad.offset()}: "
                          "a header key is not UTF-8, which the copier's client cannot read; the flow stops before "
                          "it (move the topic's records past it with mirrorflow reset, or exclude the topic)") from None
    stamps = np.fromiter((m.timestamp()[1] for m in ms), dtype=np.int64, count=len(ms))
    digests = record_digest.digests_of(partition, np.array(offsets, dtype=np.int64), keys, values, headers, stamps)
    return Run(offsets, keys, values, headers, stamps, digests)


def _undecodable_headers(m: Message) -> bool:
    try:
        m.headers()
    except UnicodeDecodeError:
        return True
    return False


def _resume_at_log_start(spec: WriterSpec, reader: _Reader, tp: tuple[str, int], r: Range
                         ) -> tuple[bool, Gap | None]:
    """C2: the range's next records are below the log start: read on from there. Returns whether nothing of the
    range is left, and the records lost inside the range (None when the gap is at its start: the driver sees that
    one from the positions and the log start). A range starting past the log's end (truncated, or re-created)
    fails the task at once: the restarted query finds out which."""
    consumer = reader.consumer
    low, high = consumer.get_watermark_offsets(TopicPartition(*tp), timeout=10)
    reached = reader.position.get(tp, r.from_offset)
    reader.release([tp])
    lost = range_cursor.lost_inside(r.from_offset, r.until_offset, reached, low)
    gap = Gap(*lost) if lost is not None else None
    if range_cursor.exhausted(r.until_offset, low):
        return True, gap
    if high < r.from_offset:
        raise RetryableError(f"flow {spec.flow}: {spec.source} topic {tp[0]} partition {tp[1]} ends at {high}, "
                             f"below the batch's range from {r.from_offset}: truncated or re-created since the batch "
                             "was planned")
    log.warning("flow %s: %s-%d: records below offset %d are gone from %s (retention, deleteRecords); reading on "
                "from there", spec.flow, *tp, low, spec.source)
    consumer.incremental_assign([TopicPartition(tp[0], tp[1], low)])
    reader.position[tp] = low
    return False, gap
