"""The command-line contract, run as a user runs it: exit codes and one-line messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mirrorflow", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=120, check=False)


@pytest.mark.parametrize("name", ["active-passive", "active-active", "xdcr-six-clusters"])
def test_validate_accepts_the_mm2_documentation_examples(name: str) -> None:
    r = run("--config", f"include/examples/{name}.properties", "validate")
    assert r.returncode == 0, r.stderr
    assert "valid:" in r.stdout


def test_validate_json_lists_flows_and_masks_secrets(tmp_path: Path) -> None:
    cfg = tmp_path / "c.properties"
    cfg.write_text("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\n"
                   "A->B.enabled = true\nA.sasl.jaas.config = org.apache.kafka.common.security.plain."
                   "PlainLoginModule required username=\"u\" password=\"${env:PW}\";\n"
                   "A->B.ssl.truststore.password = plain-secret\n")
    r = run("--config", str(cfg), "validate", "--json", env={"PW": "hunter2", "PATH": "/usr/bin"})
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert [f["name"] for f in data["flows"]] == ["A->B"]
    assert data["flows"][0]["settings"]["ssl.truststore.password"] == "[hidden]"
    assert "hunter2" not in r.stdout + r.stderr and "plain-secret" not in r.stdout + r.stderr


def test_validate_lists_the_mm2_keys_it_accepts_but_does_not_use(tmp_path: Path) -> None:
    cfg = tmp_path / "c.properties"
    cfg.write_text("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\n"
                   "A->B.enabled = true\nA->B.sync.group.offsets.interval.seconds = 30\n")
    r = run("--config", str(cfg), "validate")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[2] == (f"{cfg}:5: A->B.sync.group.offsets.interval.seconds: accepted, not used: "
                                        "group offsets are synced in every checkpoint round "
                                        "(emit.checkpoints.interval.seconds)")
    assert json.loads(run("--config", str(cfg), "validate", "--json").stdout)["not_used"] == r.stdout.splitlines()[2:]


def test_validate_prints_each_enabled_flows_stream_settings(tmp_path: Path) -> None:
    cfg = tmp_path / "c.properties"
    cfg.write_text("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\nA->B.enabled = true\n"
                   "B->A.enabled = true\nmirrorflow.stream.trigger.ms = 250\n"
                   "B->A.mirrorflow.stream.spark.master = yarn\nB->A.mirrorflow.stream.linger.ms = 0\n")
    lines = run("--config", str(cfg), "validate").stdout.splitlines()
    assert lines[1:3] == [
        "A->B stream: master local[*] (the stream DAG: connection mirrorflow_spark), driver memory 1g, at most "
        "250,000 records per batch, trigger 250 ms, linger 1500 ms",
        "B->A stream: master yarn, driver memory 1g, at most 250,000 records per batch, trigger 250 ms, linger 0 ms"]


def test_bad_config_exits_2_with_one_line_per_problem(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.properties"
    cfg.write_text("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\nA->C.enabled = true\n")
    r = run("--config", str(cfg), "validate")
    assert r.returncode == 2
    assert r.stderr.startswith(f"mirrorflow: error: {cfg}:4: A->C.enabled: ")
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_config_from_the_environment_and_missing_file() -> None:
    r = run("validate", env={"MIRRORFLOW_CONFIG": "include/examples/active-passive.properties", "PATH": "/usr/bin"})
    assert r.returncode == 0 and "active-passive" in r.stdout
    r = run("--config", "nope.properties", "validate")
    assert r.returncode == 2 and r.stderr == "mirrorflow: error: nope.properties: file not found\n"


def test_usage_errors_exit_2() -> None:
    assert run("frobnicate").returncode == 2
    assert run().returncode == 2


def test_every_command_has_help() -> None:
    for command in ["validate", "local", "mm1", "stream", "status", "checkpoint", "translate", "plan", "sync",
                    "topology", "health", "start", "stop", "failover", "failback", "airflow", "audit", "backfill"]:
        r = run(command, "--help")
        assert r.returncode == 0 and "usage: mirrorflow" in r.stdout, command


def test_batch_ranges_that_cannot_be_read_exit_2_in_one_line() -> None:
    for args, says in [(("--from-time", "yesterday"), "neither epoch milliseconds nor ISO 8601"),
                       (("--from-offsets", '{"orders": {"0": -1}}'), "offset >= 0 (or -2 for the earliest)"),
                       (("--from-offsets", "[1]"), 'must be an object like {"orders"'),
                       ((), "one of the arguments --from-offsets --from-time is required")]:
        r = run("backfill", "--flow", "primary->backup", *args)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_audit_of_a_flow_without_provenance_headers_is_refused_before_reading(tmp_path: Path) -> None:
    cfg = tmp_path / "bare.properties"
    cfg.write_text("clusters = a, b\na.bootstrap.servers = 127.0.0.1:1\nb.bootstrap.servers = 127.0.0.1:1\n"
                   "a->b.enabled = true\na->b.mirrorflow.provenance.header.enabled = false\n")
    r = run("--config", str(cfg), "audit", "--flow", "a->b")
    assert r.returncode == 2 and "provenance header" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr


def test_clusters_selection_unknown_alias_exits_2() -> None:
    r = run("--config", "include/examples/xdcr-six-clusters.properties", "--clusters", "south-1", "validate")
    assert r.returncode == 2 and "unknown cluster alias 'south-1'" in r.stderr


def test_checkpoint_against_an_unreachable_cluster_fails_in_one_line_within_its_timeout(tmp_path: Path) -> None:
    cfg = tmp_path / "down.properties"
    cfg.write_text("clusters = a, b\na.bootstrap.servers = 127.0.0.1:1\nb.bootstrap.servers = 127.0.0.1:2\n"
                   "a->b.enabled = true\n")
    r = run("--config", str(cfg), "checkpoint")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "b unreachable" in r.stderr, r.stderr


def test_validate_refuses_a_producer_batching_the_writer_would_refuse_in_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "batching.properties"
    cfg.write_text("clusters = a, b\na.bootstrap.servers = 127.0.0.1:1\nb.bootstrap.servers = 127.0.0.1:1\n"
                   "a->b.enabled = true\nb.producer.linger.ms = 60000\n")
    r = run("--config", str(cfg), "validate")
    assert r.returncode == 2 and "b.producer.linger.ms" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr


@pytest.mark.parametrize("command", [["validate"], ["stream", "--flow", "a->b"],
                                     ["backfill", "--flow", "a->b", "--from-offsets", '{"t": {"0": 0}}']])
def test_a_source_message_size_the_copier_cannot_read_is_refused_in_one_line(tmp_path: Path, command: list[str]
                                                                            ) -> None:
    cfg = tmp_path / "sizes.properties"
    cfg.write_text("clusters = a, b\na.bootstrap.servers = 127.0.0.1:1\nb.bootstrap.servers = 127.0.0.1:1\n"
                   "a->b.enabled = true\na.consumer.max.request.size = 10MB\n")
    r = run("--config", str(cfg), *command)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "a.consumer.message.max.bytes: '10MB': the copier needs a whole number of bytes" in r.stderr


def _two_way(tmp_path: Path, reverse_enabled: bool = True) -> Path:
    cfg = tmp_path / "two-way.properties"
    cfg.write_text("clusters = A, B\nA.bootstrap.servers = 127.0.0.1:1\nB.bootstrap.servers = 127.0.0.1:1\n"
                   f"A->B.enabled = true\nB->A.enabled = {str(reverse_enabled).lower()}\n")
    return cfg


def test_a_groups_regex_java_cannot_read_stops_a_failover_with_one_line_and_exit_2(tmp_path: Path) -> None:
    r = run("--config", str(_two_way(tmp_path)), "failover", "--source", "A", "--target", "B", "--groups", "[a&&b]",
            "--dry-run")
    assert r.returncode == 2, r.stderr
    assert "groups regex '[a&&b]' is not valid: character class intersection (&&) is not supported" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_declared_but_disabled_flow_is_named_with_the_key_that_enables_it(tmp_path: Path) -> None:
    cfg = _two_way(tmp_path, reverse_enabled=False)
    r = run("--config", str(cfg), "failover", "--source", "A", "--target", "B", "--dry-run")
    assert r.returncode == 2, r.stderr
    assert ("cannot start the reverse flow: flow B->A is not enabled (set B->A.enabled = true, or run with "
            "switch_flows off)") in r.stderr, r.stderr
    r = run("--config", str(cfg), "backfill", "--flow", "B->A", "--from-offsets", '{"t": {"0": 0}}')
    assert r.returncode == 2 and "flow B->A is not enabled (set B->A.enabled = true)" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_kafka_error_nothing_handled_is_one_line_and_exit_1_retryable_as_kafka_says(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line's boundary maps librdkafka's errors into mirrorflow's tree (kafka/clients.operational)."""
    import argparse

    from confluent_kafka import KafkaError, KafkaException
    from mirrorflow.entry.cli import common
    from mirrorflow.errors import OperationalError, RetryableError
    from mirrorflow.kafka import clients

    monkeypatch.setattr(clients, "_quiet", False)  # run() quiets librdkafka for the process: not for later tests

    def denied(_: argparse.Namespace) -> int:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    assert common.run(argparse.Namespace(run=denied, command="validate")) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mirrorflow: error: Kafka: TOPIC_AUTHORIZATION_FAILED")
    timed_out = clients.operational(KafkaException(KafkaError(KafkaError._TIMED_OUT)))
    assert isinstance(timed_out, RetryableError)
    restarting = clients.operational(KafkaException(KafkaError(KafkaError._DESTROY_BROKER)))
    assert isinstance(restarting, RetryableError)  # a broker dropped from metadata while it restarts
    denial = clients.operational(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    assert isinstance(denial, OperationalError) and not isinstance(denial, RetryableError)


def test_a_checkpoint_folder_is_a_path_or_a_file_url_and_another_file_systems_url_is_refused() -> None:
    from mirrorflow.errors import ConfigError
    from mirrorflow.model.paths import checkpoint_folder

    assert checkpoint_folder("ckpt/a") == Path("ckpt/a")
    assert checkpoint_folder("/var/lib/mirrorflow/ckpt") == Path("/var/lib/mirrorflow/ckpt")
    assert checkpoint_folder("file:///var/ckpt") == Path("/var/ckpt")
    assert checkpoint_folder("file://LocalHost/var/ckpt") == Path("/var/ckpt")
    assert checkpoint_folder("file:/var/ckpt") == Path("/var/ckpt")
    assert checkpoint_folder("FILE:///var/a%20b") == Path("/var/a b")
    assert checkpoint_folder("C:/ckpt") == Path("C:/ckpt")
    assert checkpoint_folder("ckpt/x://y") == Path("ckpt/x://y")
    for url in ("hdfs://namenode:8020/mirrorflow/A-B", "s3a://bucket/ckpt", "file://otherhost/var/ckpt", "hdfs:/x",
                "S3A:/b/x", "file:relative", "viewfs://cluster/ckpt"):
        with pytest.raises(ConfigError, match="not supported yet"):
            checkpoint_folder(url)


def test_a_stream_given_a_checkpoint_url_of_another_file_system_stops_in_one_line_before_spark(tmp_path: Path) -> None:
    r = run("--config", str(_two_way(tmp_path)), "stream", "--flow", "A->B", "--checkpoint", "hdfs://nn:8020/ckpt")
    assert r.returncode == 2, r.stderr
    assert "--checkpoint: hdfs://nn:8020/ckpt: a checkpoint on another file system" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
