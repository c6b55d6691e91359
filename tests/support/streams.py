"""Test support for the mirror stream: run `mirrorflow stream` as a real process, read topics whole."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from mirrorflow.rules.provenance import HEADER, Provenance

QUIET = {"log_level": 3}


def config_text(aliases: tuple[str, str], ports: tuple[int, int], flows: list[str], extra: str = "") -> str:
    a, b = aliases
    lines = [f"clusters = {a}, {b}", f"{a}.bootstrap.servers = 127.0.0.1:{ports[0]}",
             f"{b}.bootstrap.servers = 127.0.0.1:{ports[1]}", "replication.factor = 1",
             "offset-syncs.topic.replication.factor = 1", "refresh.topics.interval.seconds = 10",
             *(f"{f}.enabled = true" for f in flows), extra]
    return "\n".join(lines) + "\n"


class StreamProcess:
    """`mirrorflow stream --flow F` in its own process group, so a test can kill it like a crash would."""

    def __init__(self, config: Path, flow: str, workdir: Path, env: Mapping[str, str] | None = None) -> None:
        self.config, self.flow, self.workdir = config, flow, workdir
        self.env = {**os.environ, **env} if env else None  # the stream's and its workers' environment
        self.checkpoint = workdir / "checkpoint"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def log(self) -> Path:
        return self.workdir / f"stream-{self.starts}.log"

    def start(self, *extra: str) -> None:
        self.starts += 1
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mirrorflow", "--config", str(self.config), "stream", "--flow", self.flow,
                 "--checkpoint", str(self.checkpoint), "--driver-memory", "640m", *extra],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=self.env)

    def kill9(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def signal_all(self, sig: int) -> None:
        """`sig` to every process of the stream's session: the driver, Spark's JVM and its Python workers (whose
        daemon runs in a process group of its own)."""
        from mirrorflow.dev.local_airflow import session_processes

        assert self.proc is not None
        for pid in session_processes(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def stop(self) -> int:
        """SIGTERM to the driver only (a graceful stop); the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
        return self.proc.returncode

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def environ(name: str, value: str) -> Iterator[None]:
    """`name` set to `value` in this process's environment for the block, then as it was."""
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def create_topic(bootstrap: str, topic: str, partitions: int, **configs: str) -> None:
    """Creates a topic and returns once the broker's metadata lists it with a leader for every partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(30)
    # The controller answers before every broker's metadata cache holds the topic: a listing right after the
    # create can miss it (seen once in a clean-clone CI).
    deadline = time.monotonic() + 30
    while True:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (found is not None and found.error is None and len(found.partitions) == partitions
                and all(p.leader >= 0 for p in found.partitions.values())):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{bootstrap}: topic {topic} not in the metadata 30 s after its creation")
        time.sleep(0.05)


def producer(bootstrap: str, **extra: Any) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, **QUIET, **extra})


def read_partition(bootstrap: str, topic: str, partition: int, *, committed: bool = False,
                   timeout: float = 60) -> list[Any]:
    """Every record of a partition from its start to its current end (LSO under read_committed)."""
    # A partition a transactional writer wrote ends in a marker: its end shows in an empty fetch, held by the broker
    # for fetch.wait.max.ms (500 ms by default).
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader", "enable.auto.commit": False,
                  "enable.partition.eof": True, "isolation.level": "read_committed" if committed else
                  "read_uncommitted", "fetch.wait.max.ms": 20, **QUIET})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        if high <= low:
            return []
        c.assign([TopicPartition(topic, partition, low)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in c.consume(5000, 1.0):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        return out
                    if m.error().code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
                        continue  # a broker restarting: the consumer reconnects
                    raise AssertionError(m.error().str())
                out.append(m)
        raise AssertionError(f"{topic}-{partition}: not read to its end in {timeout} s")
    finally:
        c.close()


def partition_count(bootstrap: str, topic: str) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(topic, timeout=30)
    t = md.topics.get(topic)
    return 0 if t is None or t.error is not None else len(t.partitions)


def end_offsets(bootstrap: str, topic: str, timeout: float = 30) -> list[int]:
    """The partitions' end offsets; [] while the topic is missing or its leaders are not settled."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-ends", **QUIET})
    try:
        n = partition_count(bootstrap, topic)
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1] for p in range(n)]
    except KafkaException:
        return []
    finally:
        c.close()


def stall_bounds(samples: Sequence[tuple[float, int | None]]) -> tuple[float, float]:
    """From a topic's summed end offsets sampled at times (seconds from 0; None where unreadable), how long the
    topic took no record at most and at least: the longest time between seen growths (or 0 and the last sample), and
    the longest time between two readable samples of the same sum (end offsets never fall, so nothing was written
    between them, whatever could not be read in between)."""
    grew: list[float] = []
    last: int | None = None
    first_at: dict[int, float] = {}
    at_least = 0.0
    for t, total in samples:
        if total is None:
            continue
        if last is not None and total > last:
            grew.append(t)
        last = total
        at_least = max(at_least, t - first_at.setdefault(total, t))
    end = samples[-1][0] if samples else 0.0
    at_most = max(b - a for a, b in zip([0.0, *grew], [*grew, end], strict=True))
    return at_most, at_least


def record_counts(bootstrap: str, topic: str) -> list[int]:
    """Per partition, how many committed records it holds ([] while unreadable). Unlike end offsets, blind to the
    transaction markers a flow's commits leave (one offset per partition and commit)."""
    try:
        partitions = range(partition_count(bootstrap, topic))
        return [len(read_partition(bootstrap, topic, p, committed=True)) for p in partitions]
    except KafkaException:
        return []


def origin(message: Any) -> Provenance:
    """The last hop's provenance of a mirrored record."""
    values = [v for k, v in message.headers() or [] if k == HEADER]
    assert values, f"no provenance header on {message.topic()}-{message.partition()}@{message.offset()}"
    return Provenance.parse(values[-1])


def without_provenance(headers: list[tuple[str, bytes | None]] | None) -> list[tuple[str, bytes | None]]:
    return [(k, v) for k, v in headers or [] if k != HEADER]


FENCED_TEXTS = ("fenced: another writer initialised", "transactional producer was fenced by another")


def fenced_writes(output: str) -> list[str]:
    """The lines of a stream's output that say one of its writers was fenced (stream_writer: a producer of the
    task, or one a worker kept from an earlier batch)."""
    return [line for line in output.splitlines() if any(t in line for t in FENCED_TEXTS)]


def wait_for(check: Callable[[], bool], timeout: float, what: str, stream: StreamProcess | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if stream is not None and not stream.alive():
            raise AssertionError(f"the stream exited while waiting for {what}:\n{stream.output()[-3000:]}")
        time.sleep(1)
    tail = stream.output()[-3000:] if stream is not None else ""
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{tail}")


def mirrored_offsets(bootstrap: str, topic: str, partitions: int, *, committed: bool = False) -> list[list[int]]:
    """Per target partition, the source offsets its records carry (in target order)."""
    return [[origin(m).offset for m in read_partition(bootstrap, topic, p, committed=committed)]
            for p in range(partitions)]


class SteadyProducer:
    """Produces `{prefix}{i}` round-robin over the partitions in a thread until stopped (or `limit`)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, *, limit: int | None = None,
                 keyed: bool = False, pause_every: int = 500) -> None:
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.limit, self.keyed, self.pause_every = limit, keyed, pause_every
        self.acknowledged: list[bytes] = []  # values the brokers took, in no particular order
        self.failed: list[str] = []  # delivery errors: a record the test must not count as produced
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _delivered(self, error: Any, message: Any) -> None:
        if error is None:
            self.acknowledged.append(message.value())
        else:
            self.failed.append(str(error))

    def _run(self) -> None:
        p, i = producer(self.bootstrap), 0
        while not self._stop.is_set() and (self.limit is None or i < self.limit):
            p.produce(self.topic, f"r{i}".encode(), f"k{i}".encode() if self.keyed else None,
                      partition=i % self.partitions, on_delivery=self._delivered)
            i += 1
            if i % self.pause_every == 0:
                p.poll(0)
                time.sleep(0.05)
        p.flush(120)
