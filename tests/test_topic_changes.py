"""The stream's topic housekeeping (jobs/topic_changes): with its source out of reach (a cut link, no broker there),
and making remote topics ahead of the batches on real brokers."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from mirrorflow.jobs import topic_changes
from mirrorflow.jobs.driver_writes import DriverWrites
from mirrorflow.jobs.topic_changes import TopicChanges
from mirrorflow.kafka import admin_sync
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model import config
from mirrorflow.rules.flow_state import FlowState
from mirrorflow.status import metrics
from support.clusters import PORTS, clusters_text
from support.streams import QUIET, create_topic

NOWHERE = "127.0.0.1:9"  # the discard port: nothing listens there


def _changes(tmp_path: Path) -> TopicChanges:
    cfg = tmp_path / "mm2.properties"
    cfg.write_text(f"clusters = away, home\naway.bootstrap.servers = {NOWHERE}\nhome.bootstrap.servers = {NOWHERE}\n"
                   "away->home.enabled = true\naway->home.topics = orders\n")
    link = FlowLink.of(config.load(cfg), "away->home")
    state = FlowState(anchor_limit=100, anchor_spacing=10)
    state.upstream_next[("orders", 0)] = 5
    flow_metrics = metrics.FlowMetrics("away->home", "away", "home")
    return TopicChanges(link, state, flow_metrics, DriverWrites(link, lambda: None), lambda _: None, lambda _: None)


def test_a_prune_while_the_source_is_out_of_reach_waits_for_its_next_turn_and_keeps_the_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(admin_sync, "TIMEOUT_S", 1.0)
    changes = _changes(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert changes.prune() == []
    assert "not pruned" in caplog.text and "tried again in 60 s" in caplog.text
    assert changes.state.upstream_next == {("orders", 0): 5}
    caplog.clear()
    assert changes.prune() == []  # not due again before the interval: no second look at the source
    assert caplog.text == ""


def test_parts_cut_topics_in_order_into_runs_of_about_so_many_partitions() -> None:
    counts = {"b": 12, "a": 12, "d": 30, "c": 1}
    assert list(topic_changes._parts(counts, 13)) == [{"a": 12, "b": 12}, {"c": 1, "d": 30}]
    assert list(topic_changes._parts(counts, 1)) == [{t: counts[t]} for t in "abcd"]
    assert list(topic_changes._parts({}, 5)) == []


@pytest.mark.kafka
def test_a_batch_waits_only_for_the_remote_topics_it_moves_while_the_rest_are_made_ahead_in_topic_order(
        local_clusters: config.MirrorConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tag = uuid.uuid4().hex[:8]
    topics = [f"ahead.{tag}.{i}" for i in range(3)]
    alpha, beta = f"127.0.0.1:{PORTS['alpha']}", f"127.0.0.1:{PORTS['beta']}"
    for t in topics:
        create_topic(alpha, t, 2)
    cfg = tmp_path / "mm2.properties"
    cfg.write_text(clusters_text() + f"alpha->beta.topics = ahead\\.{tag}\\..*\n")
    link = FlowLink.of(config.load(cfg), "alpha->beta")
    writes = DriverWrites(link, lambda: None)
    monkeypatch.setattr(writes, "write", lambda records: None)  # incarnation records: not this test's
    changes = TopicChanges(link, FlowState(anchor_limit=100, anchor_spacing=10),
                           metrics.FlowMetrics(link.name, "alpha", "beta"), writes, lambda _: None, lambda _: None)
    monkeypatch.setattr(topic_changes, "AHEAD_PARTITIONS", 2)  # a topic a part
    made: list[list[str]] = []
    go_on = threading.Event()
    ensure = admin_sync.ensure_remote_topics

    def held_after_the_first_part(flow: Any, source: Any, target: Any, partitions: Mapping[str, int]) -> Any:
        if made:
            assert go_on.wait(60)
        made.append(sorted(partitions))
        return ensure(flow, source, target, partitions)

    monkeypatch.setattr(admin_sync, "ensure_remote_topics", held_after_the_first_part)
    changes.create_ahead()
    starts = {(t, p): 0 for t in topics for p in range(2)}
    _, replicated = changes.prepare_batch({**starts, (topics[0], 1): 5}, starts)
    assert replicated == {topics[0]: 2}  # the others move nothing: left out while they are made
    on_target = AdminClient({"bootstrap.servers": beta, **QUIET}).list_topics(timeout=10).topics
    assert f"alpha.{topics[0]}" in on_target and f"alpha.{topics[2]}" not in on_target
    go_on.set()
    flow_topics, replicated = changes.prepare_batch({**starts, (topics[2], 0): 3}, starts)
    assert flow_topics == set(topics) and replicated == {t: 2 for t in topics}
    # (the flow replicates the shared source's heartbeats topics too: made after these, in their own parts)
    assert [part for part in made if set(part) <= set(topics)] == [[topics[0]], [topics[1]], [topics[2]]]
    on_target = AdminClient({"bootstrap.servers": beta, **QUIET}).list_topics(timeout=10).topics
    assert all(len(on_target[f"alpha.{t}"].partitions) == 2 for t in topics)
