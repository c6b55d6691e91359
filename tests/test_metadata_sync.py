"""Metadata sync against real brokers: topics, partitions, configs (alpha->beta) and ACLs (gamma->delta, both
SASL with an authorizer; delta is started for this module). Plans are checked before each sync."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from mirrorflow.errors import OperationalError
from mirrorflow.kafka import admin_sync, clients
from mirrorflow.model import config, drift
from mirrorflow.model.drift import AddPartitions, CreateAcl, CreateTopic, DeleteConfig, Notice, SetConfig
from support import ports
from support.airflow import deployment
from support.clusters import PORTS, clusters_text, own_broker
from support.streams import create_topic

pytestmark = pytest.mark.kafka
ALPHA = f"127.0.0.1:{PORTS['alpha']}"
BETA = f"127.0.0.1:{PORTS['beta']}"
DELTA_PORT = ports.DELTA
SASL = ("security.protocol = SASL_PLAINTEXT\n{a}.sasl.mechanism = SCRAM-SHA-512\n{a}.sasl.jaas.config = "
        "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{user}\" password=\"{pw}\";\n")


def _config_text(delta_user: str = "admin", delta_password: str = "${env:GAMMA_PASSWORD}", extra: str = "") -> str:
    base = "\n".join(line for line in clusters_text().splitlines() if ".enabled" not in line)
    base = base.replace("clusters = alpha, beta, gamma", "clusters = alpha, beta, gamma, delta")
    delta = (f"delta.bootstrap.servers = 127.0.0.1:{DELTA_PORT}\ndelta."
             + SASL.format(a="delta", user=delta_user, pw=delta_password))
    return (f"{base}\n{delta}alpha->beta.enabled = true\ngamma->delta.enabled = true\n"
            f"topics = t7\\..*\nalpha->beta.use.defaults.from = target\n{extra}")


@pytest.fixture(scope="module")
def clusters(local_clusters: config.MirrorConfig, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[config.MirrorConfig, Path]]:
    path = tmp_path_factory.mktemp("metadata") / "sync.properties"
    path.write_text(_config_text())
    cfg = config.load(path)
    with own_broker(cfg, "delta"):
        yield cfg, path


def _admin(cfg: config.MirrorConfig, alias: str) -> AdminClient:
    return clients.admin(cfg.cluster(alias), log_level=0)


def _configs(admin: AdminClient, topic: str) -> dict[str, Any]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(30)  # type: ignore[no-any-return]


def _alter(admin: AdminClient, topic: str, **entries: str | None) -> None:
    ops = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.DELETE if v is None
                       else AlterConfigOpType.SET) for k, v in entries.items()]
    for f in admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.TOPIC, topic,
                                                             incremental_configs=ops)]).values():
        f.result(30)


def _plan(cfg: config.MirrorConfig, flow: str = "alpha->beta", parts: tuple[str, ...] = drift.PARTS) -> list[Any]:
    return admin_sync.flow_plan(cfg, cfg.flow(flow), parts)


def _changes(cfg: config.MirrorConfig, flow: str = "alpha->beta") -> list[Any]:
    return [c for c in _plan(cfg, flow) if not isinstance(c, Notice)]


def test_sync_creates_remote_topics_with_partitions_and_configs_and_a_rerun_changes_nothing(clusters) -> None:  # type: ignore[no-untyped-def]
    cfg, _ = clusters
    create_topic(ALPHA, "t7.orders", 3, **{"cleanup.policy": "compact", "retention.ms": "3600000",
                                           "min.insync.replicas": "1"})
    create_topic(ALPHA, "t7.plain", 1)
    planned = _changes(cfg)
    assert CreateTopic("alpha.t7.orders", 3, 1, {"cleanup.policy": "compact", "retention.ms": "3600000"}) in planned
    assert CreateTopic("alpha.t7.plain", 1, 1, {}) in planned
    done, _ = admin_sync.sync_flow(cfg, cfg.flow("alpha->beta"))
    assert done == planned
    beta = _admin(cfg, "beta")
    entries = _configs(beta, "alpha.t7.orders")
    assert entries["cleanup.policy"].value == "compact" and entries["retention.ms"].value == "3600000"
    assert entries["min.insync.replicas"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value  # excluded: not synced
    assert len(beta.list_topics("alpha.t7.orders", timeout=30).topics["alpha.t7.orders"].partitions) == 3
    assert _changes(cfg) == []
    assert admin_sync.sync_flow(cfg, cfg.flow("alpha->beta"))[0] == []


def test_partitions_grow_with_the_source(clusters) -> None:  # type: ignore[no-untyped-def]
    cfg, _ = clusters
    alpha = _admin(cfg, "alpha")  # held while its future is awaited
    alpha.create_partitions([NewPartitions("t7.orders", 5)])["t7.orders"].result(30)
    assert _changes(cfg) == [AddPartitions("alpha.t7.orders", 3, 5)]
    admin_sync.sync_flow(cfg, cfg.flow("alpha->beta"), ("topics",))
    md = _admin(cfg, "beta").list_topics("alpha.t7.orders", timeout=30)
    assert len(md.topics["alpha.t7.orders"].partitions) == 5


def test_a_config_change_propagates_and_an_excluded_key_keeps_its_target_value(clusters) -> None:  # type: ignore[no-untyped-def]
    cfg, _ = clusters
    _alter(_admin(cfg, "alpha"), "t7.orders", retention_ms="7200000", min_insync_replicas="1")
    _alter(_admin(cfg, "beta"), "alpha.t7.orders", min_insync_replicas="2")
    planned = _plan(cfg)
    assert SetConfig("alpha.t7.orders", "retention.ms", "3600000", "7200000") in planned
    assert any(isinstance(c, Notice) and "min.insync.replicas stays 2" in c.text for c in planned)
    admin_sync.sync_flow(cfg, cfg.flow("alpha->beta"), ("configs",))
    entries = _configs(_admin(cfg, "beta"), "alpha.t7.orders")
    assert entries["retention.ms"].value == "7200000" and entries["min.insync.replicas"].value == "2"


def test_deleting_a_source_override_reverts_the_target_to_its_own_default(clusters) -> None:  # type: ignore[no-untyped-def]
    cfg, _ = clusters
    _alter(_admin(cfg, "alpha"), "t7.orders", retention_ms=None)
    assert _changes(cfg) == [DeleteConfig("alpha.t7.orders", "retention.ms", "7200000")]
    admin_sync.sync_flow(cfg, cfg.flow("alpha->beta"))
    entry = _configs(_admin(cfg, "beta"), "alpha.t7.orders")["retention.ms"]
    assert entry.source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def test_use_defaults_from_source_resets_the_target_to_the_source_default(clusters, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg, _ = clusters
    _alter(_admin(cfg, "beta"), "alpha.t7.plain", segment_ms="3600000")
    source_default = _configs(_admin(cfg, "alpha"), "t7.plain")["segment.ms"].value
    path = tmp_path / "defaults.properties"
    path.write_text(_config_text().replace("use.defaults.from = target", "use.defaults.from = source"))
    from_source = config.load(path)
    planned = _plan(from_source, parts=("configs",))
    assert SetConfig("alpha.t7.plain", "segment.ms", "3600000", source_default) in planned
    admin_sync.sync_flow(from_source, from_source.flow("alpha->beta"), ("configs",))
    assert _configs(_admin(cfg, "beta"), "alpha.t7.plain")["segment.ms"].value == source_default
    assert _plan(cfg, parts=("acls",)) == [Notice("alpha has no authorizer: no ACL to sync", "acls")]


def _acl(topic: str, principal: str, operation: AclOperation, permission: AclPermissionType,
         pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, pattern, principal, "*", operation, permission)


def test_acls_are_translated_by_mm2s_rules_and_created_once(clusters) -> None:  # type: ignore[no-untyped-def]
    cfg, _ = clusters
    gamma, delta = _admin(cfg, "gamma"), _admin(cfg, "delta")
    gamma.create_topics([NewTopic("t7.acl", 1, 1)])["t7.acl"].result(30)
    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    for f in gamma.create_acls([
        _acl("t7.acl", "User:alice", AclOperation.READ, allow), _acl("t7.acl", "User:bob", AclOperation.WRITE, allow),
        _acl("t7.acl", "User:carol", AclOperation.ALL, allow), _acl("t7.acl", "User:mallory", AclOperation.READ, deny),
        _acl("t7.", "User:dave", AclOperation.READ, allow, ResourcePatternType.PREFIXED),
    ]).values():
        f.result(30)
    # The test's own writes to the source are read back under the same rule: KRaft brokers apply them later.
    admin_sync.confirm("gamma", gamma, [drift.CreateAcl(a, a) for a in (
        drift.Acl("t7.acl", "User:alice", "READ", "ALLOW"), drift.Acl("t7.acl", "User:bob", "WRITE", "ALLOW"),
        drift.Acl("t7.acl", "User:carol", "ALL", "ALLOW"), drift.Acl("t7.acl", "User:mallory", "READ", "DENY"),
        drift.Acl("t7.", "User:dave", "READ", "ALLOW", pattern="PREFIXED"))])
    planned = _plan(cfg, "gamma->delta")
    assert [c.acl for c in planned if isinstance(c, CreateAcl)] == [
        drift.Acl("gamma.t7.acl", "User:alice", "READ", "ALLOW"),
        drift.Acl("gamma.t7.acl", "User:carol", "READ", "ALLOW"),
        drift.Acl("gamma.t7.acl", "User:mallory", "READ", "DENY")]
    notices = [c.text for c in planned if isinstance(c, Notice)]
    assert any("DENY rule copied" in n for n in notices) and any("PREFIXED ACL" in n for n in notices)
    admin_sync.sync_flow(cfg, cfg.flow("gamma->delta"))
    query = AclBindingFilter(ResourceType.TOPIC, "gamma.t7.acl", ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    found = {(b.principal, b.operation.name, b.permission_type.name) for b in delta.describe_acls(query).result(30)}
    assert found == {("User:alice", "READ", "ALLOW"), ("User:carol", "READ", "ALLOW"), ("User:mallory", "READ", "DENY")}
    assert _changes(cfg, "gamma->delta") == []


def test_a_change_the_cluster_never_shows_is_reported_in_one_line_after_the_bounded_wait(clusters) -> None:  # type: ignore[no-untyped-def]
    cfg, _ = clusters
    delta = _admin(cfg, "delta")
    with pytest.raises(OperationalError) as raised:
        admin_sync.confirm("delta", delta, [CreateTopic("t8.never", 2, 1, {}), AddPartitions("t8.never", 2, 3)],
                           timeout_s=1.5)
    assert str(raised.value) == ("delta: made, but not visible after 2 s: + create topic t8.never (2 partitions, "
                                 "replication factor 1) (and 1 more); the brokers lag the controller "
                                 "(kafka-metadata-quorum.sh describe --replication)")


def test_missing_permission_on_the_target_names_the_operation_and_the_resource(clusters, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg, _ = clusters
    delta = _admin(cfg, "delta")
    upsert = UserScramCredentialUpsertion("reader", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                          b"reader-secret")
    for f in delta.alter_user_scram_credentials([upsert]).values():
        f.result(30)
    gamma = _admin(cfg, "gamma")
    gamma.create_topics([NewTopic("t7.denied", 1, 1)])["t7.denied"].result(30)
    path = tmp_path / "reader.properties"
    path.write_text(_config_text("reader", "reader-secret"))
    out = subprocess.run([sys.executable, "-m", "mirrorflow", "--config", str(path), "sync", "--flow",
                          "gamma->delta", "--only", "topics"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert re.search(r"cannot create topic on delta: gamma\.t7\.\w+: Authorization failed", out.stderr), out.stderr
    assert "reader-secret" not in out.stderr + out.stdout


def test_a_topic_deleted_on_the_source_while_syncing_is_skipped(clusters) -> None:  # type: ignore[no-untyped-def]
    cfg, _ = clusters
    create_topic(ALPHA, "t7.doomed", 1)
    alpha = _admin(cfg, "alpha")

    def delete_while_listing(topic: str) -> bool:
        if topic == "t7.doomed":
            alpha.delete_topics(["t7.doomed"])["t7.doomed"].result(30)
        return topic.startswith("t7.")

    state = admin_sync.snapshot(alpha, "alpha", delete_while_listing)
    assert "t7.doomed" not in state.topics and "t7.orders" in state.topics


def test_a_confirmation_reads_the_configs_only_of_topics_whose_configs_changed(clusters) -> None:  # type: ignore[no-untyped-def]
    cfg, _ = clusters
    create_topic(ALPHA, "t7.created", 3)
    create_topic(ALPHA, "t7.configured", 1, **{"retention.ms": "700000"})
    alpha = _admin(cfg, "alpha")
    asked: list[list[str]] = []
    described = alpha.describe_configs

    def describe_configs(resources: list[ConfigResource], **kw: Any) -> Any:
        asked.append(sorted(r.name for r in resources))
        return described(resources, **kw)

    alpha.describe_configs = describe_configs  # type: ignore[method-assign]
    admin_sync.confirm("alpha", alpha, [CreateTopic("t7.created", 3, 1, {}),
                                        SetConfig("t7.configured", "retention.ms", None, "700000")])
    assert asked == [["t7.configured"]]
    state = admin_sync.snapshot(alpha, "alpha", {"t7.created", "t7.configured"}.__contains__,
                                configs={"t7.configured"}.__contains__)
    assert state.topics["t7.created"] == drift.TopicState(3)
    assert state.topics["t7.configured"].configs["retention.ms"].value == "700000"
    unseen = "not visible after 1 s: ~ set config t7.configured retention.ms"
    with pytest.raises(OperationalError, match=re.escape(unseen)):
        admin_sync.confirm("alpha", alpha, [SetConfig("t7.configured", "retention.ms", None, "1")], timeout_s=1.0)


def test_plan_json_and_sync_commands_report_each_change(clusters) -> None:  # type: ignore[no-untyped-def]
    _, path = clusters
    create_topic(ALPHA, "t7.cli", 2, **{"retention.ms": "600000"})
    base = [sys.executable, "-m", "mirrorflow", "--config", str(path)]
    out = subprocess.run([*base, "plan", "--flow", "alpha->beta", "--json"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    flows = json.loads(out.stdout)
    mine = [c for c in flows[0]["changes"] if c["topic"] == "alpha.t7.cli"]
    assert mine == [{"kind": "CreateTopic", "topic": "alpha.t7.cli", "partitions": 2, "replication_factor": 1,
                     "configs": {"retention.ms": "600000"},
                     "text": "+ create topic alpha.t7.cli (2 partitions, replication factor 1, retention.ms=600000)"}]
    out = subprocess.run([*base, "sync", "--flow", "alpha->beta"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "change(s) made" in out.stdout and "+ create topic alpha.t7.cli" in out.stdout
    out = subprocess.run([*base, "plan", "--flow", "alpha->beta"], capture_output=True, text=True, timeout=120)
    assert "0 change(s) planned" in out.stdout


def test_offsets_are_read_per_partition_in_calls_of_a_few_and_a_partition_that_does_not_answer_is_named_or_left_out(
        clusters, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cfg, _ = clusters
    create_topic(ALPHA, "offsets-probe", 3)
    plain = Producer({"bootstrap.servers": ALPHA, "log_level": 0})
    for _ in range(5):
        plain.produce("offsets-probe", b"x", partition=0)
    plain.produce("offsets-probe", b"x", partition=2)
    plain.flush(30)
    producer = Producer({"bootstrap.servers": ALPHA, "transactional.id": "offsets-probe", "log_level": 0})
    alpha = _admin(cfg, "alpha")
    alpha.delete_records([TopicPartition("offsets-probe", 0, 2)])[TopicPartition("offsets-probe", 0, 2)].result(30)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("offsets-probe", b"open", partition=1)
    producer.flush(30)  # left open: the last stable offset stays below it
    monkeypatch.setattr(admin_sync, "OFFSETS_PER_CALL", 2)
    tps = [("offsets-probe", p) for p in range(3)]
    assert admin_sync.offsets(alpha, "alpha", tps, OffsetSpec.earliest()) == {tps[0]: 2, tps[1]: 0, tps[2]: 0}
    assert admin_sync.offsets(alpha, "alpha", tps, OffsetSpec.latest()) == {tps[0]: 5, tps[1]: 1, tps[2]: 1}
    assert admin_sync.offsets(alpha, "alpha", tps, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED) == {
        tps[0]: 5, tps[1]: 0, tps[2]: 1}
    gone = ("offsets-probe", 7)
    assert admin_sync.offsets(alpha, "alpha", [*tps, gone], OffsetSpec.latest(), available_within=5) == {
        tps[0]: 5, tps[1]: 1, tps[2]: 1}
    with pytest.raises(OperationalError, match=r"^cannot read the offsets of offsets-probe-7 on alpha: "):
        admin_sync.offsets(alpha, "alpha", [*tps, gone], OffsetSpec.latest())
    producer.abort_transaction(30)


@pytest.mark.airflow
def test_the_flow_dag_plans_then_applies_the_metadata_sync_against_the_real_clusters(clusters, airflow_home) -> None:  # type: ignore[no-untyped-def]
    cfg, path = clusters
    create_topic(ALPHA, "t7.dag", 2, **{"cleanup.policy": "compact"})
    with deployment(path) as bag:
        assert bag.import_errors == {}
        dag = bag.dags["mirrorflow_flow__alpha_to_beta"].partial_subset("apply_acls")
        assert [t.task_id for t in dag.topological_sort()] == ["plan", "apply_topics", "apply_configs", "apply_acls"]
        assert dag.test().state == "success"
    assert _configs(_admin(cfg, "beta"), "alpha.t7.dag")["cleanup.policy"].value == "compact"
    assert _changes(cfg) == []
