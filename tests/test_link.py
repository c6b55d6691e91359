"""A flow's link: what it derives from (config, flow) once, and the writer spec built from it (pure: no client is
built until a job asks for one)."""

from __future__ import annotations

import pytest
from mirrorflow.errors import ConfigError
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model import config
from mirrorflow.spark.writer_spec import WriterSpec

TEXT = """clusters = east, west
east.bootstrap.servers = e:9092
west.bootstrap.servers = w:9092
west.producer.linger.ms = 7
east->west.enabled = true
east->west.topics = orders.*, pay.*
east->west.topics.exclude = orders\\.tmp
west->east.enabled = false
"""


def _link(extra: str = "") -> FlowLink:
    return FlowLink.of(config.from_text(TEXT + extra), "east->west")


def test_the_link_names_the_flows_internal_topics_from_its_source_and_policy() -> None:
    link = _link()
    assert (link.syncs_topic, link.digests_topic, link.checkpoints_topic) == (
        "mirrorflow-offset-syncs.east.internal", "mirrorflow-digests.east.internal", "east.checkpoints.internal")
    assert link.remote_topic("orders") == "east.orders"
    underscored = _link("replication.policy.separator = _\n")
    assert underscored.syncs_topic == "mirrorflow-offset-syncs_east_internal"
    assert underscored.remote_topic("orders") == "east_orders"


def test_replicated_partitions_are_the_selected_topics_heartbeats_and_excluded_ones_aside() -> None:
    counts = {"orders": 2, "orders.tmp": 1, "payments": 1, "heartbeats": 1, "audit": 3, "west.orders": 1}
    assert _link().replicated_partitions(counts) == [("orders", 0), ("orders", 1), ("payments", 0)]
    assert _link().replicated_partitions(counts, lambda t: t.startswith("pay")) == [("payments", 0)]


def test_settings_are_resolved_once_and_handed_out_as_copies() -> None:
    link = _link()
    first = link.settings("target", "producer")
    assert first["bootstrap.servers"] == "w:9092" and first["linger.ms"] == "7"
    first["linger.ms"] = "0"
    assert link.settings("target", "producer")["linger.ms"] == "7"
    assert link.settings("source", "admin")["bootstrap.servers"] == "e:9092"


def test_delivery_follows_the_target_and_the_fenced_records_setting() -> None:
    assert _link().transactional and not _link().exactly_once
    assert not _link("east->west.mirrorflow.records.fenced = false\n").transactional
    eos = _link("west.exactly.once.source.support = enabled\nmirrorflow.records.fenced = false\n")
    assert eos.exactly_once and eos.transactional and eos.reads_committed


def test_a_disabled_flow_has_no_link_and_the_error_names_the_key_that_enables_it() -> None:
    with pytest.raises(ConfigError, match=r"west->east\.enabled = true"):
        FlowLink.of(config.from_text(TEXT), "west->east")


def test_a_writer_spec_takes_the_links_part_and_the_callers_fields_win() -> None:
    link = _link("east->west.mirrorflow.provenance.header.enabled = false\n")
    spec = WriterSpec.of(link, remote={"orders": "east.orders"}, upstream_next={}, ends={("orders", 0): 5},
                         downstream_next={})
    assert (spec.flow, spec.source, spec.target, spec.syncs_topic) == (
        "east->west", "east", "west", "mirrorflow-offset-syncs.east.internal")
    assert spec.transactional and not spec.provenance
    assert spec.producer_settings == link.settings("target", "producer")
    assert spec.source_admin_settings["bootstrap.servers"] == "e:9092"
    assert not WriterSpec.of(link, remote={}, upstream_next={}, ends={}, downstream_next={}, transactional=False
                             ).transactional
    assert "linger.ms" not in repr(spec) and "e:9092" not in repr(spec)  # settings hold secrets: never in a repr


def test_admin_clients_are_built_once_per_side_and_overrides() -> None:
    link = _link()
    assert link.source_admin is link.admin("source") is not link.target_admin
    probe = link.admin("source", **{"socket.timeout.ms": 10_000})
    assert probe is link.admin("source", **{"socket.timeout.ms": 10_000}) and probe is not link.source_admin
