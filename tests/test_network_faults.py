"""Network faults for real: Toxiproxy between the mirror and each cluster (brokers advertise the proxy's address on a
second listener, so metadata keeps the mirror on the proxied path), real brokers, a real Spark stream."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from mirrorflow import config, local, netfaults
from streams import (
    SteadyProducer,
    StreamProcess,
    config_text,
    create_topic,
    end_offsets,
    read_partition,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]
SOURCE, TARGET = 25600, 25700  # the brokers' own listeners (tests read and write through these)
PROXIED = {"src": [(25602, 25610)], "dst": [(25702, 25710)]}  # second listener, and the proxy's port it advertises
API_PORT = 25474
TOPIC, PARTITIONS = "cut.orders", 3


@pytest.fixture(scope="module")
def links(cluster_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[netfaults.Toxiproxy]:
    work = tmp_path_factory.mktemp("netfaults")
    cfg = config.from_text(f"clusters = src, dst\nsrc.bootstrap.servers = 127.0.0.1:{SOURCE}\n"
                           f"dst.bootstrap.servers = 127.0.0.1:{TARGET}\n")
    proxy = netfaults.Toxiproxy(API_PORT, work / "toxiproxy.log").start()
    try:
        for alias, [(listener, port)] in PROXIED.items():
            proxy.add(netfaults.Link(alias, f"127.0.0.1:{port}", f"127.0.0.1:{listener}"))
        local.up(cfg, proxied=PROXIED)
        yield proxy
    finally:
        local.down(cfg, purge=True)
        proxy.stop()


def _mirror_config(path: Path) -> Path:
    # The mirror reaches both clusters through the proxy only.
    path.write_text(config_text(("src", "dst"), (PROXIED["src"][0][1], PROXIED["dst"][0][1]), ["src->dst"],
                                "topics = cut\\..*\n"))
    return path


def _health(cfg: Path) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-m", "mirrorflow.cli", "--config", str(cfg), "health", "--flow",
                          "src->dst", "--json"], capture_output=True, text=True, timeout=120)
    return dict(json.loads(out.stdout)[0]) if out.stdout.strip().startswith("[") else {"error": out.stderr[-500:]}


def _values(bootstrap: str, topic: str) -> list[bytes]:
    try:
        return [m.value() for p in range(PARTITIONS) for m in read_partition(bootstrap, topic, p, committed=True)]
    except KafkaException:  # the remote topic is not there yet
        return []


def test_a_source_link_cut_for_60_s_stalls_the_flow_visibly_and_it_resumes_with_nothing_lost(
        links: netfaults.Toxiproxy, tmp_path: Path) -> None:
    cfg = _mirror_config(tmp_path / "mirror.properties")
    source, target = f"127.0.0.1:{SOURCE}", f"127.0.0.1:{TARGET}"
    create_topic(source, TOPIC, PARTITIONS)
    stream = StreamProcess(cfg, "src->dst", tmp_path / "stream")
    stream.start()
    try:
        with SteadyProducer(source, TOPIC, PARTITIONS, pause_every=20):  # about 400 records/s
            wait_for(lambda: len(_values(target, f"src.{TOPIC}")) >= 1000, 180, "the first records mirrored", stream)
            links.cut("src")
            cut = time.monotonic()
            time.sleep(25)
            during = _health(cfg)
            mirrored_during = len(_values(target, f"src.{TOPIC}"))
            time.sleep(max(0.0, 60 - (time.monotonic() - cut)))
            stalled = len(_values(target, f"src.{TOPIC}"))
            links.restore("src")
            time.sleep(10)
        produced = sum(end_offsets(source, TOPIC))
        began = time.monotonic()
        wait_for(lambda: len(set(_values(target, f"src.{TOPIC}"))) >= produced, 300, "the backlog mirrored", stream)
        print(f"\nsource link cut 60 s: health during the cut: {during}; mirrored {mirrored_during} -> {stalled} "
              f"while cut; caught up {time.monotonic() - began:.0f} s after the producer stopped")
        values = _values(target, f"src.{TOPIC}")
        assert set(values) == {f"r{i}".encode() for i in range(produced)}  # nothing lost
        assert stalled == mirrored_during  # nothing reached the target while the source was cut off
        # health says so: the stream runs and holds its lease, the lag cannot be read from the source
        assert during["alive"] and "cluster src unreachable" in str(during["source_error"]), during
        assert stream.alive(), stream.output()[-3000:]
        assert stream.stop() == 0
    finally:
        links.restore("src")
        if stream.alive():
            stream.stop()
