"""Consumer-group checkpoints against real brokers and the real stream: exact translation, MM2's scenarios.

One stream process (flow alpha->beta, topics c1.*) runs for the module; the tests run in file order (the
crash test last, since at-least-once recovery may duplicate records on the target).
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from mirrorflow.jobs import checkpoints
from mirrorflow.jobs.checkpoints import Checkpoint
from mirrorflow.kafka import offset_sync_log
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model import config, paths
from mirrorflow.rules import translation
from mirrorflow.spark import maven
from support.airflow import deployment
from support.clusters import PORTS
from support.streams import (
    QUIET,
    StreamProcess,
    config_text,
    create_topic,
    end_offsets,
    origin,
    producer,
    read_partition,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]
ALPHA = f"127.0.0.1:{PORTS['alpha']}"
BETA = f"127.0.0.1:{PORTS['beta']}"
ORDERS = "c1.orders"
SYNCS = "mirrorflow-offset-syncs.alpha.internal"


@pytest.fixture(scope="module")
def setup(stream_clusters: config.MirrorConfig, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[tuple[config.MirrorConfig, Path, StreamProcess]]:
    work = tmp_path_factory.mktemp("stream-c1")
    path = work / "mirror.properties"
    path.write_text(config_text(
        ("alpha", "beta"), (PORTS["alpha"], PORTS["beta"]), ["alpha->beta", "beta->alpha"],
        "alpha->beta.topics = c1\\..*\nalpha.consumer.isolation.level = read_committed\n"
        "sync.group.offsets.enabled = true\nemit.checkpoints.interval.seconds = 5\n"
        "groups.exclude = test-.*\ncheckpoints.topic.replication.factor = 1\n"
        # Few anchors and small batches (not lingering: --linger-ms 0), so that thinning happens in every test.
        "mirrorflow.offset-syncs.anchors.max = 8\nmirrorflow.offset-syncs.anchors.spacing = 20\n"
        "mirrorflow.offset-syncs.prune.interval.seconds = 2\nmirrorflow.checkpoints.task.seconds = 0\n"))
    _fill_sources()
    stream = StreamProcess(path, "alpha->beta", work)
    stream.start("--max-records-per-batch", "500", "--linger-ms", "0")
    wait_for(lambda: _mirrored(ORDERS, 3) and _mirrored("c1.compacted", 1) and _mirrored("c1.sparse", 2)
             and _mirrored("c1.behind", 1),
             240, "the c1 topics mirrored", stream)
    yield config.load(path), path, stream
    stream.stop()


def _fill_sources() -> None:
    """c1.orders: plain records (p0), transactions with aborts (p1), plenty (p2); c1.compacted has holes."""
    create_topic(ALPHA, ORDERS, 3)
    p = producer(ALPHA)
    for i in range(3000):
        p.produce(ORDERS, f"p0-{i}".encode(), partition=0)
        p.produce(ORDERS, f"p2-{i}".encode(), partition=2)
    p.flush(30)
    tx = producer(ALPHA, **{"transactional.id": "c1-tx"})
    tx.init_transactions(30)
    for t in range(40):
        tx.begin_transaction()
        for i in range(25):
            tx.produce(ORDERS, f"p1-{t}-{i}".encode(), partition=1)
        if t % 4 == 3:
            tx.flush(30)  # aborted records in the log; an abort racing its own produce requests can be refused
            tx.abort_transaction(30)
        else:
            tx.commit_transaction(30)
    create_topic(ALPHA, "c1.compacted", 1, **{"cleanup.policy": "compact", "segment.ms": "100",
                                                "min.cleanable.dirty.ratio": "0.001", "min.compaction.lag.ms": "0"})
    for i in range(600):
        p.produce("c1.compacted", f"v{i}".encode(), f"k{i % 50 if i < 400 else i}".encode(), partition=0)
    p.flush(30)
    time.sleep(0.3)
    p.produce("c1.compacted", b"roll", b"roll", partition=0)  # rolls the segment so the cleaner may compact it
    p.flush(30)
    wait_for(lambda: len(read_partition(ALPHA, "c1.compacted", 0)) < 300, 60, "the source compacted")
    create_topic(ALPHA, "c1.sparse", 2)
    for i in range(50):
        p.produce("c1.sparse", f"s{i}".encode(), partition=0)
    create_topic(ALPHA, "c1.never", 1)
    create_topic(ALPHA, "c1.behind", 1)
    for i in range(10_000):
        p.produce("c1.behind", f"b{i}".encode(), partition=0)
    p.flush(30)


def _mirrored(topic: str, partitions: int) -> bool:
    source = end_offsets(ALPHA, topic)
    positions = _positions(topic)
    return len(source) == partitions and all(positions.get(p, 0) >= source[p] for p in range(partitions))


def _target_offset(topic: str, partition: int, upstream: int) -> int:
    """Where a group at source offset `upstream` resumes on beta: at the copy of the first record at or after it,
    past the last copy if none (not `upstream` itself: the flow's commits leave transaction markers among them)."""
    copies = read_partition(BETA, f"alpha.{topic}", partition, committed=True)
    return next((m.offset() for m in copies if origin(m).offset >= upstream), copies[-1].offset() + 1)


def _positions(topic: str) -> dict[int, int]:
    from mirrorflow.kafka import offset_sync_log

    syncs = offset_sync_log.read({"bootstrap.servers": BETA, **QUIET}, "mirrorflow-offset-syncs.alpha.internal")
    positions = syncs.positions
    return {p: pos.upstream_next for (t, p), pos in positions.items() if t == topic}


def _visible(topic: str, partition: int) -> list[int]:
    return [m.offset() for m in read_partition(ALPHA, topic, partition, committed=True)]


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in offsets.items()])]
    admin.alter_consumer_group_offsets(request)[group].result(30)


def _consume_rest(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, list[Any]]:
    """What a consumer of `group` reads from its committed offsets to the partitions' current ends."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "error", "isolation.level": "read_committed", "enable.partition.eof": True,
                  **QUIET})
    try:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        out: dict[int, list[Any]] = {p: [] for p in range(partitions)}
        done: set[int] = set()
        deadline = time.monotonic() + 60
        while len(done) < partitions and time.monotonic() < deadline:
            for m in c.consume(5000, 1.0):
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error().str()
                    done.add(m.partition())
                else:
                    out[m.partition()].append(m)
        assert len(done) == partitions, f"{group} did not reach the end of {topic}"
        return out
    finally:
        c.close()


def _checkpoints(group: str, source: str = "alpha", on: str = BETA) -> dict[tuple[str, int], Checkpoint]:
    found = checkpoints.read_checkpoints({"bootstrap.servers": on, **QUIET}, f"{source}.checkpoints.internal")
    return {(t, p): c for (g, t, p), c in found.items() if g == group}


def _round(cfg: config.MirrorConfig, flow: str = "alpha->beta") -> dict[str, checkpoints.GroupCheckpoints]:
    return {r.group: r for r in checkpoints.run_round(FlowLink.of(cfg, flow))}


def test_a_group_resumes_on_the_target_having_lost_nothing_and_reading_nothing_twice(setup) -> None:  # type: ignore[no-untyped-def]
    cfg, _, _ = setup
    rng = random.Random(7)
    visible = {p: _visible(ORDERS, p) for p in range(3)}
    ends = end_offsets(ALPHA, ORDERS)
    gaps = sorted(set(range(ends[1])) - set(visible[1]))  # aborted records and transaction markers
    positions = {
        "g-behind": {p: rng.randrange(0, ends[p] // 5) for p in range(3)},
        "g-random": {p: rng.randrange(0, ends[p] + 1) for p in range(3)},
        "g-head": dict(enumerate(ends)),
        "g-gap": {0: 0, 1: gaps[len(gaps) // 2], 2: ends[2] - 1},
    }
    for group, by_partition in positions.items():
        _commit(ALPHA, group, {(ORDERS, p): o for p, o in by_partition.items()})
    results = _round(cfg)
    mm2_rereads: dict[str, int] = {}
    for group, by_partition in positions.items():
        rows = {p.partition: p for p in results[group].partitions}
        assert all(r.exact for r in rows.values()), results[group].line(cfg.flow("alpha->beta"))
        assert "3 partition(s) committed to beta" in results[group].group_sync
        read = _consume_rest(BETA, group, f"alpha.{ORDERS}", 3)
        for p in range(3):
            got = [origin(m).offset for m in read[p]]
            assert got == [o for o in visible[p] if o >= by_partition[p]], f"{group} partition {p}"
        compared = {t.partition: t for t in checkpoints.translate_group(FlowLink.of(cfg, "alpha->beta"), group,
                                                                         compare_mm2=True)}
        for p in range(3):
            mm2 = compared[p].mm2_offset
            assert compared[p].target_offset == rows[p].target_offset
            mm2_rereads[group] = mm2_rereads.get(group, 0) + rows[p].target_offset - (mm2 if mm2 is not None else 0)
    print(f"re-reads per group (3 partitions each): mirrorflow 0; MM2's rule on the same writes {mm2_rereads}")
    assert all(n >= 0 for n in mm2_rereads.values())


def test_a_round_reads_the_partitions_of_all_its_groups_side_by_side_and_answers_as_one_at_a_time_does(setup) -> None:  # type: ignore[no-untyped-def]
    cfg, _, _ = setup
    rng = random.Random(11)
    topics = {ORDERS: 3, "c1.behind": 1, "c1.compacted": 1, "c1.sparse": 2}
    ends = {(t, p): e for t, n in topics.items() for p, e in enumerate(end_offsets(ALPHA, t)[:n])}
    groups = [f"g-side-{i}" for i in range(12)]
    for group in groups:
        _commit(ALPHA, group, {tp: rng.randrange(0, end + 1) for tp, end in ends.items()})
    offsets = checkpoints.GroupOffsets(FlowLink.of(cfg, "alpha->beta"))
    try:
        committed = offsets.committed_many(groups)
        records = offsets._records("alpha")
        assignments = records.assignments
        together = offsets.translate_many(committed)
        assignments = records.assignments - assignments
        steps = {}  # each partition's search alone, one read at a time: its answers and how many reads it made
        copies: dict[tuple[str, int], list[tuple[int, int]]] = {}

        def truth(topic: str, partition: int, upstream: int) -> int:
            if (topic, partition) not in copies:
                copies[(topic, partition)] = [(m.offset(), origin(m).offset) for m in
                                              read_partition(BETA, f"alpha.{topic}", partition, committed=True)]
            found = copies[(topic, partition)]
            return next((d for d, u in found if u >= upstream), found[-1][0] + 1)
        for (topic, partition) in ends:
            wanted = {committed[g][(topic, partition)][0] for g in groups}
            counted = _Counting(records.partition(f"alpha.{topic}", topic, partition))
            syncs = offsets._partition_syncs("alpha", topic, partition)
            alone = translation.target_offsets(syncs, wanted, counted)
            steps[(topic, partition)] = counted.reads
            for group in groups:
                row = next(r for r in together[group] if (r.source_topic, r.partition) == (topic, partition))
                u = committed[group][(topic, partition)][0]
                assert row.exact == alone[u].exact and row.target_offset == max(alone[u].offset or 0, 0), (group, row)
                if row.exact and ends[(topic, partition)]:  # against the target's records themselves
                    assert row.target_offset == truth(topic, partition, u), (group, row)
    finally:
        offsets.close()
    print(f"{len(ends)} partitions x {len(groups)} groups: {assignments} assignments; each partition alone: {steps}")
    # Each step reads every partition still searching at once: no more assignments than the longest search alone
    # makes reads (fewer when a step's fetch returns more than one read at a time would).
    assert assignments <= max(steps.values()) < sum(steps.values()), (assignments, steps)


class _Counting:
    def __init__(self, reader: Any) -> None:
        self.reader, self.reads = reader, 0

    def chunk(self, start: int, end: int) -> list[tuple[int, int]]:
        self.reads += 1
        return self.reader.chunk(start, end)  # type: ignore[no-any-return]


def test_compaction_holes_in_the_source_are_translated_exactly(setup) -> None:  # type: ignore[no-untyped-def]
    cfg, _, _ = setup
    visible = _visible("c1.compacted", 0)
    holes = sorted(set(range(visible[-1])) - set(visible))
    assert holes, "the source was not compacted"
    for i, at in enumerate([holes[0], holes[len(holes) // 2], visible[len(visible) // 3], visible[-1] + 1]):
        group = f"g-compacted-{i}"
        _commit(ALPHA, group, {("c1.compacted", 0): at})
        result = _round(cfg)[group]
        assert result.partitions[0].exact
        got = [origin(m).offset for m in _consume_rest(BETA, group, "alpha.c1.compacted", 1)[0]]
        assert got == [o for o in visible if o >= at]


def test_checkpoints_are_what_mm2s_own_remote_cluster_utils_reads(setup, repo) -> None:  # type: ignore[no-untyped-def]
    if shutil.which("java") is None:
        pytest.fail("java is required for this test")
    jars = maven.fetch("mirror-client", maven.MIRROR_CLIENT, paths.jar_cache())
    ours = _checkpoints("g-random")
    oracle = repo / "tests" / "java" / "RemoteClusterOracle.java"
    out = subprocess.run(["java", "-cp", maven.classpath(jars), str(oracle), "translate", BETA, "alpha", "g-random"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    theirs = {(t, int(p)): int(o) for t, p, o in (line.split("\t") for line in out.splitlines())}
    assert theirs == {tp: c.downstream_offset for tp, c in ours.items()}
    assert len(theirs) == 3


def test_an_empty_partition_checkpoints_to_zero_and_a_topic_never_mirrored_gets_none(setup) -> None:  # type: ignore[no-untyped-def]
    cfg, _, _ = setup
    _commit(ALPHA, "g-sparse", {("c1.sparse", 0): 20, ("c1.sparse", 1): 0, ("c1.never", 0): 0})
    result = _round(cfg)["g-sparse"]
    rows = {(p.source_topic, p.partition): p for p in result.partitions}
    assert set(rows) == {("c1.sparse", 0), ("c1.sparse", 1)}
    assert rows[("c1.sparse", 1)].target_offset == 0 and rows[("c1.sparse", 1)].exact
    assert set(_checkpoints("g-sparse")) == {("alpha.c1.sparse", 0), ("alpha.c1.sparse", 1)}
    target = _committed(BETA, "g-sparse")
    assert target[("alpha.c1.sparse", 1)] == 0
    assert target[("alpha.c1.sparse", 0)] == rows[("c1.sparse", 0)].target_offset


def _committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}


def test_checkpoints_follow_a_group_forward_and_back_when_it_rewinds(setup) -> None:  # type: ignore[no-untyped-def]
    cfg, _, _ = setup
    end = end_offsets(ALPHA, "c1.behind")[0]
    seen = []
    for share in (0.9, 0.95, 0.1):
        _commit(ALPHA, "g-moving", {("c1.behind", 0): int(end * share)})
        _round(cfg)
        seen.append(_checkpoints("g-moving")[("alpha.c1.behind", 0)])
    assert [c.upstream_offset for c in seen] == [int(end * s) for s in (0.9, 0.95, 0.1)]
    assert [c.downstream_offset for c in seen] == [_target_offset("c1.behind", 0, c.upstream_offset) for c in seen]



def test_a_topic_created_later_is_checkpointed_and_its_group_synced(setup) -> None:  # type: ignore[no-untyped-def]
    cfg, _, stream = setup
    create_topic(ALPHA, "c1.later", 2)
    p = producer(ALPHA)
    for i in range(400):
        p.produce("c1.later", f"l{i}".encode(), partition=i % 2)
    p.flush(30)
    wait_for(lambda: _mirrored("c1.later", 2), 120, "c1.later mirrored", stream)
    _commit(ALPHA, "g-later", {("c1.later", 0): 150, ("c1.later", 1): 200})
    _round(cfg)
    assert _committed(BETA, "g-later") == {("alpha.c1.later", 0): _target_offset("c1.later", 0, 150),
                                           ("alpha.c1.later", 1): _target_offset("c1.later", 1, 200)}


def test_an_active_group_on_the_target_is_reported_and_left_alone(setup) -> None:  # type: ignore[no-untyped-def]
    cfg, _, _ = setup
    _commit(ALPHA, "g-busy", {(ORDERS, 2): 1000})
    busy = Consumer({"bootstrap.servers": BETA, "group.id": "g-busy", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, **QUIET})
    busy.subscribe([f"alpha.{ORDERS}"])
    try:
        wait_for(lambda: busy.poll(0.5) is not None or bool(busy.assignment()), 60, "g-busy to join on beta")
        result = _round(cfg)["g-busy"]
        assert "active on beta" in result.group_sync
        assert (f"alpha.{ORDERS}", 2) in _checkpoints("g-busy")
        assert _committed(BETA, "g-busy").get((f"alpha.{ORDERS}", 2), -1) < 0
    finally:
        busy.close()


def test_failback_translates_back_to_the_original_topic_exactly(setup) -> None:  # type: ignore[no-untyped-def]
    cfg, _, _ = setup
    on_beta = {p: read_partition(BETA, f"alpha.{ORDERS}", p, committed=True) for p in range(3)}
    at = {p: len(on_beta[p]) * (p + 1) // 4 for p in range(3)}  # a target offset per partition
    _commit(BETA, "g-failback", {(f"alpha.{ORDERS}", p): on_beta[p][at[p]].offset() for p in range(3)})
    result = _round(cfg, "beta->alpha")["g-failback"]
    assert all(p.exact and p.target_topic == ORDERS for p in result.partitions)
    assert set(_checkpoints("g-failback", "beta", ALPHA)) == {(ORDERS, p) for p in range(3)}
    read = _consume_rest(ALPHA, "g-failback", ORDERS, 3)
    for p in range(3):
        assert [m.offset() for m in read[p]] == [origin(m).offset for m in on_beta[p][at[p]:]]


def test_the_commands_print_translations_and_checkpoint_status(setup) -> None:  # type: ignore[no-untyped-def]
    _, path, _ = setup
    base = [sys.executable, "-m", "mirrorflow", "--config", str(path)]
    out = subprocess.run([*base, "translate", "--group", "g-random", "--source", "alpha", "--target", "beta",
                          "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {(r["source_topic"], r["partition"]) for r in rows} == {(ORDERS, p) for p in range(3)}
    assert all(r["exact"] and r["mm2_offset"] <= r["target_offset"] for r in rows)
    out = subprocess.run([*base, "checkpoint", "--flow", "alpha->beta"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "flow alpha->beta group g-random: 3 partition(s) checkpointed, 3 exact" in out.stdout
    out = subprocess.run([*base, "status", "--flow", "alpha->beta"], capture_output=True, text=True, timeout=60)
    assert "checkpoints:" in out.stdout and "newest" in out.stdout and "checkpoint-latency-ms" in out.stdout


@pytest.mark.airflow
def test_the_flow_dag_runs_a_checkpoint_round_end_to_end(setup, airflow_home) -> None:  # type: ignore[no-untyped-def]
    _, path, _ = setup
    end = end_offsets(ALPHA, ORDERS)[2]
    _commit(ALPHA, "g-dag", {(ORDERS, 2): end - 7})
    with deployment(path) as bag:
        assert bag.import_errors == {}
        dag = bag.dags["mirrorflow_flow__alpha_to_beta"].partial_subset("checkpoints", include_upstream=False)
        run = dag.test()
    assert run.state == "success"
    checkpoint = _checkpoints("g-dag")[(f"alpha.{ORDERS}", 2)]
    assert checkpoint.upstream_offset == end - 7
    assert _committed(BETA, "g-dag") == {(f"alpha.{ORDERS}", 2): checkpoint.downstream_offset}


def test_offset_sync_state_is_bounded_and_forgets_what_the_source_no_longer_holds(setup) -> None:  # type: ignore[no-untyped-def]
    cfg, _, stream = setup
    state = offset_sync_log.read({"bootstrap.servers": BETA, **QUIET}, SYNCS)
    assert max(len(a) for a in state.anchors.values()) <= 8
    assert len(state.anchors[("c1.behind", 0)]) >= 3, "the 10,000 records came in many batches"
    assert state.live_records() <= 9 * len(state.partitions())

    admin = AdminClient({"bootstrap.servers": ALPHA, **QUIET})
    admin.delete_records([TopicPartition("c1.behind", 0, 6000)])[TopicPartition("c1.behind", 0, 6000)].result(30)
    create_topic(ALPHA, "c1.doomed", 1)
    p = producer(ALPHA)
    for i in range(20):
        p.produce("c1.doomed", f"d{i}".encode(), partition=0)
    p.flush(30)
    wait_for(lambda: _mirrored("c1.doomed", 1), 120, "c1.doomed mirrored", stream)
    admin.delete_topics(["c1.doomed"])["c1.doomed"].result(30)

    def forgotten() -> bool:  # batches must run for the driver to prune: a record now and then
        p.produce(ORDERS, b"tick", partition=2)
        p.flush(30)
        now = offset_sync_log.read({"bootstrap.servers": BETA, **QUIET}, SYNCS)
        behind = [a.upstream for a in now.anchors.get(("c1.behind", 0), {}).values()]
        return (not any(t == "c1.doomed" for t, _ in now.partitions())
                and len([u for u in behind if u < 6000]) == 1)

    wait_for(forgotten, 180, "the deleted topic's state and the expired anchors gone", stream)
    assert "c1.doomed deleted" in stream.output()

    _commit(ALPHA, "g-expired", {("c1.behind", 0): 100})
    _commit(ALPHA, "g-kept", {("c1.behind", 0): 7000})
    results = _round(cfg)
    [expired] = results["g-expired"].partitions
    assert not expired.exact and "below c1.behind-0's log start 6000 on alpha" in expired.note
    [kept] = results["g-kept"].partitions
    assert kept.exact and kept.target_offset == _target_offset("c1.behind", 0, 7000)
    assert expired.target_offset == _target_offset("c1.behind", 0, 6000)
    read = _consume_rest(BETA, "g-kept", "alpha.c1.behind", 1)
    assert [origin(m).offset for m in read[0]] == list(range(7000, 10_000))


def test_checkpoints_stay_monotonic_across_a_crash_of_the_mirror(setup) -> None:  # type: ignore[no-untyped-def]
    cfg, _, stream = setup
    p = producer(ALPHA)
    history: list[int] = []
    for step in range(3):
        for i in range(300):
            p.produce(ORDERS, f"more-{step}-{i}".encode(), partition=0)
        p.flush(30)
        end = end_offsets(ALPHA, ORDERS)[0]
        _commit(ALPHA, "g-steady", {(ORDERS, 0): end - 100})
        if step == 1:
            stream.kill9()
            stream.start("--max-records-per-batch", "500", "--linger-ms", "0")
        _round(cfg)
        history.append(_checkpoints("g-steady")[(f"alpha.{ORDERS}", 0)].downstream_offset)
    assert history == sorted(history)
    wait_for(lambda: _mirrored(ORDERS, 3), 180, "the mirror to catch up after the crash", stream)
    result = _round(cfg)["g-steady"]
    assert result.partitions[0].exact
    # A partition whose first records come after the restart starts at its origin: offset 0 translates exactly.
    p.produce("c1.never", b"first", partition=0)
    p.flush(30)
    wait_for(lambda: _mirrored("c1.never", 1), 120, "c1.never mirrored", stream)
    _commit(ALPHA, "g-late", {("c1.never", 0): 0})
    [late] = _round(cfg)["g-late"].partitions
    assert late.exact and late.target_offset == 0, late.note
