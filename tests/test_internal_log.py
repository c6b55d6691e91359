"""Reading mirrorflow's and MM2's internal topics to their end, as they are written: by plain and by transactional
producers (whose partitions end in commit markers), with transactions still open (real Kafka)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from mirrorflow.kafka.internal_log import InternalLog, read_to_ends
from support.clusters import PORTS
from support.streams import create_topic, producer

pytestmark = [pytest.mark.kafka]
ALPHA = f"127.0.0.1:{PORTS['alpha']}"
SETTINGS = {"bootstrap.servers": ALPHA}


def transactional(tag: str) -> Producer:
    p = Producer({"bootstrap.servers": ALPHA, "transactional.id": f"test-internal-log-{tag}-{uuid.uuid4().hex}"})
    p.init_transactions(30)
    return p


def commit(p: Producer, topic: str, values: list[bytes], *, abort: bool = False) -> None:
    p.begin_transaction()
    for v in values:
        p.produce(topic, v, partition=0)
    if abort:
        p.flush(30)  # in the log before the abort marker (unsent records are purged, leaving no trace)
        p.abort_transaction(30)
    else:
        p.commit_transaction(30)


def settled(topic: str, end: int) -> None:
    """Wait until the commit markers are written: a commit returns before they are, and the last stable offset
    stays below them until then."""
    c = Consumer({"bootstrap.servers": ALPHA, "group.id": "test-internal-log", "isolation.level": "read_committed"})
    try:
        deadline = time.monotonic() + 30
        while c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1] < end:
            assert time.monotonic() < deadline, f"{topic}: markers not written up to {end}"
            time.sleep(0.1)
    finally:
        c.close()


def read(partitions: list[tuple[str, int]]) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for msg in read_to_ends(SETTINGS, partitions, "test"):
        out.setdefault(msg.topic() or "", []).append(msg.value() or b"")
    return out


def test_one_read_returns_each_partitions_committed_records_up_to_the_end_it_had(local_clusters) -> None:  # type: ignore[no-untyped-def]
    run = uuid.uuid4().hex[:8]
    plain, fenced, aborted, pending, empty = (f"il-{run}-{n}" for n in ("plain", "fenced", "aborted", "pending",
                                                                        "empty"))
    for t in (plain, fenced, aborted, pending, empty):
        create_topic(ALPHA, t, 1)
    p = producer(ALPHA)
    for i in range(3):
        p.produce(plain, b"p%d" % i, partition=0)
    p.flush(30)
    tx = transactional("a")
    commit(tx, fenced, [b"f0", b"f1"])
    commit(tx, fenced, [b"f2"])
    commit(tx, aborted, [b"a0"])
    commit(tx, aborted, [b"a1", b"a2"], abort=True)
    commit(tx, pending, [b"c0"])
    open_tx = transactional("b")
    open_tx.begin_transaction()
    open_tx.produce(pending, b"open", partition=0)
    open_tx.flush(30)
    for topic, end in ((fenced, 5), (aborted, 5), (pending, 2)):
        settled(topic, end)
    try:
        got = read([(plain, 0), (fenced, 0), (aborted, 0), (pending, 0), (empty, 0), (f"il-{run}-missing", 0)])
        assert got == {plain: [b"p0", b"p1", b"p2"], fenced: [b"f0", b"f1", b"f2"], aborted: [b"a0"],
                       pending: [b"c0"]}
    except BaseException:
        open_tx.abort_transaction(30)
        raise
    open_tx.commit_transaction(30)
    settled(pending, 4)
    assert read([(pending, 0)]) == {pending: [b"c0", b"open"]}


def test_a_catch_up_stops_at_a_commit_marker_and_the_next_reads_only_what_followed(local_clusters) -> None:  # type: ignore[no-untyped-def]
    topic = f"il-{uuid.uuid4().hex[:8]}-syncs"
    create_topic(ALPHA, topic, 1)
    tx = transactional("c")
    commit(tx, topic, [b"s0", b"s1"])
    settled(topic, 3)
    log = InternalLog(SETTINGS, topic, "test")
    try:
        assert [m.value() for m in log.catch_up()] == [b"s0", b"s1"]
        assert log.next_offset == 3  # past the marker at 2: an idle catch-up does not fetch
        assert [m.value() for m in log.catch_up()] == []
        commit(tx, topic, [b"s2"], abort=True)
        commit(tx, topic, [b"s3"])
        settled(topic, 7)
        assert [m.value() for m in log.catch_up()] == [b"s3"]
        assert log.read_records == 3 and log.next_offset == 7
    finally:
        log.close()
