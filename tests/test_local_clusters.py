"""The launcher against real brokers: plain clusters serve clients, secure ones authenticate and authorize."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from mirrorflow.dev import local
from mirrorflow.errors import LocalClusterError
from mirrorflow.model import config
from mirrorflow.model.client_config import to_librdkafka
from support import ports

pytestmark = pytest.mark.kafka
QUIET = {"log_level": 0, "logger": lambda *a: None}  # keep expected auth failures out of the output


def client(cfg: config.MirrorConfig, alias: str, role: str = "admin", **extra: str) -> dict[str, object]:
    settings, _ = to_librdkafka(cfg.clusters[alias].client_config(role), cluster=alias)
    return {**settings, **extra}


def roundtrip(conf: dict[str, object], topic: str, count: int = 20) -> list[tuple[bytes | None, bytes | None]]:
    admin = AdminClient(conf)
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    except KafkaException as exc:  # a create retried under load: the first attempt made it
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    producer = Producer({**conf, "acks": "all", "enable.idempotence": True})
    sent = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(count)]
    for k, v in sent:
        producer.produce(topic, key=k, value=v, partition=int(k[1:]) % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": f"g-{uuid.uuid4()}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[tuple[bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        m = consumer.poll(1)
        if m is not None and m.error() is None:
            got.append((m.key(), m.value()))
    consumer.close()
    return sorted(got)


@pytest.mark.parametrize("alias", ["alpha", "beta"])
def test_plain_local_cluster_serves_producers_and_consumers(local_clusters: config.MirrorConfig, alias: str) -> None:
    sent = roundtrip(client(local_clusters, alias), f"roundtrip-{alias}")
    assert sent == sorted((f"k{i}".encode(), f"v{i}".encode()) for i in range(20))


def test_a_local_brokers_index_files_are_small_but_hold_a_whole_segment(local_clusters: config.MirrorConfig) -> None:
    roundtrip(client(local_clusters, "alpha"), "roundtrip-alpha")
    (broker,) = local.local_brokers(local_clusters, ["alpha"])
    indexes = sorted((broker.folder / "data").glob("roundtrip-alpha-*/*.*index"))
    assert {p.suffix for p in indexes} == {".index", ".timeindex"}
    # The active segment's indexes are preallocated at the configured size: what a first touch may zero-fill.
    size = local.index_bytes()
    assert {p.stat().st_size for p in indexes} <= {size - size % 12, size}
    entries = local.SEGMENT_BYTES // 4096  # one entry per 4 KiB of log, Kafka's default index interval
    assert 12 * entries <= local.INDEX_BYTES


@pytest.mark.parametrize("wanted", ["1m", "-1", "12"])
def test_an_index_size_that_is_not_a_byte_count_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch,
                                                                      wanted: str) -> None:
    monkeypatch.setenv("MIRRORFLOW_BROKER_INDEX_BYTES", wanted)
    with pytest.raises(LocalClusterError, match=r"^MIRRORFLOW_BROKER_INDEX_BYTES = .*: expected a number of bytes"):
        local.index_bytes()


def test_up_twice_leaves_one_broker_per_alias(local_clusters: config.MirrorConfig) -> None:
    before = {s.alias: s.pid for s in local.status(local_clusters)}
    after = {s.alias: s.pid for s in local.up(local_clusters)}
    assert before == after and all(after.values())
    assert all(s.running and s.reachable for s in local.status(local_clusters))


def test_secure_cluster_accepts_the_super_user(local_clusters: config.MirrorConfig) -> None:
    assert [s.secure for s in local.status(local_clusters, ["gamma"])] == [True]
    sent = roundtrip(client(local_clusters, "gamma"), "roundtrip-secure")
    assert len(sent) == 20


def test_secure_cluster_rejects_unauthenticated_and_wrong_password(local_clusters: config.MirrorConfig) -> None:
    bootstrap = local_clusters.clusters["gamma"].bootstrap_servers
    for conf in ({"bootstrap.servers": bootstrap},
                 {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin", "sasl.password": "wrong"}):
        with pytest.raises(KafkaException):
            AdminClient({**conf, **QUIET}).list_topics(timeout=4)


def test_secure_cluster_authorizes_with_acls(local_clusters: config.MirrorConfig) -> None:
    admin = AdminClient(client(local_clusters, "gamma"))
    user, password = f"user-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                          password.encode())
    for f in admin.alter_user_scram_credentials([upsert]).values():
        f.result(30)
    time.sleep(1)
    as_user = AdminClient({"bootstrap.servers": local_clusters.clusters["gamma"].bootstrap_servers,
                           "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                           "sasl.username": user, "sasl.password": password, **QUIET})
    with pytest.raises(KafkaException) as info:
        as_user.create_topics([NewTopic(f"denied-{user}", 1, 1)])[f"denied-{user}"].result(30)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_taken_port_is_a_clear_error(cluster_env: dict[str, str], tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        cfg = config.from_text(f"clusters = busy\nbusy.bootstrap.servers = 127.0.0.1:{port}\n")
        with pytest.raises(LocalClusterError, match=f"broker port {port} is already in use"):
            local.up(cfg)


def test_down_stops_only_what_it_started(local_clusters: config.MirrorConfig, tmp_path: Path) -> None:
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        fake = local.local_brokers(local_clusters, ["alpha"])[0]
        cfg = config.from_text(f"clusters = other\nother.bootstrap.servers = 127.0.0.1:{ports.DELTA}\n")
        (other,) = local.local_brokers(cfg)
        other.folder.mkdir(parents=True, exist_ok=True)
        other.pid_file.write_text(str(stranger.pid))  # a pid that is not a broker we started
        local.down(cfg)
        assert stranger.poll() is None
        assert local.status(local_clusters, [fake.alias])[0].running
    finally:
        stranger.kill()
        stranger.wait(10)


def test_cli_local_status_json(
    local_clusters: config.MirrorConfig, clusters_file: Path, cluster_env: dict[str, str]
) -> None:
    r = subprocess.run([sys.executable, "-m", "mirrorflow", "--config", str(clusters_file), "local", "status",
                        "--json"], capture_output=True, text=True, env=cluster_env, check=False)
    assert r.returncode == 0, r.stderr
    assert '"running": true' in r.stdout and cluster_env["GAMMA_PASSWORD"] not in r.stdout + r.stderr


def test_secure_flag_generates_a_super_user_and_never_prints_it(cluster_env: dict[str, str], tmp_path: Path) -> None:
    cfg_file = tmp_path / "delta.properties"
    cfg_file.write_text(f"clusters = delta\ndelta.bootstrap.servers = 127.0.0.1:{ports.SECURE_LOCAL}\n")
    cli = [sys.executable, "-m", "mirrorflow", "--config", str(cfg_file), "local"]
    try:
        r = subprocess.run([*cli, "up", "--secure"], capture_output=True, text=True, env=cluster_env, check=False)
        assert r.returncode == 0, r.stderr
        (broker,) = local.local_brokers(config.load(cfg_file), secure=True)
        user, password = local.super_user_credentials(broker)
        assert password not in r.stdout + r.stderr and oct(broker.credentials_file.stat().st_mode)[-3:] == "600"
        ok = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports.SECURE_LOCAL}", "security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password})
        ok.create_topics([NewTopic("delta-t", 1, 1)])["delta-t"].result(30)
        with pytest.raises(KafkaException):
            AdminClient({"bootstrap.servers": f"127.0.0.1:{ports.SECURE_LOCAL}", **QUIET}).list_topics(timeout=4)
    finally:
        subprocess.run([*cli, "down", "--purge"], capture_output=True, env=cluster_env, check=False)


def test_a_generated_cluster_id_never_reads_as_an_option() -> None:
    from mirrorflow.dev.local import _cluster_id

    ids = [_cluster_id() for _ in range(5000)]  # about 1 in 64 raw ids starts with "-"
    assert all(not i.startswith("-") and len(i) == 22 for i in ids)


def test_a_cluster_keeps_the_quorum_it_was_created_with(cluster_env: dict[str, str]) -> None:
    first, *more = ports.QUORUM
    one = config.from_text(f"clusters = solo\nsolo.bootstrap.servers = 127.0.0.1:{first}\n")
    three = config.from_text("clusters = solo\nsolo.bootstrap.servers = "
                             + ",".join(f"127.0.0.1:{p}" for p in (first, *more)) + "\n")
    try:
        local.up(one)
        local.down(one)
        quorum = f"1@127.0.0.1:{first + 1}"
        with pytest.raises(LocalClusterError, match=re.escape(f"created with the controller quorum {quorum}, "
                                                              f"this config gives {quorum},2@")):
            local.up(three)
        assert not any(s.running for s in local.status(three))
    finally:
        local.down(three, purge=True)
