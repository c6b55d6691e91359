"""Where a flow resumes: an operator's reset of a stopped flow, and a remote topic deleted on the target held until
a reset releases it. Real brokers, real Spark. (Apart from tests/test_stream_faults.py so that `make test` runs them in
its first lane: support/lanes.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from mirrorflow.model import config
from support.clusters import PORTS
from support.streams import (
    QUIET,
    StreamProcess,
    cli_json,
    config_text,
    create_topic,
    produce_tagged,
    read_partition,
    record_counts,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]
ALPHA = f"127.0.0.1:{PORTS['alpha']}"
BETA = f"127.0.0.1:{PORTS['beta']}"


def _reset(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mirrorflow", "--config", str(cfg), "reset", "--flow",
                           "redo->held", "--topic", "redo.t", *args], capture_output=True, text=True, timeout=120)


def test_a_reset_moves_where_the_stopped_flow_resumes_and_is_refused_while_it_runs(
        stream_clusters: config.MirrorConfig, tmp_path: Path) -> None:
    cfg = tmp_path / "mirror.properties"
    cfg.write_text(config_text(("redo", "held"), (PORTS["alpha"], PORTS["beta"]), ["redo->held"],
                               "topics = redo\\..*\n"))
    create_topic(ALPHA, "redo.t", 1)
    produce_tagged(ALPHA, "redo.t", 1, 100, "r")
    stream = StreamProcess(cfg, "redo->held", tmp_path / "stream")
    stream.start()
    try:
        wait_for(lambda: record_counts(BETA, "redo.redo.t") == [100], 240, "the first records", stream)
        refused = _reset(cfg, "--to", "40")
        assert refused.returncode == 1 and refused.stdout == ""
        assert refused.stderr.strip().splitlines()[-1] == (
            "mirrorflow: error: flow redo->held is already running on /127.0.0.1 (consumer group "
            "mirrorflow:redo->held); stop that instance first"), refused.stderr
        assert stream.stop() == 0

        done = _reset(cfg, "--to", "40", "--reason", "re-mirror after a bad consumer deploy")
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[0] == "flow redo->held: reset redo.t-0: 100 -> 40"
        assert "reset by" in done.stderr, done.stderr
        assert "(re-mirror after a bad consumer deploy): redo.t-0: 100 -> 40" in done.stderr
        stream.start()
        wait_for(lambda: record_counts(BETA, "redo.redo.t") == [160], 240, "the re-mirrored records", stream)
        values = [m.value() for m in read_partition(BETA, "redo.redo.t", 0, committed=True)]
        assert values[100:] == [f"r-0-{i}".encode() for i in range(40, 100)]
        assert "a new Spark checkpoint, at the offset syncs' positions" in stream.output()
        assert stream.stop() == 0

        produce_tagged(ALPHA, "redo.t", 1, 10, "skipped")
        assert _reset(cfg, "--to", "latest").stdout.splitlines()[0] == "flow redo->held: reset redo.t-0: 100 -> 110"
        assert _reset(cfg, "--to", "7000").stderr.strip() == (
            "mirrorflow: error: reset position 7000: redo.t-0 holds offsets 0..110 (its log start to its end)")
        stream.start()
        produce_tagged(ALPHA, "redo.t", 1, 5, "after")
        wait_for(lambda: record_counts(BETA, "redo.redo.t") == [165], 240, "the records after the skip", stream)
        values = [m.value() for m in read_partition(BETA, "redo.redo.t", 0, committed=True)]
        assert values[160:] == [f"after-0-{i}".encode() for i in range(5)]
        assert stream.stop() == 0
    finally:
        stream.stop()


def test_a_remote_topic_deleted_on_the_target_is_held_not_re_created_and_a_reset_releases_it(
        stream_clusters: config.MirrorConfig, tmp_path: Path) -> None:
    cfg = tmp_path / "mirror.properties"
    cfg.write_text(config_text(("kept", "gone"), (PORTS["alpha"], PORTS["beta"]), ["kept->gone"],
                               "topics = held\\..*\nmirrorflow.offset-syncs.prune.interval.seconds = 2\n"))
    create_topic(ALPHA, "held.a", 1)
    create_topic(ALPHA, "held.b", 1)
    produce_tagged(ALPHA, "held.a", 1, 50, "a")
    produce_tagged(ALPHA, "held.b", 1, 50, "b")
    target = AdminClient({"bootstrap.servers": BETA, **QUIET})
    stream = StreamProcess(cfg, "kept->gone", tmp_path / "stream")
    stream.start()
    try:
        wait_for(lambda: record_counts(BETA, "kept.held.a") == [50] and record_counts(BETA, "kept.held.b") == [50],
                 240, "the first records", stream)
        target.delete_topics(["kept.held.a"])["kept.held.a"].result(30)
        produce_tagged(ALPHA, "held.a", 1, 20, "a2")
        produce_tagged(ALPHA, "held.b", 1, 20, "b2")
        wait_for(lambda: record_counts(BETA, "kept.held.b") == [70], 240, "the other topic", stream)
        wait_for(lambda: "held.a is HELD" in stream.output(), 120, "the hold", stream)
        assert "kept.held.a" not in target.list_topics(timeout=10).topics
        assert stream.alive()
        assert stream.stop() == 0
        [flow] = cli_json(cfg, "status", "--flow", "kept->gone")
        assert [h["topic"] for h in flow["held-topics"]] == ["held.a"], flow["held-topics"]
        assert "remote topic kept.held.a deleted on gone" in flow["held-topics"][0]["why"]

        released = subprocess.run([sys.executable, "-m", "mirrorflow", "--config", str(cfg), "reset", "--flow",
                                   "kept->gone", "--topic", "held.a", "--to", "earliest"],
                                  capture_output=True, text=True, timeout=120)
        assert released.returncode == 0, released.stderr
        assert "remote topic kept.held.a was deleted on gone: its copies start again" in released.stderr
        stream.start()
        wait_for(lambda: record_counts(BETA, "kept.held.a") == [70], 240, "held.a again, whole", stream)
        values = [m.value() for m in read_partition(BETA, "kept.held.a", 0, committed=True)]
        assert values == [f"a-0-{i}".encode() for i in range(50)] + [f"a2-0-{i}".encode() for i in range(20)]
        assert record_counts(BETA, "kept.held.b") == [70]
        assert stream.stop() == 0
    finally:
        stream.stop()
