"""Heartbeats and topology with real streams: a chain alpha->beta->gamma (gamma SASL), read as MM2 reads it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mirrorflow.jobs import topology
from mirrorflow.kafka import clients, heartbeats
from mirrorflow.model import config, paths
from mirrorflow.spark import maven
from support.clusters import clusters_text
from support.streams import StreamProcess, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def oracle(repo: Path, cluster: config.Cluster, *args: str, tmp: Path) -> list[str]:
    """MM2's RemoteClusterUtils answering about `cluster` (with its client settings)."""
    if shutil.which("java") is None:
        pytest.fail("java is required for this test")
    jars = maven.fetch("mirror-client", maven.MIRROR_CLIENT, paths.jar_cache())
    props = tmp / f"{cluster.alias}-client.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in cluster.client_config("admin").items()
                             if k != "bootstrap.servers"))
    props.chmod(0o600)
    source = repo / "tests" / "java" / "RemoteClusterOracle.java"
    out = subprocess.run(["java", "-cp", maven.classpath(jars), str(source), args[0], cluster.bootstrap_servers,
                          *args[1:]], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "ORACLE_CLIENT_PROPERTIES": str(props)}, check=True)
    return out.stdout.split()


@pytest.fixture(scope="module")
def chain(stream_clusters: config.MirrorConfig, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[tuple[config.MirrorConfig, Path, Path]]:
    work = tmp_path_factory.mktemp("chain")
    text = "\n".join(line for line in clusters_text().splitlines() if ".enabled" not in line)
    path = work / "chain.properties"
    path.write_text(text + "\nalpha->beta.enabled = true\nbeta->gamma.enabled = true\ntopics = t6\\..*\n"
                    "offset-syncs.topic.replication.factor = 1\nheartbeats.topic.replication.factor = 1\n")
    cfg = config.load(path)
    streams = [StreamProcess(path, "alpha->beta", work / "ab"), StreamProcess(path, "beta->gamma", work / "bg")]
    for s in streams:
        s.start()
    gamma = clients.settings(cfg.cluster("gamma"), "consumer")
    try:
        wait_for(lambda: ("alpha", "beta") in heartbeats.newest(gamma, "beta.heartbeats"), 300,
                 "alpha->beta heartbeats to reach gamma", streams[1])
        yield cfg, path, work
    finally:
        for s in streams:
            s.stop()


def test_heartbeats_show_the_chain_with_its_hops(chain) -> None:  # type: ignore[no-untyped-def]
    cfg, _, _ = chain
    # The first copies to reach gamma may be old ones (the streams' takeover waits): a fresh one follows. Every
    # check below reads the view that showed it (a later view may catch the two-hop chain between copies).
    seen: dict[str, topology.ClusterView] = {}

    def fresh() -> bool:
        seen.clear()
        seen.update({v.alias: v for v in topology.view(cfg)})
        return any(p.age_s < 30 and (p.source, p.target, p.topic) == ("alpha", "beta", "beta.heartbeats")
                   for p in seen["gamma"].paths)

    wait_for(fresh, 90, "a fresh heartbeat carried over two hops")
    views = seen
    assert views["beta"].reached_from().get("alpha") == 1
    heard = views["gamma"].reached_from()  # other tests' aliases for the same brokers may be heard too
    assert heard["beta"] == 1 and heard["alpha"] == 2
    assert "beta" in views["gamma"].upstream and views["gamma"].hops["beta"] == 1
    carried = [p for p in views["gamma"].paths if (p.source, p.target, p.topic) == ("alpha", "beta", "beta.heartbeats")]
    assert len(carried) == 1 and carried[0].age_s < 30 and carried[0].hops == 2


def test_mm2s_remote_cluster_utils_reads_the_same_topology(chain, repo) -> None:  # type: ignore[no-untyped-def]
    cfg, _, work = chain
    for v in topology.view(cfg):
        cluster = cfg.cluster(v.alias)
        assert oracle(repo, cluster, "upstream", tmp=work) == v.upstream, v.alias
        for other in cfg.clusters:
            assert int(oracle(repo, cluster, "hops", other, tmp=work)[0]) == v.hops.get(other, -1), (v.alias, other)


def test_the_topology_command_prints_the_graph(chain) -> None:  # type: ignore[no-untyped-def]
    _, path, _ = chain
    command = subprocess.Popen([sys.executable, "-m", "mirrorflow", "--config", str(path), "topology"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    try:
        stdout, stderr = command.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        command.send_signal(signal.SIGABRT)  # the faulthandler prints where every thread is
        pytest.fail("mirrorflow topology took over 120 s:\n" + command.communicate()[1][-6000:])
    out = subprocess.CompletedProcess(command.args, command.returncode, stdout, stderr)
    assert out.returncode == 0, out.stderr
    assert "heard alpha->beta via beta.heartbeats: 2 hop(s) from alpha" in out.stdout
    [gamma] = [line for line in out.stdout.splitlines() if line.startswith("gamma: ")]
    assert gamma.startswith("gamma: upstream clusters by MM2's naming rule ") and "alpha->beta" in gamma.split(
        "flows heard in its heartbeats ")[1], gamma
    assert "flows (enabled): alpha->beta, beta->gamma" in out.stdout
    assert "password" not in out.stdout.lower()
