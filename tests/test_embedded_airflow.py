"""The embedded Airflow (`mirrorflow airflow up`, what `make demo` runs) with its real scheduler: it comes up next
to the brokers, launches a flow's stream, and launches it again after the stream is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PORTS
from mirrorflow import clients, config, flow_lease, local_airflow, metrics
from streams import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.airflow]
PORT = "25080"
FLOW = "home->away"


@pytest.fixture(scope="module")
def embedded(stream_clusters: config.MirrorConfig, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[Path, config.MirrorConfig, list[str]]]:
    work = tmp_path_factory.mktemp("embedded")
    path = work / "mirror.properties"
    path.write_text(f"clusters = home, away\nhome.bootstrap.servers = 127.0.0.1:{PORTS['alpha']}\n"
                    f"away.bootstrap.servers = 127.0.0.1:{PORTS['beta']}\nhome->away.enabled = true\n"
                    "topics = emb\\..*\nreplication.factor = 1\noffset-syncs.topic.replication.factor = 1\n"
                    "checkpoints.topic.replication.factor = 1\nrefresh.topics.interval.seconds = 120\n"
                    "emit.checkpoints.interval.seconds = 120\n")
    cli = [sys.executable, "-m", "mirrorflow.cli", "--config", str(path)]
    os.environ["MIRRORFLOW_AIRFLOW_PORT"] = PORT
    try:
        yield path, config.load(path), cli
    finally:
        subprocess.run([*cli, "stop", "--flow", FLOW, "--timeout", "90"], capture_output=True, timeout=120)
        subprocess.run([*cli, "airflow", "down"], capture_output=True, timeout=120)
        del os.environ["MIRRORFLOW_AIRFLOW_PORT"]


def _lease_members(cfg: config.MirrorConfig) -> set[str]:
    admin = clients.admin(cfg.cluster("away"))
    return {m.member_id for m in flow_lease.members(admin, FLOW) if m.assignment.topic_partitions}


def test_the_embedded_airflow_runs_the_flow_and_its_scheduler_restarts_a_killed_stream_within_two_minutes(
        embedded: tuple[Path, config.MirrorConfig, list[str]]) -> None:
    _, cfg, cli = embedded
    started = subprocess.run([*cli, "start", "--flow", FLOW], capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    up = subprocess.run([*cli, "airflow", "up"], capture_output=True, text=True, timeout=420)
    assert up.returncode == 0, up.stdout + up.stderr
    assert f"UI and API at http://127.0.0.1:{PORT}" in up.stdout and "login: admin, password in " in up.stdout
    password = json.loads((local_airflow.home() / "passwords.json").read_text())["admin"]
    assert password not in up.stdout + up.stderr  # a secret is never printed
    assert "Traceback" not in up.stderr
    began = time.monotonic()
    wait_for(lambda: bool(_lease_members(cfg)), 240, "the scheduler to launch the stream")
    print(f"\nembedded Airflow up; the scheduler launched the stream {time.monotonic() - began:.0f} s later")

    status = metrics.status_file(cfg.flow(FLOW))
    wait_for(lambda: (metrics.read_status(status) or {}).get("state") == "running", 120, "the stream's status")
    dead = _lease_members(cfg)
    killed = time.monotonic()
    os.kill((metrics.read_status(status) or {})["pid"], signal.SIGKILL)
    wait_for(lambda: bool(_lease_members(cfg) - dead), 150, "the scheduler to launch the stream again")
    back = time.monotonic() - killed
    print(f"stream killed with SIGKILL: the scheduler had it running again {back:.0f} s later")
    assert back < 120
    again = subprocess.run([*cli, "airflow", "up"], capture_output=True, text=True, timeout=120)
    assert "password in" in again.stdout and password not in again.stdout + again.stderr

    # `airflow down` leaves no process of the standalone's session, task workers included.
    session = local_airflow.status().pid
    assert session is not None and local_airflow.session_processes(session)
    subprocess.run([*cli, "stop", "--flow", FLOW, "--timeout", "90"], capture_output=True, timeout=120)
    down = subprocess.run([*cli, "airflow", "down"], capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert local_airflow.session_processes(session) == []
