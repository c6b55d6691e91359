"""The drift plan's rules (MM2's metadata sync), on snapshots: no cluster needed."""

from __future__ import annotations

from mirrorflow.model import config
from mirrorflow.model.drift import (
    Acl,
    AddPartitions,
    ClusterState,
    ConfigValue,
    CreateAcl,
    CreateTopic,
    DeleteConfig,
    Notice,
    SetConfig,
    TopicState,
    plan,
    unseen,
)


def flow(extra: str = "") -> config.Flow:
    cfg = config.from_text("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
                           f"a->b.enabled = true\nreplication.factor = 3\n{extra}")
    return cfg.flow("a->b")


def topic(partitions: int = 1, **configs: ConfigValue) -> TopicState:
    return TopicState(partitions, {k.replace("_", "."): v for k, v in configs.items()})


DEFAULT_RETENTION = ConfigValue("604800000", "default")


def test_a_missing_remote_topic_is_created_with_its_configs_in_one_step() -> None:
    source = ClusterState("a", {"orders": topic(3, cleanup_policy=ConfigValue("compact"),
                                                retention_ms=DEFAULT_RETENTION)})
    changes = plan(flow(), source, ClusterState("b", {}, brokers=1))
    assert changes[0] == CreateTopic("a.orders", 3, 1, {"cleanup.policy": "compact"})
    assert isinstance(changes[1], Notice) and "replication factor 3 capped" in changes[1].text


def test_partitions_grow_and_never_shrink() -> None:
    source = ClusterState("a", {"grow": topic(4), "shrunk": topic(2)})
    target = ClusterState("b", {"a.grow": topic(2), "a.shrunk": topic(6)}, brokers=3)
    changes = plan(flow(), source, target, ["topics"])
    assert changes[0] == AddPartitions("a.grow", 2, 4)
    assert isinstance(changes[1], Notice) and "never removed" in changes[1].text


def test_configs_set_changed_entries_and_delete_overrides_at_the_source_default() -> None:
    source = ClusterState("a", {"t": topic(retention_ms=ConfigValue("1000"), segment_ms=ConfigValue("9", "default"),
                                          max_message_bytes=ConfigValue("1", "static"),
                                          secret=ConfigValue(None, "topic", sensitive=True))})
    target = ClusterState("b", {"a.t": topic(retention_ms=ConfigValue("5"), segment_ms=ConfigValue("7"),
                                            max_message_bytes=ConfigValue("2", "static"))})
    assert plan(flow(), source, target, ["configs"]) == [
        SetConfig("a.t", "retention.ms", "5", "1000"), DeleteConfig("a.t", "segment.ms", "7")]


def test_use_defaults_from_source_sets_the_source_default() -> None:
    source = ClusterState("a", {"t": topic(segment_ms=ConfigValue("9", "default"))})
    target = ClusterState("b", {"a.t": topic(segment_ms=ConfigValue("7"))})
    assert plan(flow("use.defaults.from = source\n"), source, target, ["configs"]) == [
        SetConfig("a.t", "segment.ms", "7", "9")]


def test_an_excluded_key_keeps_its_target_value_and_the_plan_says_so() -> None:
    source = ClusterState("a", {"t": topic(min_insync_replicas=ConfigValue("2"))})
    target = ClusterState("b", {"a.t": topic(min_insync_replicas=ConfigValue("1", "default"))})
    changes = plan(flow(), source, target, ["configs"])
    assert len(changes) == 1 and isinstance(changes[0], Notice) and "config.properties.exclude" in changes[0].text


def test_nothing_changes_when_the_target_matches() -> None:
    source = ClusterState("a", {"t": topic(2, retention_ms=ConfigValue("1000"))}, acls=())
    target = ClusterState("b", {"a.t": topic(2, retention_ms=ConfigValue("1000"))}, acls=())
    assert plan(flow(), source, target) == []


def test_acls_follow_mm2s_rules() -> None:
    acls = (Acl("t", "User:alice", "READ", "ALLOW"), Acl("t", "User:bob", "WRITE", "ALLOW"),
            Acl("t", "User:carol", "ALL", "ALLOW"), Acl("t", "User:mallory", "READ", "DENY"),
            Acl("t", "User:dave", "READ", "ALLOW", pattern="PREFIXED"),
            Acl("other.internal", "User:alice", "READ", "ALLOW"))
    source = ClusterState("a", {"t": topic(), "other.internal": topic()}, acls=acls)
    target = ClusterState("b", {"a.t": topic()}, acls=(Acl("a.t", "User:alice", "READ", "ALLOW"),))
    changes = plan(flow(), source, target, ["acls"])
    creates = [c.acl for c in changes if isinstance(c, CreateAcl)]
    assert creates == [Acl("a.t", "User:carol", "READ", "ALLOW"), Acl("a.t", "User:mallory", "READ", "DENY")]
    notices = [c.text for c in changes if isinstance(c, Notice)]
    assert any("DENY rule copied" in n for n in notices) and any("PREFIXED ACL" in n for n in notices)


def test_acls_are_skipped_in_one_line_without_an_authorizer() -> None:
    changes = plan(flow(), ClusterState("a", {"t": topic()}), ClusterState("b", {"a.t": topic()}), ["acls"])
    assert changes == [Notice("a has no authorizer: no ACL to sync", "acls")]


def test_disabled_syncs_plan_nothing() -> None:
    source = ClusterState("a", {"t": topic(retention_ms=ConfigValue("1"))}, acls=(Acl("t", "U:x", "READ", "ALLOW"),))
    target = ClusterState("b", {"a.t": topic()}, acls=())
    f = flow("sync.topic.configs.enabled = false\nsync.topic.acls.enabled = false\n")
    assert plan(f, source, target) == []


def test_unseen_names_exactly_the_changes_a_snapshot_does_not_show_yet() -> None:
    acl = Acl("a.t", "User:carol", "READ", "ALLOW")
    done = [CreateTopic("a.t", 3, 1, {"retention.ms": "5"}), AddPartitions("a.u", 1, 4),
            SetConfig("a.u", "cleanup.policy", None, "compact"), DeleteConfig("a.u", "retention.ms", "9"),
            CreateAcl(acl, acl), Notice("not a change")]
    before = ClusterState("b", {"a.u": topic(1, retention_ms=ConfigValue("9"))}, acls=())
    assert unseen(done, before) == done[:5]
    half = ClusterState("b", {"a.t": topic(3, retention_ms=ConfigValue("6")),
                              "a.u": topic(4, cleanup_policy=ConfigValue("compact"),
                                           retention_ms=ConfigValue("9", source="topic"))}, acls=())
    assert unseen(done, half) == [done[3], done[4]]  # a created topic is seen whatever its configs
    after = ClusterState("b", {"a.t": topic(3, retention_ms=ConfigValue("5")),
                               "a.u": topic(5, cleanup_policy=ConfigValue("compact"),
                                            retention_ms=ConfigValue("7", source="default"))}, acls=(acl,))
    assert unseen(done, after) == []
    assert unseen([CreateAcl(acl, acl)], ClusterState("b", {}, acls=None)) == [CreateAcl(acl, acl)]


def test_creations_are_cut_into_requests_a_kraft_controller_takes_in_order_and_none_lost() -> None:
    from mirrorflow.kafka.admin_sync import PARTITIONS_PER_REQUEST, batches

    creates = [CreateTopic(f"src.t{i:04d}", 12, 1, {}) for i in range(2_000)] + [CreateTopic("src.huge", 12_000, 1, {})]
    runs = batches(creates, lambda c: c.partitions, PARTITIONS_PER_REQUEST)
    assert [c for run in runs for c in run] == creates
    assert all(sum(c.partitions for c in run) <= PARTITIONS_PER_REQUEST for run in runs[:-1])
    assert runs[-1] == [CreateTopic("src.huge", 12_000, 1, {})]  # larger than a request: one of its own
    assert len(runs) == 6 and PARTITIONS_PER_REQUEST <= 10_000
