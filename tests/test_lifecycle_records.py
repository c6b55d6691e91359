"""Pure parts of the stream lifecycle and the runbooks: state records, lag arithmetic, trigger-form parameters,
and Airflow Kafka connections read as cluster settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mirrorflow.entry import deployment, scheduled
from mirrorflow.errors import ConfigError
from mirrorflow.jobs import lifecycle
from mirrorflow.jobs.lifecycle import FlowHealth, PartitionLag, Requested
from mirrorflow.jobs.runbooks import FAILBACK, FAILOVER, Runbook
from mirrorflow.model import client_config


def test_a_requested_state_round_trips_through_its_record() -> None:
    wanted = Requested("a->b", lifecycle.STOPPED, "failover to b", 1_700_000_000_000)
    assert Requested.decode(wanted.key(), wanted.value()) == wanted
    assert wanted.line() == "requested stopped since 2023-11-14 22:13:20 UTC (failover to b)"


def test_lag_is_what_the_source_holds_past_the_mirrored_position_and_never_negative() -> None:
    assert PartitionLag("t", 0, source_end=120, mirrored=100).records == 20
    assert PartitionLag("t", 0, source_end=100, mirrored=130).records == 0


def test_the_lag_in_seconds_is_the_age_of_the_oldest_record_not_mirrored() -> None:
    lags = (PartitionLag("t", 0, 10, 5, oldest_unmirrored_ms=90_000), PartitionLag("t", 1, 10, 10, 10_000),
            PartitionLag("t", 2, 10, 8, oldest_unmirrored_ms=95_000))
    found = FlowHealth("a->b", Requested("a->b"), ("host",), 1.0, lags, measured_at=100.0)
    assert found.lag_records == 7 and found.lag_seconds == 10.0 and found.alive
    assert [b.partition for b in found.behind()] == [0, 2]
    unknown = FlowHealth("a->b", Requested("a->b"), (), None, None, "cluster a unreachable")
    assert unknown.lag_records is None and unknown.lag_seconds is None and not unknown.alive
    assert "lag unknown (cluster a unreachable)" in unknown.line()


def test_a_failover_form_and_a_failback_form_become_runbooks_over_the_right_flow() -> None:
    rb = scheduled.runbook_of(FAILOVER, {"source": " primary ", "target": "backup", "groups": "app-.*",
                                         "mode": "unplanned", "dry_run": True, "switch_flows": False})
    assert rb == Runbook(FAILOVER, "primary", "backup", "app-.*", "unplanned", True, False, 300.0)
    assert rb.flow_name == "primary->backup" and rb.reverse_name == "backup->primary"
    back = scheduled.runbook_of(FAILBACK, {"original": "primary", "backup": "backup", "drain_timeout_s": 60})
    assert (back.source, back.target, back.mode, back.flow_name) == ("backup", "primary", "planned", "backup->primary")
    assert Runbook.from_dict(back.as_dict()) == back


def test_a_kafka_connection_extra_maps_to_java_properties_that_map_back_to_it() -> None:
    extra = {"bootstrap.servers": "k:9093", "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
             "sasl.username": "mirror", "sasl.password": "pw-1", "ssl.ca.location": "/etc/ca.pem"}
    java = client_config.from_librdkafka(extra, where="conn")
    assert java["sasl.jaas.config"].startswith("org.apache.kafka.common.security.scram.ScramLoginModule required")
    back, dropped = client_config.to_librdkafka(java)
    assert back == {**{k: v for k, v in extra.items() if k != "sasl.mechanisms"}, "sasl.mechanism": "SCRAM-SHA-512"}
    assert dropped == []
    with pytest.raises(ConfigError, match=r"sasl\.mechanism PLAIN"):
        client_config.from_librdkafka({"sasl.username": "u", "sasl.password": "p"}, where="conn")


def test_an_airflow_connection_overrides_the_files_cluster_settings_and_its_secret_is_masked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.log import redact

    path = tmp_path / "mm.properties"
    path.write_text("clusters = a, b\na.bootstrap.servers = old:1\nb.bootstrap.servers = b:1\na->b.enabled = true\n")
    monkeypatch.setenv("AIRFLOW_CONN_MIRRORFLOW_A", json.dumps({"conn_type": "kafka", "extra": {
        "bootstrap.servers": "new:9092", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.username": "svc", "sasl.password": "hunter2-long-secret"}}))
    cfg = deployment.load(path)
    a = cfg.cluster("a").client_config("admin")
    assert a["bootstrap.servers"] == "new:9092" and 'password="hunter2-long-secret"' in a["sasl.jaas.config"]
    assert cfg.cluster("b").bootstrap_servers == "b:1"
    assert "hunter2-long-secret" not in str(redact(f"connecting with {a['sasl.jaas.config']}"))


def test_a_wait_asks_again_after_a_check_that_cannot_be_answered_and_raises_only_at_its_deadline() -> None:
    """A stop waits for the lease to be free; a describe of the lease group that times out once must not fail it."""
    from mirrorflow.errors import OperationalError
    from mirrorflow.jobs.lifecycle import wait_until

    answers = iter([OperationalError("cluster b: timed out"), False, True])

    def check() -> bool:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert wait_until(check, timeout_s=5, interval_s=0)

    def unanswered() -> bool:
        raise OperationalError("cluster b: unreachable")

    with pytest.raises(OperationalError, match="unreachable"):
        wait_until(unanswered, timeout_s=0.05, interval_s=0.01)
    assert not wait_until(lambda: False, timeout_s=0.05, interval_s=0.01)
