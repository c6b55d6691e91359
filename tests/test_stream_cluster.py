"""The same stream on a real Spark standalone cluster (master and worker from the PySpark distribution)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from mirrorflow.model import config
from support import ports
from support.clusters import PORTS
from support.streams import (
    StreamProcess,
    config_text,
    create_topic,
    mirrored_offsets,
    producer,
    record_counts,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]
ALPHA = f"127.0.0.1:{PORTS['alpha']}"
BETA = f"127.0.0.1:{PORTS['beta']}"
MASTER_PORT = ports.SPARK_MASTER


def _spark_class(*args: str, log: Path) -> subprocess.Popen[bytes]:
    home = Path(pyspark.__file__).parent
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_DAEMON_MEMORY": "256m", "PYSPARK_PYTHON": sys.executable}
    with open(log, "wb") as out:
        return subprocess.Popen([str(home / "bin" / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    work = tmp_path_factory.mktemp("spark-standalone")
    master = _spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(MASTER_PORT),
                          "--webui-port", "0", log=work / "master.log")
    url = f"spark://127.0.0.1:{MASTER_PORT}"
    worker = None
    try:
        deadline = time.monotonic() + 90
        while not _port_open(MASTER_PORT):
            assert time.monotonic() < deadline, (work / "master.log").read_text()[-2000:]
            time.sleep(0.5)
        worker = _spark_class("org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "2",
                              "--memory", "1g", "--webui-port", "0", "--work-dir", str(work / "work"),
                              log=work / "worker.log")
        yield url, work / "work"
    finally:
        for proc in (worker, master):
            if proc is not None:
                proc.terminate()
                proc.wait(30)


def test_the_stream_runs_on_a_standalone_cluster(stream_clusters: config.MirrorConfig,
                                                 standalone: tuple[str, Path], tmp_path: Path) -> None:
    url, worker_dir = standalone
    cfg = tmp_path / "mirror.properties"
    cfg.write_text(config_text(("up", "down"), (PORTS["alpha"], PORTS["beta"]), ["up->down"], "topics = sa\\..*\n"))
    create_topic(ALPHA, "sa.orders", 4)
    p = producer(ALPHA)
    for i in range(2000):
        p.produce("sa.orders", f"v{i}".encode(), partition=i % 4)
    p.flush(30)
    stream = StreamProcess(cfg, "up->down", tmp_path)
    stream.start("--master", url)
    try:
        wait_for(lambda: sum(record_counts(BETA, "up.sa.orders")) >= 2000, 300, "the cluster's copy", stream)
    finally:
        assert stream.stop() == 0
    for got in mirrored_offsets(BETA, "up.sa.orders", 4, committed=True):
        assert got == list(range(500))
    assert list(worker_dir.glob("app-*/*/stderr")), "no executor ran on the standalone worker"
