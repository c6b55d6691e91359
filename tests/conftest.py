"""Shared fixtures: real local Kafka clusters, started once per test session by mirrorflow's launcher."""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from mirrorflow.dev import local
from mirrorflow.model import config
from support.clusters import REPO, clusters_text

# The suite shares two cores with brokers, Spark and the other lane: generating a property's inputs may be slow
# (seen: 8 inputs in 1.1 s), which is no failure of the property; each still runs all of its examples.
settings.register_profile("shared-machine", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("shared-machine")


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def cluster_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A private MIRRORFLOW_HOME for the session's brokers; the jar cache and Toxiproxy are the repo's."""
    home = tmp_path_factory.mktemp("mirrorflow-home")
    saved = {k: os.environ.get(k) for k in ("MIRRORFLOW_HOME", "MIRRORFLOW_JAR_CACHE", "MIRRORFLOW_TOXIPROXY",
                                            "GAMMA_PASSWORD")}
    os.environ["MIRRORFLOW_HOME"] = str(home)
    os.environ.setdefault("MIRRORFLOW_JAR_CACHE", str(REPO / ".mirrorflow" / "jars"))
    os.environ.setdefault("MIRRORFLOW_TOXIPROXY", str(REPO / ".mirrorflow" / "bin" / "toxiproxy-server"))
    os.environ["GAMMA_PASSWORD"] = secrets.token_urlsafe(12)
    yield dict(os.environ)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def clusters_file(cluster_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "connect-mirror-maker.properties"
    path.write_text(clusters_text())
    return path


@pytest.fixture(scope="session")
def local_clusters(clusters_file: Path) -> Iterator[config.MirrorConfig]:
    """Three real brokers (alpha, beta plain; gamma SASL + ACLs), up for the whole session."""
    cfg = config.load(clusters_file)
    try:
        local.up(cfg)
        for cluster in cfg.clusters.values():
            _wait_for_group_coordinator(cluster)
        yield cfg
    finally:
        local.down(cfg, purge=True)


def _wait_for_group_coordinator(cluster: config.Cluster, timeout_s: float = 120.0) -> None:
    """Until the broker answers a consumer group request: the first one creates `__consumer_offsets` (50
    partitions), which took over 15 s on a busy machine, and a test's first lease check timed out on it."""
    import time

    from confluent_kafka import KafkaException
    from mirrorflow.kafka import clients

    admin = clients.admin(cluster, log_level=0)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.describe_consumer_groups(["mirrorflow-tests-warm-up"], request_timeout=10)[
                "mirrorflow-tests-warm-up"].result(15)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


@pytest.fixture(scope="session")
def stream_clusters(local_clusters: config.MirrorConfig) -> config.MirrorConfig:
    """The local brokers, with Spark's Kafka connector fetched before any stream process starts."""
    from mirrorflow.spark import spark_session

    spark_session.kafka_jars()
    return local_clusters


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private Airflow (SQLite metadata DB, migrated) whose DAG folder is the repo's `dags/`.

    Set before anything imports Airflow, which reads its configuration once.
    """
    import subprocess
    import sys

    home = tmp_path_factory.mktemp("airflow")
    os.environ.update(AIRFLOW_HOME=str(home), AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
                      AIRFLOW__CORE__LOAD_EXAMPLES="False")
    done = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return home


# A fixture that starts a resource, and the marker a test using it (directly or through another fixture) carries:
# `make test-unit` deselects by marker, so an unmarked test would start brokers or Spark there.
RESOURCE_FIXTURES = {"local_clusters": "kafka", "stream_clusters": "spark", "spark": "spark", "airflow_home": "airflow"}


def pytest_configure(config: pytest.Config) -> None:
    from support import dr_drill

    dr_drill.crash_reports_fd = os.dup(sys.stderr.fileno())  # the real stderr: a test's capture takes fd 2 later


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = [f"{item.nodeid} uses {fixture} but is not marked {marker}" for item in items
                for fixture, marker in RESOURCE_FIXTURES.items()
                if fixture in getattr(item, "fixturenames", ()) and item.get_closest_marker(marker) is None]
    if unmarked:
        raise pytest.UsageError("tests without their resource marker:\n  " + "\n  ".join(unmarked))


def pytest_collection_finish(session: pytest.Session) -> None:
    # Airflow reads its configuration at its first import: a test module that imports it at collection would make
    # every Airflow test of the session run against the default home (~/airflow), not `airflow_home`.
    if any(m == "airflow" or m.startswith("airflow.") for m in sys.modules):
        raise pytest.UsageError("a test module imported Airflow at collection; import it inside the test, after the "
                                "airflow_home fixture")
