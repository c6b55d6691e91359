"""The copier's reads (spark/copier) against a real broker, in this process: the edges a whole stream rarely meets
on cue (records deleted while a range is read, a range of transaction markers only)."""

from __future__ import annotations

import dataclasses
import itertools
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from mirrorflow.kafka import writers
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model import config
from mirrorflow.rules.batch_plan import Range
from mirrorflow.spark import copier, stream_writer, writer_seats
from mirrorflow.spark.writer_spec import Gap, Run, Slice, WriterSpec
from support.clusters import PORTS
from support.streams import QUIET, create_topic

pytestmark = pytest.mark.kafka

ALPHA = f"127.0.0.1:{PORTS['alpha']}"
# Small fetches, so that a range is read in many round trips and the test can act between two of them.
SLOW = {"fetch.max.bytes": 20_000, "message.max.bytes": 20_000, "max.partition.fetch.bytes": 20_000,
        "queued.min.messages": 100,
        "queued.max.messages.kbytes": 64}


@pytest.fixture
def spec(local_clusters: config.MirrorConfig) -> Iterator[WriterSpec]:
    link = FlowLink.of(local_clusters, "alpha->beta")
    topics = ("copier.gap", "copier.markers", "copier.linger", "copier.held", "copier.behind", "copier.slices",
              "copier.unending", "copier.kept", "copier.idle")
    made = WriterSpec.of(link, remote={t: f"alpha.{t}" for t in topics}, upstream_next={}, ends={}, downstream_next={},
                         source_consumer_settings={**link.settings("source", "consumer"), **SLOW})
    yield made
    copier._drop_reader(made.flow)


def test_records_deleted_while_a_range_is_read_come_back_as_a_gap_and_the_rest_is_read(spec: WriterSpec) -> None:
    create_topic(ALPHA, "copier.gap", 1)
    p = Producer({"bootstrap.servers": ALPHA, "linger.ms": 20, **QUIET})
    for i in range(20_000):
        p.produce("copier.gap", f"r{i:05d}".encode() * 20, partition=0)
    assert p.flush(30) == 0
    parts = copier._runs(spec, [Range("copier.gap", 0, 0, 20_000)])
    first = next(parts)
    assert isinstance(first[1], Run) and first[1].offsets[0] == 0
    assert first[1].offsets[-1] < 14_000
    # The reader falls behind (what it prefetched is dropped), then retention deletes records it has not read yet.
    consumer = copier._READERS[spec.flow].consumer
    consumer.pause([TopicPartition("copier.gap", 0)])
    admin = AdminClient({"bootstrap.servers": ALPHA, **QUIET})
    admin.delete_records([TopicPartition("copier.gap", 0, 15_000)])[TopicPartition("copier.gap", 0, 15_000)].result(30)
    consumer.resume([TopicPartition("copier.gap", 0)])
    rest = list(parts)
    gaps = [g for _, g in rest if isinstance(g, Gap)]
    read = [*first[1].offsets, *(o for _, r in rest if isinstance(r, Run) for o in r.offsets)]
    assert len(gaps) == 1 and 0 < gaps[0].begin < gaps[0].end == 15_000, (gaps, len(read))
    assert read == [*range(gaps[0].begin), *range(15_000, 20_000)]  # in order, nothing past the range's end


def test_a_range_of_transaction_markers_only_ends_at_once_on_a_kept_partition(spec: WriterSpec) -> None:
    create_topic(ALPHA, "copier.markers", 2)
    txn = Producer({"bootstrap.servers": ALPHA, "transactional.id": "copier-markers", **QUIET})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(10):
        txn.produce("copier.markers", b"t%d" % i, partition=0)
    txn.commit_transaction(30)  # partition 0: records 0-9, the commit marker at 10
    p = Producer({"bootstrap.servers": ALPHA, "linger.ms": 20, **QUIET})
    for i in range(5_000):
        p.produce("copier.markers", f"p{i:05d}".encode() * 20, partition=1)
    assert p.flush(30) == 0
    # Partition 0's range ends before its marker; partition 1's long one keeps the task reading meanwhile, so the
    # end-of-partition event past the marker arrives during this task.
    first = list(copier._runs(spec, [Range("copier.markers", 0, 0, 10), Range("copier.markers", 1, 0, 5_000)]))
    assert sum(len(r.offsets) for tp, r in first if tp[1] == 0 and isinstance(r, Run)) == 10
    began = time.monotonic()
    second = list(copier._runs(spec, [Range("copier.markers", 0, 10, 11)]))
    assert second == [] and time.monotonic() - began < 10  # kept (next offset 10), closed by the event: no stall


def test_a_lingering_range_copies_what_arrives_past_its_end_until_the_deadline(spec: WriterSpec) -> None:
    create_topic(ALPHA, "copier.linger", 1)
    p = Producer({"bootstrap.servers": ALPHA, "linger.ms": 0, **QUIET})
    for i in range(100):
        p.produce("copier.linger", b"before %d" % i, partition=0)
    assert p.flush(30) == 0
    lingering = dataclasses.replace(spec, linger_until=time.time() + 3.0)
    parts = copier._runs(lingering, [Range("copier.linger", 0, 0, 50)])
    read: list[int] = []
    slices = 0
    for _, part in parts:
        if isinstance(part, Slice):
            slices += 1
        elif isinstance(part, Run):
            read += part.offsets
            if read[-1] == 99 and len(read) == 100:  # the backlog past the range's end, then records arriving
                for i in range(20):
                    p.produce("copier.linger", b"during %d" % i, partition=0)
                assert p.flush(30) == 0
    ended = time.time()
    assert ended >= lingering.linger_until  # type: ignore[operator]
    assert read == list(range(120)), read[-5:]
    assert slices >= 1  # a Slice once it had read what there was
    for i in range(5):
        p.produce("copier.linger", b"after %d" % i, partition=0)
    assert p.flush(30) == 0
    # Past the deadline the next range is read to its end and no further (C1): it starts where the linger got to.
    after = [o for _, r in copier._runs(spec, [Range("copier.linger", 0, 120, 123)]) if isinstance(r, Run)
             for o in r.offsets]
    assert after == [120, 121, 122]


def test_a_linger_the_driver_ends_early_ends_where_the_partition_got_to_long_before_its_deadline(
        spec: WriterSpec) -> None:
    create_topic(ALPHA, "copier.ended", 1)
    p = Producer({"bootstrap.servers": ALPHA, "linger.ms": 0, **QUIET})
    for i in range(30):
        p.produce("copier.ended", b"r%d" % i, partition=0)
    assert p.flush(30) == 0
    lingering = dataclasses.replace(spec, remote={"copier.ended": "alpha.copier.ended"},
                                    linger_until=time.time() + 120.0, batch_key=f"copier-{uuid.uuid4().hex}")
    began = time.monotonic()
    read: list[int] = []
    try:
        for _, part in copier._runs(lingering, [Range("copier.ended", 0, 0, 10)]):
            if isinstance(part, Run):
                read += part.offsets
            if len(read) == 30 and not writer_seats.end_linger(lingering):  # told once it has read what there is
                pytest.fail("a local batch's linger can be ended")
    finally:
        writer_seats.drop_seat_claims(lingering)
    assert read == list(range(30))  # past its range's end (C6), up to where it got to
    assert time.monotonic() - began < 30  # not the 120 s deadline
    # Ended before a task starts: the task reads its range to its end and no further (C1).
    ended = dataclasses.replace(lingering, batch_key=f"copier-{uuid.uuid4().hex}")
    assert writer_seats.end_linger(ended)
    try:
        began = time.monotonic()
        read = [o for _, r in copier._runs(ended, [Range("copier.ended", 0, 0, 10)])
                if isinstance(r, Run) for o in r.offsets]
    finally:
        writer_seats.drop_seat_claims(ended)
    assert read == list(range(10)) and time.monotonic() - began < 30


def test_a_worker_holds_no_more_past_its_ranges_than_its_prefetch_queue_and_reads_released_partitions_afresh(
        spec: WriterSpec) -> None:
    create_topic(ALPHA, "copier.held", 4)
    p = Producer({"bootstrap.servers": ALPHA, "linger.ms": 20, **QUIET})
    for partition in range(4):
        for i in range(2_000):
            p.produce("copier.held", b"%099d" % i, partition=partition)  # 100 bytes, 655 of them in 64 KiB
    assert p.flush(30) == 0
    # Short ranges on a long partition 0 range: the others' prefetched records pile up past their ends meanwhile.
    first = [Range("copier.held", 0, 0, 2_000), *(Range("copier.held", q, 0, 10) for q in (1, 2, 3))]
    read: dict[int, list[int]] = {q: [] for q in range(4)}
    for tp, part in copier._runs(spec, first):
        if isinstance(part, Run):
            read[tp[1]] += part.offsets
    reader = copier._READERS[spec.flow]
    assert reader.held_bytes <= 64 * 1024  # SLOW's queued.max.messages.kbytes
    assert len(reader.position) < 4  # some partition was released
    assert reader.held_bytes == sum(len(m) for held, _ in reader.held.values() for m in held)
    assert read == {0: list(range(2_000)), **{q: list(range(10)) for q in (1, 2, 3)}}
    # Held or released, each partition's next range is read from its start, whole and in order.
    second = [Range("copier.held", q, 10, 2_000) for q in (1, 2, 3)]
    read = {q: [] for q in (1, 2, 3)}
    for tp, part in copier._runs(spec, second):
        if isinstance(part, Run):
            read[tp[1]] += part.offsets
    assert read == {q: list(range(10, 2_000)) for q in (1, 2, 3)}


def test_a_task_keeps_its_partitions_assigned_for_the_next_only_up_to_kept_max(
        spec: WriterSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    """C4's bound: a broker holds an idle consumer's waiting fetch on a watch list of every partition in it, so a
    worker between tasks waits on at most KEPT_MAX partitions (here 3, for 4 and then 3 partitions)."""
    _ten_records_a_partition("copier.kept", 4)
    monkeypatch.setattr(copier, "KEPT_MAX", 3)

    assert _copied(spec, "copier.kept", 4, 0, 5) == {q: list(range(5)) for q in range(4)}
    reader = copier._READERS[spec.flow]
    assert reader.consumer.assignment() == [] and reader.position == {}
    assert _copied(spec, "copier.kept", 3, 5, 10) == {q: list(range(5, 10)) for q in range(3)}
    assert sorted(tp.partition for tp in reader.consumer.assignment()) == [0, 1, 2]
    assert sorted(reader.position) == [("copier.kept", q) for q in range(3)]


def test_a_worker_that_ran_no_task_for_reader_idle_s_lets_its_partitions_go_and_reads_them_afresh(
        spec: WriterSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    """C4: a kept partition is fetched every fetch.wait.max.ms while the worker waits for a task, so an idle worker
    lets them go; never while a task runs."""
    _ten_records_a_partition("copier.idle", 2)
    monkeypatch.setattr(copier, "READER_IDLE_S", 0.5)
    idle = copier._IdleReaders()
    try:
        with idle.task():
            assert _copied(spec, "copier.idle", 2, 0, 5) == {q: list(range(5)) for q in range(2)}
            reader = copier._READERS[spec.flow]
            time.sleep(1.5)
            assert sorted(tp.partition for tp in reader.consumer.assignment()) == [0, 1]  # busy: kept
        deadline = time.monotonic() + 10
        while reader.position and time.monotonic() < deadline:
            time.sleep(0.1)
        assert reader.position == {} and reader.consumer.assignment() == []
        with idle.task():
            again = _copied(spec, "copier.idle", 2, 5, 10)
        assert again == {q: list(range(5, 10)) for q in range(2)}
        assert copier._READERS[spec.flow] is reader  # the same consumer, its partitions assigned afresh
    finally:
        idle.stopped.set()


def _ten_records_a_partition(topic: str, partitions: int) -> None:
    create_topic(ALPHA, topic, partitions)
    p = Producer({"bootstrap.servers": ALPHA, "linger.ms": 5, **QUIET})
    for i in range(10 * partitions):
        p.produce(topic, b"r%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def _copied(spec: WriterSpec, topic: str, partitions: int, begin: int, end: int) -> dict[int, list[int]]:
    """The offsets a task copies of [begin, end) of partitions 0 to `partitions` - 1, by partition."""
    read: dict[int, list[int]] = {}
    for tp, part in copier._runs(spec, [Range(topic, q, begin, end) for q in range(partitions)]):
        if isinstance(part, Run):
            read.setdefault(tp[1], []).extend(part.offsets)
    return read


def test_a_lingering_task_of_a_full_batch_reads_on_to_the_partitions_end_and_waits_for_no_record(
        spec: WriterSpec) -> None:
    create_topic(ALPHA, "copier.behind", 2)
    p = Producer({"bootstrap.servers": ALPHA, "linger.ms": 5, **QUIET})
    for i in range(300):
        p.produce("copier.behind", b"b%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    behind = dataclasses.replace(spec, linger_until=time.time() + 60.0, behind=True)
    began = time.monotonic()
    read: dict[int, list[int]] = {0: [], 1: []}
    for tp, part in copier._runs(behind, [Range("copier.behind", 0, 0, 50), Range("copier.behind", 1, 0, 150)]):
        if isinstance(part, Run):
            read[tp[1]] += part.offsets
    assert time.monotonic() - began < 20  # not the minute it could linger
    assert read == {0: list(range(150)), 1: list(range(150))}


def test_a_full_batchs_task_commits_its_backlog_once_a_second_where_one_that_keeps_up_commits_every_50_ms(
        spec: WriterSpec) -> None:
    create_topic(ALPHA, "copier.slices", 1)
    p = Producer({"bootstrap.servers": ALPHA, "linger.ms": 5, "batch.num.messages": 10, **QUIET})
    for _ in range(2_000):
        p.produce("copier.slices", bytes(1024), partition=0)
    assert p.flush(30) == 0

    def parts(lingering: WriterSpec) -> list[tuple[str, int, float]]:
        # Each run takes a while (2 ms a record, 100 ms at least): the backlog is read for 4 s or more.
        return _parts(lingering, "copier.slices", 1_999, lambda run: max(0.1, 0.002 * len(run.offsets)))

    behind = parts(dataclasses.replace(spec, linger_until=time.time() + 60.0, behind=True))
    slices = [t for kind, _, t in behind if kind == "slice"]
    assert behind[-1][:2] == ("run", 1_999) and len(slices) >= 2, behind
    assert all(b - a >= copier.SLICE_BEHIND_S for a, b in itertools.pairwise(slices)), slices
    # Keeping up, every run past the range's end is committed before the next one is read (each took 100 ms or more).
    keeping_up = parts(dataclasses.replace(spec, linger_until=time.time() + 60.0))
    assert keeping_up[-1][:2] == ("run", 1_999)
    past = [i for i, (kind, last, _) in enumerate(keeping_up[:-1]) if kind == "run" and last >= 99]
    assert past and all(keeping_up[i + 1][0] == "slice" for i in past), keeping_up


def test_a_lingering_task_that_never_catches_up_still_commits_at_least_once_a_second(
        spec: WriterSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    create_topic(ALPHA, "copier.unending", 1)
    p = Producer({"bootstrap.servers": ALPHA, "linger.ms": 5, "batch.num.messages": 10, **QUIET})
    for _ in range(1_500):
        p.produce("copier.unending", bytes(1024), partition=0)
    assert p.flush(30) == 0
    # Every read finds as many records as it asks for until the last (the backlog is prefetched at once, not in the
    # other tests' small fetches): the task is never caught up.
    monkeypatch.setattr(copier, "_CONSUME_MAX", 25)
    roomy = {k: v for k, v in spec.source_consumer_settings.items() if k not in SLOW}

    def pause(run: Run) -> float:
        assert len(run.offsets) <= 25
        return 0.05  # 60 runs: the backlog is read for 3 s or more

    for behind in (False, True):
        lingering = dataclasses.replace(spec, linger_until=time.time() + 60.0, behind=behind,
                                        source_consumer_settings=roomy)
        parts = _parts(lingering, "copier.unending", 1_499, pause)
        slices = [t for kind, _, t in parts if kind == "slice"]
        assert parts[-1][:2] == ("run", 1_499) and len(slices) >= 2, (behind, parts)
        assert all(b - a >= copier.SLICE_BEHIND_S for a, b in itertools.pairwise(slices)), (behind, slices)


def _parts(lingering: WriterSpec, topic: str, last: int, pause: Callable[[Run], float]
           ) -> list[tuple[str, int, float]]:
    """A lingering read of partition 0's range 0-100 until offset `last`: ("run", its last offset, when) and
    ("slice", -1, when), each run followed by `pause(run)` seconds of the writer's time."""
    out: list[tuple[str, int, float]] = []
    read = copier._runs(lingering, [Range(topic, 0, 0, 100)])
    for _, part in read:
        if isinstance(part, Slice):
            out.append(("slice", -1, time.monotonic()))
        elif isinstance(part, Run):
            out.append(("run", part.offsets[-1], time.monotonic()))
            wait = pause(part)
            if part.offsets[-1] == last:
                break
            time.sleep(wait)
    read.close()
    copier._drop_reader(lingering.flow)  # the next read starts at offset 0 afresh
    return out


def test_a_full_queue_of_partly_filled_lingering_batches_is_sent_at_once_not_after_the_linger(
        local_clusters: config.MirrorConfig) -> None:
    """A transactional writer lingers 1 s. Over many partitions its queue can fill with batches none of which is
    full yet: the writer flushes them then instead of waiting out the linger with the queue full."""
    create_topic(ALPHA, "writer.lingering", 12)
    p = Producer({**writers.writer_config({"bootstrap.servers": ALPHA}, f"writer-test-{uuid.uuid4().hex}"),
                  "queue.buffering.max.messages": 12, **QUIET})
    p.init_transactions(30)
    p.begin_transaction()
    begun = time.monotonic()
    for i in range(120):  # ten fills of the queue, one record per partition each
        stream_writer._produce(p, "writer.lingering", i % 12, None, b"r", int(time.time() * 1000), None, None)
    took = time.monotonic() - begun
    p.commit_transaction(30)
    assert took < 4, f"{took:.1f} s: each full queue waited out the 1 s linger"
