"""Exactly-once under crashes, fencing of a second instance, and loop-free active/active (real Kafka and Spark).

Each scenario uses its own cluster aliases for the same local brokers, so flows, leases, offset-sync
topics and remote topic names never collide with another module's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from mirrorflow.jobs import topology
from mirrorflow.model import config
from mirrorflow.rules.provenance import HEADER, Provenance
from support import ports
from support.clusters import PORTS
from support.streams import (
    SteadyProducer,
    StreamProcess,
    config_text,
    create_topic,
    end_offsets,
    fenced_writes,
    mirrored_offsets,
    producer,
    read_partition,
    record_counts,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]
ALPHA = f"127.0.0.1:{PORTS['alpha']}"
BETA = f"127.0.0.1:{PORTS['beta']}"
BOTH = (PORTS["alpha"], PORTS["beta"])
KEEP_METRICS_PORT = ports.KEEP_METRICS


def _write_config(tmp: Path, aliases: tuple[str, str], flows: list[str], extra: str) -> Path:
    path = tmp / "mirror.properties"
    path.write_text(config_text(aliases, BOTH, flows, extra))
    return path


def test_a_second_instance_of_an_exactly_once_flow_is_refused_while_the_first_copies(
        stream_clusters: config.MirrorConfig, tmp_path: Path) -> None:
    # Kills of every kind in every mode: test_chaos.
    cfg = _write_config(tmp_path, ("east", "west"), ["east->west"],
                        "east->west.topics = eos\\..*\nwest.exactly.once.source.support = enabled\n")
    create_topic(ALPHA, "eos.orders", 3)
    stream = StreamProcess(cfg, "east->west", tmp_path / "first")
    stream.start()
    with SteadyProducer(ALPHA, "eos.orders", 3, limit=20_000, pause_every=300):
        wait_for(lambda: sum(end_offsets(BETA, "east.eos.orders") or [0]) > 0, 240, "first records", stream)
        second = StreamProcess(cfg, "east->west", tmp_path / "second")
        second.start()
        assert second.proc is not None and second.proc.wait(120) == 1
        assert "already running" in second.output(), second.output()[-2000:]
    source_ends = end_offsets(ALPHA, "eos.orders")

    def complete() -> bool:
        got = mirrored_offsets(BETA, "east.eos.orders", 3, committed=True)
        return all(len(set(g)) >= n for n, g in zip(source_ends, got, strict=True))

    wait_for(complete, 300, "every record under read_committed", stream)
    for partition, got in enumerate(mirrored_offsets(BETA, "east.eos.orders", 3, committed=True)):
        assert got == list(range(source_ends[partition])), partition
    assert stream.stop() == 0, stream.output()[-2000:]
    assert fenced_writes(stream.output()) == []


def test_exactly_once_keeps_one_transactional_producer_per_task_slot_across_batches(
        stream_clusters: config.MirrorConfig, tmp_path: Path) -> None:
    cfg = _write_config(tmp_path, ("keep", "kept"), ["keep->kept"],
                        "keep->kept.topics = keep\\..*\nkept.exactly.once.source.support = enabled\n")
    create_topic(ALPHA, "keep.many", 6)
    stream = StreamProcess(cfg, "keep->kept", tmp_path / "stream")
    # One core: one task slot, one Python worker. Before slots, every batch initialised one producer per partition.
    # Batches of 60 records that do not linger: ten batches at least.
    stream.start("--master", "local[1]", "--max-records-per-batch", "60", "--linger-ms", "0",
                 "--metrics-port", str(KEEP_METRICS_PORT))
    try:
        p = producer(ALPHA)
        for i in range(600):
            p.produce("keep.many", f"k-{i}".encode(), partition=i % 6)
        assert p.flush(30) == 0
        wait_for(lambda: sum(len(read_partition(BETA, "keep.keep.many", n, committed=True, timeout=10))
                             for n in range(6)) == 600 if end_offsets(BETA, "keep.keep.many") else False,
                 240, "every record, once", stream)
        for n in range(6):
            values = [m.value() for m in read_partition(BETA, "keep.keep.many", n, committed=True)]
            assert values == [f"k-{i}".encode() for i in range(n, 600, 6)], (n, values[:5])
        with urllib.request.urlopen(f"http://127.0.0.1:{KEEP_METRICS_PORT}/status", timeout=10) as answer:
            [status] = json.loads(answer.read())
        assert status["batches"] >= 8, status["batches"]
        assert status["transactional-producer-inits"] == 1, status["transactional-producer-inits"]
        # The copier's source consumer is the worker's too: built by the first task that read, kept by the others.
        assert status["source-consumer-inits"] == 1 and status["reading-tasks"] >= 8, status
        with urllib.request.urlopen(f"http://127.0.0.1:{KEEP_METRICS_PORT}/metrics", timeout=10) as answer:
            assert 'mirrorflow_transactional_producer_inits_total{flow="keep->kept"} 1' in answer.read().decode()
        assert stream.stop() == 0
    finally:
        if stream.proc is not None and stream.proc.poll() is None:
            stream.stop()


@pytest.mark.parametrize("policy", ["default", "identity"])
def test_active_active_never_loops(stream_clusters: config.MirrorConfig, tmp_path: Path, policy: str) -> None:
    a, b = ("north", "south") if policy == "default" else ("left", "right")
    topic = f"aa-{policy}"
    extra = f"topics = {topic}.*\n"
    if policy == "identity":
        extra += "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
    cfg = _write_config(tmp_path, (a, b), [f"{a}->{b}", f"{b}->{a}"], extra)
    for bootstrap in (ALPHA, BETA):
        create_topic(bootstrap, topic, 2)
    derived = f"{topic}-derived"  # an application on b writes it from mirrored input, forwarding its headers
    create_topic(BETA, derived, 1)
    remote_on_b = f"{a}.{topic}" if policy == "default" else topic
    remote_on_a = f"{b}.{topic}" if policy == "default" else topic
    streams = [StreamProcess(cfg, f"{a}->{b}", tmp_path / "ab"), StreamProcess(cfg, f"{b}->{a}", tmp_path / "ba")]
    for s in streams:
        s.start()
    try:
        for bootstrap, tag in ((ALPHA, a), (BETA, b)):
            p = producer(bootstrap)
            for i in range(200):
                p.produce(topic, f"{tag}-{i}".encode(), partition=i % 2)
            p.flush(30)
        p = producer(BETA)
        p.produce(derived, b"derived-0", partition=0, headers=[(HEADER, Provenance(a, topic, 0, 5).encode())])
        p.flush(30)
        own = 200
        if policy == "identity":  # each side holds its own records plus the other side's, once
            wait_for(lambda: sum(record_counts(ALPHA, topic)) >= 2 * own and sum(record_counts(BETA, topic)) >= 2 * own,
                     300, "both directions", streams[0])
        else:
            wait_for(lambda: sum(record_counts(BETA, remote_on_b)) >= own
                     and sum(record_counts(ALPHA, remote_on_a)) >= own, 300, "both directions", streams[0])
        time.sleep(15)  # long enough for a loop to show: several micro-batches in each direction
        for bootstrap, remote, tag, other in ((BETA, remote_on_b, a, b), (ALPHA, remote_on_a, b, a)):
            values = [m.value().decode() for p in range(2)
                      for m in read_partition(bootstrap, remote, p, committed=True)]
            counts = Counter(v.split("-")[0] for v in values)
            expected = {tag: own, other: own} if policy == "identity" else {tag: own}
            assert counts == expected, (remote, counts)
            assert len(values) == len(set(values))
        # New data whose forwarded header names a and another topic: mirrored to a, once, and not back to b.
        derived_on_a = derived if policy == "identity" else f"{b}.{derived}"
        wait_for(lambda: sum(record_counts(ALPHA, derived_on_a)) >= 1, 120, "the forwarded record", streams[1])
        assert [m.value() for m in read_partition(ALPHA, derived_on_a, 0, committed=True)] == [b"derived-0"]
        assert [m.value() for m in read_partition(BETA, derived, 0)] == [b"derived-0"]
        if policy == "identity":  # each side refuses the other's copies of its own records, and says so
            expected = {f"{a}->{b}": own + 1, f"{b}->{a}": own}
            wait_for(lambda: _refused(cfg) == expected, 60, "the refused counts in status", streams[0])
            for s in streams:
                assert "record(s) refused from offset" in s.output(), s.output()[-3000:]
        else:
            assert _refused(cfg) == {f"{a}->{b}": 0, f"{b}->{a}": 0}
        if policy == "default":
            assert sum(end_offsets(ALPHA, f"{a}.{b}.{topic}") or [0]) == 0
            assert sum(end_offsets(BETA, f"{b}.{a}.{topic}") or [0]) == 0
            _assert_each_side_hears_the_other(config.load(cfg), a, b, streams[0])
    finally:
        for s in streams:
            s.stop()


def _refused(cfg: Path) -> dict[str, int]:
    """What `mirrorflow status --json` says each flow refused."""
    out = subprocess.run([sys.executable, "-m", "mirrorflow", "--config", str(cfg), "status", "--json"],
                         capture_output=True, text=True, timeout=60, check=True)
    return {f["flow"]: f.get("refused-count", 0) for f in json.loads(out.stdout)}


def test_a_record_too_large_for_the_target_stops_the_flow_naming_it(
        stream_clusters: config.MirrorConfig, tmp_path: Path) -> None:
    cfg = _write_config(tmp_path, ("big", "small"), ["big->small"], "topics = big\\..*\n")
    create_topic(ALPHA, "big.t", 1, **{"max.message.bytes": "2000000"})
    create_topic(BETA, "big.big.t", 1, **{"max.message.bytes": "100000"})
    p = producer(ALPHA)
    p.produce("big.t", b"small", partition=0)
    p.produce("big.t", b"x" * 500_000, partition=0)
    p.flush(30)
    stream = StreamProcess(cfg, "big->small", tmp_path)
    stream.start()
    assert stream.proc is not None and stream.proc.wait(300) == 1, stream.output()[-3000:]
    error = [line for line in stream.output().splitlines() if line.startswith("mirrorflow: error:")]
    assert len(error) == 1, stream.output()[-3000:]
    framed = 500_000 + len("mirrorflow.provenance") + len("big/big.t/0/1")  # the value, the provenance header
    for part in ("big.t partition 0 offset 1", f"500000 bytes ({framed} with its headers and the provenance header)",
                 "big.big.t", "max.message.bytes 100000 on small", "2000000 on big",
                 f"set big.big.t's max.message.bytes to at least {framed + 128} and add max.message.bytes to "
                 "config.properties.exclude"):
        assert part in error[0], error[0]
    assert all(len(m.value()) < 100_000 for m in read_partition(BETA, "big.big.t", 0))


def _assert_each_side_hears_the_other(cfg: config.MirrorConfig, a: str, b: str, stream: StreamProcess) -> None:
    """Heartbeats both ways: each cluster names the other upstream at one hop, by name (as MM2) and by content."""
    def heard() -> dict[str, topology.ClusterView]:
        return {v.alias: v for v in topology.view(cfg)}

    wait_for(lambda: all(({a, b} - {v.alias}) <= set(v.upstream) for v in heard().values()), 120,
             "heartbeats replicated both ways", stream)
    views = heard()
    assert views[a].hops.get(b) == 1 and views[b].hops.get(a) == 1
    assert views[a].reached_from().get(b) == 1 and views[b].reached_from().get(a) == 1
