"""`mirrorflow takeover --from mm2` against a real MirrorMaker 2 (4.3.1, dedicated mode) mirroring under traffic.

MM2 runs the flow with a consumer group being checkpointed, is killed (kill -9: copies past its last commit stay on
the target); the takeover refuses while MM2 runs, plans, then writes the flow's positions; mirrorflow's stream goes
on with the traffic; the flow is handed back to MM2, which goes on, is stopped cleanly and taken over again. Every
source record is then on the target once in order (MM2's own repeats aside, which the plan counts), and the group's
checkpoint on the target is exact (never behind MM2's, never past the data).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from mirrorflow.jobs.checkpoints import read_checkpoints
from mirrorflow.model import config, paths
from mirrorflow.spark import maven
from support.clusters import PORTS
from support.streams import QUIET, StreamProcess, create_topic, end_offsets, producer, read_partition, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.java]
ALPHA = f"127.0.0.1:{PORTS['alpha']}"
BETA = f"127.0.0.1:{PORTS['beta']}"
TOPIC, REMOTE, PARTITIONS, GROUP = "tk.orders", "tka.tk.orders", 3, "tk-app"


class Traffic:
    """Keyed records with unique values, a few hundred a second, until stopped."""

    def __init__(self, first: int = 0, topic: str = TOPIC) -> None:
        self.sent, self.topic = first, topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        p = producer(ALPHA)
        while not self._stop.is_set():
            for _ in range(20):
                p.produce(self.topic, f"value-{self.sent}".encode(), f"key-{self.sent % 17}".encode(),
                          partition=self.sent % PARTITIONS, headers=[("n", str(self.sent).encode())])
                self.sent += 1
            p.poll(0)
            time.sleep(0.05)
        p.flush(30)


def _properties(work: Path) -> Path:
    path = work / "mm2.properties"
    path.write_text(f"""clusters = tka, tkb
tka.bootstrap.servers = {ALPHA}
tkb.bootstrap.servers = {BETA}
tka->tkb.enabled = true
tka->tkb.topics = tk\\\\..*
groups = {GROUP}
tasks.max = 1
replication.factor = 1
offset-syncs.topic.replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1
config.storage.replication.factor = 1
sync.topic.acls.enabled = false
refresh.groups.interval.seconds = 2
refresh.topics.interval.seconds = 5
emit.checkpoints.interval.seconds = 1
tkb.offset.flush.interval.ms = 3000
""")
    return path


@pytest.fixture(scope="module")
def mm2_jars(stream_clusters: config.MirrorConfig) -> Path:
    return maven.fetch("mirror-maker", maven.MIRROR_MAKER, paths.jar_cache())


def _mm2(jars: Path, props: Path, log: Path) -> subprocess.Popen[bytes]:
    logging = props.parent / "mm2-log4j2.properties"
    logging.write_text("rootLogger.level = INFO\nrootLogger.appenderRef.out.ref = out\nappender.out.type = Console\n"
                       "appender.out.name = out\nappender.out.layout.type = PatternLayout\n"
                       "appender.out.layout.pattern = %d %p %c{1}: %m%n\n")
    with open(log, "wb") as out:
        return subprocess.Popen(["java", "-Xmx512m", f"-Dlog4j2.configurationFile={logging}", "-cp",
                                 maven.classpath(jars),
                                 "org.apache.kafka.connect.mirror.MirrorMaker", str(props)],
                                stdout=out, stderr=subprocess.STDOUT)


def _cli(props: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mirrorflow", "--config", str(props), *args],
                          capture_output=True, text=True, timeout=300)


def _commit_group(per_partition: int) -> dict[int, int]:
    """The group commits having read the first `per_partition` records of each partition."""
    c = Consumer({"bootstrap.servers": ALPHA, "group.id": GROUP, "enable.auto.commit": False, **QUIET})
    c.commit(offsets=[TopicPartition(TOPIC, p, per_partition) for p in range(PARTITIONS)], asynchronous=False)
    c.close()
    return dict.fromkeys(range(PARTITIONS), per_partition)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("takeover")


def test_a_flow_taken_over_from_a_killed_mm2_resumes_without_a_gap_or_a_re_copy(mm2_jars: Path, work: Path) -> None:
    props = _properties(work)
    create_topic(ALPHA, TOPIC, PARTITIONS)
    traffic = Traffic()
    traffic.start()
    mm2 = _mm2(mm2_jars, props, work / "mm2.log")
    stream = StreamProcess(props, "tka->tkb", work / "stream")
    try:
        wait_for(lambda: sum(end_offsets(BETA, REMOTE)) > 3_000 if REMOTE in _topics() else False, 180,
                 "MM2's first copies")
        committed_by_group = _commit_group(500)
        wait_for(lambda: _mm2_checkpoints(), 120, "MM2's checkpoints of the group")
        running = _cli(props, "takeover", "--flow", "tka->tkb", "--from", "mm2", "--dry-run")
        assert running.returncode == 1 and "still running" in running.stdout, running.stdout + running.stderr
        assert "worker group tka-mm2 on tkb has 1 member(s)" in running.stdout  # a Connect group, seen as one
        mm2.kill()
        mm2.wait(30)
        mm2_checkpoints = _mm2_checkpoints()
        dry = running
        deadline = time.monotonic() + 90
        while dry.returncode == 1 and time.monotonic() < deadline:  # until its heartbeats and worker session lapse
            time.sleep(3)
            dry = _cli(props, "takeover", "--flow", "tka->tkb", "--from", "mm2", "--dry-run", "--json")
        assert dry.returncode == 0, dry.stdout + dry.stderr
        planned = json.loads(dry.stdout)
        assert not planned["applied"] and planned["running"] is None
        taken = _cli(props, "takeover", "--flow", "tka->tkb", "--from", "mm2", "--json")
        assert taken.returncode == 0, taken.stdout + taken.stderr
        plan = json.loads(taken.stdout)
        print("takeover:", *plan["stopped"], *(f"{p['topic']}-{p['partition']}: committed {p['committed']}, end "
                                               f"{p['target_end']}, resume {p['resume']}, past the commit "
                                               f"{p['since_commit']}, repeats {p['repeats']}"
                                               for p in plan["partitions"]), sep="\n  ")
        assert plan["applied"]
        ours = {(p["topic"], p["partition"]): p for p in plan["partitions"]}
        assert all(p["refused"] is None for p in ours.values())
        stream.start()
        time.sleep(15)
        traffic.stop()
        source_ends = end_offsets(ALPHA, TOPIC)
        wait_for(lambda: _copied(source_ends, {p: ours[(TOPIC, p)]["repeats"] for p in range(PARTITIONS)}), 240,
                 "every source record on the target", stream)
        for p in range(PARTITIONS):  # in order, once each, MM2's own repeats aside
            source = [m.value() for m in read_partition(ALPHA, TOPIC, p)]
            values = [m.value() for m in read_partition(BETA, REMOTE, p)]
            assert _without_repeats(values) == source, f"partition {p}"
            assert len(values) - len(set(values)) == ours[(TOPIC, p)]["repeats"], f"partition {p}"
        translated = _cli(props, "translate", "--group", GROUP, "--source", "tka", "--target", "tkb", "--json")
        assert translated.returncode == 0, translated.stdout + translated.stderr
        rows = {r["partition"]: r for r in json.loads(translated.stdout) if r["source_topic"] == TOPIC}
        rounds = _cli(props, "checkpoint", "--flow", "tka->tkb")
        assert rounds.returncode == 0, rounds.stdout + rounds.stderr
        after = _checkpoints()
        for p, offset in committed_by_group.items():
            key = (GROUP, REMOTE, p)
            exact = _exact_target_offset(p, offset)
            # Exact inside MM2's copies: the takeover matched them one to one from an older sync (K5)
            assert rows[p]["target_offset"] == exact and rows[p]["exact"], (rows[p], exact)
            assert mm2_checkpoints[key] <= after[key] == exact, (p, mm2_checkpoints[key], after[key], exact)
        repeats = sum(p["repeats"] for p in ours.values())
        assert _audit(props) == {"missing": 0, "differing": 0, "behind": 0, "duplicated": repeats}  # MM2's copies too

        traffic = Traffic(first=traffic.sent)  # and back to MirrorMaker 2, under traffic again
        traffic.start()
        assert stream.stop() == 0
        handed = _cli(props, "handback", "--flow", "tka->tkb", "--to", "mm2", "--json")
        assert handed.returncode == 0, handed.stdout + handed.stderr
        commits = {(h["topic"], h["partition"]): h["commit"] for h in json.loads(handed.stdout)}
        assert all(commits[(TOPIC, p)] + 1 >= source_ends[p] for p in range(PARTITIONS))  # past what it copied
        mm2 = _mm2(mm2_jars, props, work / "mm2-again.log")
        time.sleep(20)
        traffic.stop()
        source_ends = end_offsets(ALPHA, TOPIC)
        wait_for(lambda: _copied(source_ends, {p: ours[(TOPIC, p)]["repeats"] for p in range(PARTITIONS)}), 240,
                 "every source record on the target again, copied by MirrorMaker 2")
        time.sleep(5)  # anything MM2 would copy twice has landed by now
        _each_once_but_mm2s_repeats(props, ours)  # no gap and nothing twice across both moves

        traffic = Traffic(first=traffic.sent)  # and over again from MM2 stopped cleanly (SIGTERM)
        traffic.start()
        time.sleep(5)
        mm2.terminate()
        assert mm2.wait(60) is not None
        deadline = time.monotonic() + 90
        taken = _cli(props, "takeover", "--flow", "tka->tkb", "--from", "mm2", "--json")
        while taken.returncode == 1 and json.loads(taken.stdout)["running"] and time.monotonic() < deadline:
            time.sleep(3)  # until its heartbeats are stale
            taken = _cli(props, "takeover", "--flow", "tka->tkb", "--from", "mm2", "--json")
        assert taken.returncode == 0, taken.stdout + taken.stderr
        again = {(p["topic"], p["partition"]): p for p in json.loads(taken.stdout)["partitions"]}
        assert all(again[(TOPIC, p)]["repeats"] == ours[(TOPIC, p)]["repeats"] for p in range(PARTITIONS))
        stream.start()
        time.sleep(15)
        traffic.stop()
        source_ends = end_offsets(ALPHA, TOPIC)
        wait_for(lambda: _copied(source_ends, {p: ours[(TOPIC, p)]["repeats"] for p in range(PARTITIONS)}), 240,
                 "every source record on the target after the second takeover", stream)
        _each_once_but_mm2s_repeats(props, ours)
    finally:
        traffic.stop()
        if mm2.poll() is None:
            mm2.kill()
            mm2.wait(30)
        if stream.proc is not None and stream.proc.poll() is None:
            stream.stop()


def _each_once_but_mm2s_repeats(props: Path, ours: dict[tuple[str, int], dict[str, int]]) -> None:
    """Every source record on the target in order, once apart from MM2's repeats the plan counted; the audit agrees."""
    for p in range(PARTITIONS):
        values = [m.value() for m in read_partition(BETA, REMOTE, p)]
        assert _without_repeats(values) == [m.value() for m in read_partition(ALPHA, TOPIC, p)], f"partition {p}"
        assert len(values) - len(set(values)) == ours[(TOPIC, p)]["repeats"], f"partition {p}"
    assert _audit(props) == {"missing": 0, "differing": 0, "behind": 0,
                             "duplicated": sum(p["repeats"] for p in ours.values())}


def _audit(props: Path, flow: str = "tka->tkb", topic: str = TOPIC) -> dict[str, int]:
    """The audit's totals over every record of the flow's topic: copies without mirrorflow's provenance header (the
    old mirror's) are attributed by content."""
    audited = _cli(props, "audit", "--flow", flow, "--topics", topic.replace(".", "\\."), "--json")
    assert audited.returncode in (0, 1), audited.stdout + audited.stderr
    report = json.loads(audited.stdout)
    print("audit:", report["summary"])
    return {what: report[what] for what in ("missing", "differing", "behind", "duplicated")}


def _topics() -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": BETA, **QUIET}).list_topics(timeout=10).topics)


def _checkpoints() -> dict[tuple[str, str, int], int]:
    found = read_checkpoints({"bootstrap.servers": BETA, **QUIET}, "tka.checkpoints.internal")
    return {k: c.downstream_offset for k, c in found.items()}


def _mm2_checkpoints() -> dict[tuple[str, str, int], int]:
    found = _checkpoints()
    return found if all((GROUP, REMOTE, p) in found for p in range(PARTITIONS)) else {}


def _copied(source_ends: list[int], repeats: dict[int, int]) -> bool:
    return all(n >= source_ends[p] + repeats[p] for p, n in enumerate(end_offsets(BETA, REMOTE)))


def _without_repeats(values: list[bytes | None]) -> list[bytes | None]:
    seen: set[bytes | None] = set()
    out = []
    for v in values:
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def _exact_target_offset(partition: int, upstream: int) -> int:
    """One past the last copy of a record the group consumed (source offsets below `upstream`)."""
    consumed = {m.value() for m in read_partition(ALPHA, TOPIC, partition)[:upstream]}
    copies = read_partition(BETA, REMOTE, partition)
    return 1 + max((m.offset() for m in copies if m.value() in consumed), default=-1)


MM1_TOPIC, MM1_REMOTE, MM1_GROUP = "tk1.orders", "mka.tk1.orders", "mm1-stand-in"


class MirrorMaker1:
    """What MirrorMaker 1 or a Go mirror maker does, in a thread: a consumer group reads the source, a producer
    writes each record to the same partition of a topic on the target (named with the source's alias first, as
    `--prefix` does), and the group commits what it read every second once the writes are acknowledged. `crash`
    stops it with copies past its last commit."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def crash(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        c = Consumer({"bootstrap.servers": ALPHA, "group.id": MM1_GROUP, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", **QUIET})
        c.subscribe([MM1_TOPIC])
        p = producer(BETA)
        committed_at = time.monotonic()
        while not self._stop.is_set():
            for m in c.consume(200, 0.2):
                if m.error() is None:
                    p.produce(MM1_REMOTE, m.value(), m.key(), partition=m.partition(), headers=m.headers(),
                              timestamp=m.timestamp()[1])
            p.poll(0)
            if time.monotonic() - committed_at > 1.0:
                p.flush(30)
                c.commit(asynchronous=False)
                committed_at = time.monotonic()
            time.sleep(0.3)
        for m in c.consume(200, 5.0):  # copies made after the last commit: acknowledged, never committed
            if m.error() is None:
                p.produce(MM1_REMOTE, m.value(), m.key(), partition=m.partition(), headers=m.headers(),
                          timestamp=m.timestamp()[1])
        p.flush(30)
        c.close()


def test_a_flow_taken_over_from_a_mirrormaker_1_group_resumes_without_a_gap_or_a_re_copy(
        stream_clusters: config.MirrorConfig, work: Path) -> None:
    props = work / "mm1.properties"
    props.write_text(f"""clusters = mka, mkb
mka.bootstrap.servers = {ALPHA}
mkb.bootstrap.servers = {BETA}
mka->mkb.enabled = true
mka->mkb.topics = tk1\\..*
replication.factor = 1
offset-syncs.topic.replication.factor = 1
""")
    create_topic(ALPHA, MM1_TOPIC, PARTITIONS)
    create_topic(BETA, MM1_REMOTE, PARTITIONS)
    traffic = Traffic(topic=MM1_TOPIC)
    traffic.start()
    mm1 = MirrorMaker1()
    mm1.start()
    stream = StreamProcess(props, "mka->mkb", work / "mm1-stream")
    try:
        wait_for(lambda: sum(end_offsets(BETA, MM1_REMOTE)) > 3_000, 120, "the stand-in's first copies")
        running = _cli(props, "takeover", "--flow", "mka->mkb", "--from", "mm1", "--group", MM1_GROUP, "--dry-run")
        assert running.returncode == 1 and "still running" in running.stdout, running.stdout + running.stderr
        mm1.crash()
        taken = _cli(props, "takeover", "--flow", "mka->mkb", "--from", "mm1", "--group", MM1_GROUP, "--json")
        assert taken.returncode == 0, taken.stdout + taken.stderr
        plan = json.loads(taken.stdout)
        assert plan["applied"] and all(p["refused"] is None for p in plan["partitions"])
        assert sum(p["since_commit"] for p in plan["partitions"]) > 0  # copies past the group's last commit
        stream.start()
        time.sleep(15)
        traffic.stop()
        source_ends = end_offsets(ALPHA, MM1_TOPIC)
        wait_for(lambda: all(n >= source_ends[p] for p, n in enumerate(end_offsets(BETA, MM1_REMOTE))), 240,
                 "every source record on the target", stream)
        time.sleep(3)
        for p in range(PARTITIONS):  # in order, each once
            assert [m.value() for m in read_partition(BETA, MM1_REMOTE, p)] == \
                [m.value() for m in read_partition(ALPHA, MM1_TOPIC, p)], f"partition {p}"
        assert _audit(props, "mka->mkb", MM1_TOPIC) == {"missing": 0, "differing": 0, "behind": 0, "duplicated": 0}
    finally:
        traffic.stop()
        mm1.crash()
        if stream.proc is not None and stream.proc.poll() is None:
            stream.stop()
