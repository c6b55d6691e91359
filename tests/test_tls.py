"""MM2's JKS and PKCS12 stores, unchanged, over real TLS: two mutual-TLS brokers started by `local up`, then a
stream, metadata sync, an audit (Spark's Java Kafka client), checkpoints and a failover dry run; stores that cannot
be opened are one line at `validate`."""

from __future__ import annotations

import datetime as dt
import json
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from mirrorflow.dev import local, tls
from mirrorflow.jobs import checkpoints
from mirrorflow.kafka import clients, stores
from mirrorflow.model import config
from mirrorflow.model.client_config import JavaStore
from support import ports
from support.streams import StreamProcess, environ, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.spark]
PORTS = {"sigma": ports.SIGMA, "tau": ports.TAU}
RECORDS = 600
QUIET = {"log_level": 0, "logger": lambda *a: None}  # keep the expected handshake failures out of the output


def _config_text(work: Path) -> str:
    """Both clusters as an MM2 file names a mutual-TLS deployment: JKS stores, passwords from placeholders."""
    lines = ["clusters = sigma, tau", "sigma->tau.enabled = true", "tau->sigma.enabled = true", "topics = orders",
             "groups = tls-.*", "replication.factor = 1", "offset-syncs.topic.replication.factor = 1",
             "checkpoints.topic.replication.factor = 1", "heartbeats.topic.replication.factor = 1",
             "emit.checkpoints.interval.seconds = 5"]
    for alias, port in PORTS.items():
        lines += [f"{alias}.bootstrap.servers = 127.0.0.1:{port}", f"{alias}.security.protocol = SSL",
                  f"{alias}.ssl.truststore.location = {work / alias / 'truststore.jks'}",
                  f"{alias}.ssl.truststore.password = ${{env:TLS_STORE_PASSWORD}}",
                  f"{alias}.ssl.keystore.location = {work / alias / 'keystore.jks'}",
                  f"{alias}.ssl.keystore.password = ${{env:TLS_STORE_PASSWORD}}",
                  f"{alias}.ssl.key.password = ${{file:{work / 'secrets.properties'}:key.password}}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def tls_pair(cluster_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[config.MirrorConfig, Path, Path, tuple[str, str]]]:
    work = tmp_path_factory.mktemp("tls")
    passwords = (secrets.token_urlsafe(12), secrets.token_urlsafe(12))  # the stores', the keys'
    (work / "secrets.properties").write_text(f"key.password={passwords[1]}\n")
    path = work / "mm2.properties"
    path.write_text(_config_text(work))
    with environ("TLS_STORE_PASSWORD", passwords[0]):
        cfg = config.load(path)
        try:
            states = local.up(cfg)
            assert [s.tls for s in states] == ["mutual TLS", "mutual TLS"]
            yield cfg, path, work, passwords
        finally:
            local.down(cfg, purge=True)


def _cli(path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mirrorflow", "--config", str(path), *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def _records(cluster: config.Cluster, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every record of `topic`'s 3 partitions, in order (the settings, with their key, stay out of any message)."""
    settings = clients.settings(cluster, "consumer")
    return [(m.key(), m.value()) for p in range(3) for m in clients.read_to_end(settings, topic, topic, partition=p)]


def _produced() -> list[tuple[bytes | None, bytes | None]]:
    return [(f"k{i}".encode(), f"v{i}".encode()) for p in range(3) for i in range(p, RECORDS, 3)]


@pytest.fixture(scope="module")
def mirrored(tls_pair: tuple[config.MirrorConfig, Path, Path, tuple[str, str]]
             ) -> Iterator[tuple[config.MirrorConfig, Path, Path]]:
    """`orders` (3 partitions, RECORDS records) on sigma, synced and mirrored to tau by a running stream."""
    cfg, path, work, _ = tls_pair
    sigma = cfg.cluster("sigma")
    admin = clients.admin(sigma)  # held: a client destroyed before its answer fails the future
    admin.create_topics([NewTopic("orders", 3, 1)])["orders"].result(30)
    producer = clients.producer(sigma, **{"enable.idempotence": True})
    for i, (k, v) in enumerate(_produced()):
        producer.produce("orders", key=k, value=v, partition=i * 3 // RECORDS)
    assert producer.flush(30) == 0
    synced = _cli(path, "sync")
    assert synced.returncode == 0, synced.stderr
    assert "create topic sigma.orders (3 partitions" in synced.stdout
    stream = StreamProcess(path, "sigma->tau", work / "stream")
    stream.start()
    try:
        wait_for(lambda: len(_records(cfg.cluster("tau"), "sigma.orders")) >= RECORDS, 240, "the records on tau",
                 stream)
        yield cfg, path, work
    finally:
        stream.stop()


def test_local_up_writes_jks_stores_and_its_broker_refuses_a_client_without_a_certificate(tls_pair) -> None:  # type: ignore[no-untyped-def]
    cfg, path, work, passwords = tls_pair
    for alias in PORTS:
        for name in ("truststore.jks", "keystore.jks"):
            store = work / alias / name
            assert store.read_bytes()[:4] == bytes.fromhex("feedfeed"), store  # Java's JKS magic number
            assert oct(store.stat().st_mode)[-3:] == "600"
    sigma = clients.settings(cfg.cluster("sigma"), "admin")
    assert AdminClient(sigma).list_topics(timeout=20).brokers
    no_certificate = {k: v for k, v in sigma.items() if k not in ("ssl.certificate.pem", "ssl.key.pem")}
    with pytest.raises(KafkaException):
        AdminClient({**no_certificate, **QUIET}).list_topics(timeout=5)
    status = _cli(path, "local", "status")
    assert "sigma: running" in status.stdout and "mutual TLS" in status.stdout, status.stderr
    assert not any(p in status.stdout + status.stderr for p in passwords)


def test_sync_the_stream_and_the_audit_copy_and_check_every_record_over_mutual_tls(mirrored) -> None:  # type: ignore[no-untyped-def]
    cfg, path, _ = mirrored
    assert _records(cfg.cluster("tau"), "sigma.orders") == _records(cfg.cluster("sigma"), "orders") == _produced()
    audit = _cli(path, "audit", "--flow", "sigma->tau", "--master", "local[1]", "--json", timeout=600)
    assert audit.returncode == 0, audit.stderr[-3000:]
    report = json.loads(audit.stdout)
    assert report["complete"] is True and report["mode"] == "full" and report["source_records"] == RECORDS, report


def test_checkpoints_translate_a_group_over_mutual_tls(mirrored) -> None:  # type: ignore[no-untyped-def]
    cfg, path, _ = mirrored
    group = Consumer({**clients.settings(cfg.cluster("sigma"), "consumer"), "group.id": "tls-app"})
    group.commit(offsets=[TopicPartition("orders", p, 100 + p) for p in range(3)], asynchronous=False)
    group.close()
    tau = clients.settings(cfg.cluster("tau"), "consumer")

    def translated() -> dict[int, int]:
        assert _cli(path, "checkpoint", "--flow", "sigma->tau").returncode == 0
        found = checkpoints.read_checkpoints(tau, "sigma.checkpoints.internal")
        return {p: c.downstream_offset for (g, t, p), c in found.items() if (g, t) == ("tls-app", "sigma.orders")}

    wait_for(lambda: translated() == {0: 100, 1: 101, 2: 102}, 120, "tls-app's checkpoints on tau")


def test_a_failover_dry_run_over_mutual_tls_reports_and_moves_no_group(mirrored) -> None:  # type: ignore[no-untyped-def]
    cfg, path, _ = mirrored
    run = _cli(path, "failover", "--source", "sigma", "--target", "tau", "--groups", "tls-.*", "--dry-run",
               "--yes", "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "dry run" in run.stdout
    tau = clients.admin(cfg.cluster("tau"))
    moved = tau.list_consumer_groups().result(30)
    assert "tls-app" not in {g.group_id for g in moved.valid}


def _stores(folder: Path, kind: str, password: str, key_password: str, *, expired: bool = False
            ) -> tuple[JavaStore, JavaStore, tls.Authority]:
    ca = tls.authority(folder / "ca", "test")
    suffix = kind.lower()
    trust = JavaStore(str(folder / f"truststore.{suffix}"), kind, password)
    key = JavaStore(str(folder / f"keystore.{suffix}"), kind, password, key_password)
    tls.write_truststore(trust, ca, key="t")
    valid_from = dt.datetime.now(dt.UTC) - dt.timedelta(days=3) if expired else None
    tls.write_keystore(key, tls.issue(ca, "client", valid_from=valid_from, valid_days=1 if expired else 30), ca,
                       key="k")
    return trust, key, ca


@pytest.mark.parametrize("kind", ["JKS", "PKCS12"])
def test_a_store_is_opened_to_pem_leaving_no_file_and_a_replaced_store_is_read_again(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trust, key, ca = _stores(tmp_path, kind, "store-pw-1", "key-pw-22" if kind == "JKS" else "store-pw-1")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    assert stores.open_truststore(trust, key="t") == ca.pem
    first = stores.open_keystore(key, key="k")
    assert first.certificate_chain.startswith("-----BEGIN CERTIFICATE-----") and ca.pem in first.certificate_chain
    assert "PRIVATE KEY" in first.private_key and list(scratch.iterdir()) == []
    Path(key.location).unlink()
    tls.write_keystore(key, tls.issue(ca, "rotated"), ca, key="k")
    assert stores.open_keystore(key, key="k").certificate_chain != first.certificate_chain


@pytest.mark.parametrize(("change", "key", "expected"), [
    ({"ssl.truststore.password": "wrong-password"}, "ssl.truststore.location",
     "cannot open the JKS store: the password is wrong"),
    ({"ssl.key.password": "wrong-key-password"}, "ssl.keystore.location",
     "the key password (ssl.key.password) is wrong"),
    ({"ssl.truststore.location": "/nonexistent/truststore.jks"}, "ssl.truststore.location",
     "/nonexistent/truststore.jks: no such file"),
    ({"ssl.keystore.location": "EXPIRED"}, "ssl.keystore.location", "the certificate CN=client expired on"),
    ({"ssl.truststore.location": "TEXT"}, "ssl.truststore.location", "the file is not a JKS store"),
])
def test_a_store_that_cannot_be_opened_is_one_line_at_validate_naming_cluster_key_and_cause(
        change: dict[str, str], key: str, expected: str, tmp_path: Path) -> None:
    password, key_password = "store-pw-1", "key-pw-22"
    trust, keystore, _ = _stores(tmp_path, "JKS", password, key_password)
    expired = _stores(tmp_path / "old", "JKS", password, key_password, expired=True)[1]
    (tmp_path / "text.jks").write_text("not a store\n")
    settings = {"ssl.truststore.location": trust.location, "ssl.truststore.password": password,
                "ssl.keystore.location": keystore.location, "ssl.keystore.password": password,
                "ssl.key.password": key_password}
    settings |= {k: {"EXPIRED": expired.location, "TEXT": str(tmp_path / "text.jks")}.get(v, v)
                 for k, v in change.items()}
    path = tmp_path / "mm2.properties"
    path.write_text("clusters = east, west\neast.bootstrap.servers = east:9093\nwest.bootstrap.servers = west:9093\n"
                    "east->west.enabled = true\neast.security.protocol = SSL\n"
                    + "".join(f"east.{k} = {v}\n" for k, v in settings.items()))
    run = _cli(path, "validate", timeout=120)
    err = run.stderr.strip()
    assert run.returncode == 2 and len(err.splitlines()) == 1 and run.stdout == "", run.stdout + run.stderr
    assert f"{path}:" in err and f" east.{key}: " in err, err
    assert expected in err, err
    assert not any(p in err for p in (password, key_password, "wrong-password", "wrong-key-password")), err
